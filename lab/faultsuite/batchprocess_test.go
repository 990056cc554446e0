package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// batchProcess is one life of the batch client, re-executed from the test
// binary. Its events go to a Recorder; its other lines are kept.
type batchProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped and its output read
	err    error         // the exit status, set before exited is closed
	stderr bytes.Buffer

	progress *progress // counts the outcomes reported

	mu      sync.Mutex
	lines   []string // lines that are not events
	readErr error
}

// startBatch starts a batch child with cfg, its events going to rec.
func startBatch(t *testing.T, cfg batchChildConfig, rec Recorder) *batchProcess {
	t.Helper()
	skipScenario(t)
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &batchProcess{exited: make(chan struct{}), progress: newProgress(rec)}
	b.cmd = exec.Command(os.Args[0], "-test.run=^$")
	b.cmd.Env = append(os.Environ(), batchChildEnv+"="+string(js))
	b.cmd.Stderr = &b.stderr
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := ReadEvents(out, b.progress, func(line string) {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "recorded" {
				if res, ok := parseResult(f[2]); ok {
					rec.Outcome(f[1], res) // an outcome, but not progress
					return
				}
			}
			b.mu.Lock()
			b.lines = append(b.lines, line)
			b.mu.Unlock()
		})
		b.mu.Lock()
		b.readErr = err
		b.mu.Unlock()
		b.err = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() { b.kill() })
	return b
}

// waitOutcomes waits until the child has reported n outcomes, or exits,
// or ctx ends. It reports whether the child is still running.
func (b *batchProcess) waitOutcomes(ctx context.Context, n int) (bool, error) {
	return b.progress.waitFor(ctx, n, b.exited)
}

// kill sends SIGKILL, if the child still runs, and waits for it.
func (b *batchProcess) kill() {
	select {
	case <-b.exited:
		return
	default:
	}
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
}

// wait waits for the child to exit on its own, or ctx to end (then it is
// killed), and returns its exit status.
func (b *batchProcess) wait(ctx context.Context) error {
	select {
	case <-b.exited:
		return b.err
	case <-ctx.Done():
		b.kill()
		return fmt.Errorf("batch child still running: %w", ctx.Err())
	}
}

// outputLines returns the lines that were not events, and the error of
// reading them.
func (b *batchProcess) outputLines() ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...), b.readErr
}

// journalError returns the journal error the child reported, or "".
func (b *batchProcess) journalError() string {
	lines, _ := b.outputLines()
	for _, l := range lines {
		if s, ok := strings.CutPrefix(l, "journal-error "); ok {
			return s
		}
	}
	return ""
}

// opened reports whether the child reported its journal open.
func (b *batchProcess) opened() bool {
	lines, _ := b.outputLines()
	for _, l := range lines {
		if strings.HasPrefix(l, "opened ") {
			return true
		}
	}
	return false
}

// truncatedOnOpen returns the torn-tail bytes the child reported cutting
// when it opened its journal, or 0.
func (b *batchProcess) truncatedOnOpen() int64 {
	v, _ := b.field("opened", "truncated")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// field returns the value of key= on the child's first line that starts
// with the word kind, and whether there was one.
func (b *batchProcess) field(kind, key string) (string, bool) {
	lines, _ := b.outputLines()
	for _, l := range lines {
		if !strings.HasPrefix(l, kind+" ") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, key+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}
