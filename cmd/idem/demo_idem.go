package main

// The idem half of the demo: the batch runs in a process of its own, which
// the demo kills with SIGKILL about halfway through and starts again on the
// same journal.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// idemRun is how the idem batch went, as the batch processes reported it.
type idemRun struct {
	Processes int
	Rounds    int
	// Kill is where the operations stood when the first process was
	// killed, as the journal held them: pending ones are in flight.
	Kill     killSplit
	Done     int // operations reported done
	Rejected int // operations reported rejected
	Elapsed  time.Duration
}

// idemBatch runs the batch processes of the demo.
type idemBatch struct {
	exe     string // the executable to run as the batch process
	url     string
	journal string
	ops     int
	killAt  int // kill the first process once this many operations are done; 0: never
	screen  *screen

	explained bool // a round said why operations were left pending
}

// run runs the batch to the end: a first process, killed at killAt, then
// a second one that resumes from the journal and finishes.
func (b *idemBatch) run(ctx context.Context) (idemRun, error) {
	start := time.Now()
	var r idemRun
	done := map[string]bool{}
	rejected := map[string]bool{}
	b.screen.startBar(b.ops, "idem ")
	defer b.screen.endBar()
	for {
		r.Processes++
		killed, err := b.runProcess(ctx, &r, done, rejected)
		if err != nil {
			return r, err
		}
		if !killed {
			break
		}
	}
	r.Done, r.Rejected = len(done), len(rejected)
	r.Elapsed = time.Since(start)
	return r, nil
}

// runProcess runs one batch process to its end, or until it is killed
// (only the first one is), following its report.
func (b *idemBatch) runProcess(ctx context.Context, r *idemRun, done, rejected map[string]bool) (killed bool, err error) {
	cmd := exec.CommandContext(ctx, b.exe, demoBatchArgs(b.url, b.journal, b.ops)...)
	cmd.Env = append(os.Environ(), demoBatchEnv+"="+demoBatchIdem)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, fmt.Errorf("starting the batch process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting the batch process: %w", err)
	}
	kill := b.killAt > 0 && r.Processes == 1
	var protoErr error
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		ev, err := parseBatchEvent(sc.Text())
		if err != nil {
			protoErr = err
			cmd.Process.Kill()
			break
		}
		switch ev.kind {
		case "journal":
			if r.Processes > 1 {
				b.sayJournal(ev)
			}
		case "op":
			delete(rejected, ev.id)
			switch ev.outcome {
			case opDone:
				done[ev.id] = true
			case opRejected:
				rejected[ev.id] = true
			}
			b.screen.set(len(done) + len(rejected))
		case "round":
			r.Rounds++
			b.sayRound(r.Rounds, ev)
		}
		if kill && !killed && len(done) >= b.killAt {
			if err := cmd.Process.Kill(); err == nil { // SIGKILL on Unix
				killed = true
				r.Rounds++
				b.screen.say("  round %d: killed the batch process (SIGKILL) at %d/%d done — resuming from the journal", r.Rounds, len(done), b.ops)
			}
		}
	}
	// Read to the end (or the kill) before Wait, which closes the pipe.
	werr := cmd.Wait()
	switch {
	case protoErr != nil:
		return false, protoErr
	case ctx.Err() != nil:
		return false, ctx.Err()
	case killed:
		r.Kill, err = journalSplit(ctx, b.journal)
		return true, err
	case werr != nil:
		return false, fmt.Errorf("the batch process failed: %w\n%s", werr, strings.TrimSpace(stderr.String()))
	case sc.Err() != nil:
		return false, fmt.Errorf("reading the batch process: %w", sc.Err())
	}
	if kill {
		b.screen.say("  the batch ended before %d operations were done, so it was not killed", b.killAt)
	}
	return false, nil
}

// sayJournal tells what the journal held when the batch came back.
func (b *idemBatch) sayJournal(ev batchEvent) {
	msg := fmt.Sprintf("  the journal holds %d done, %d pending", ev.done+ev.rejected, ev.pending)
	if ev.pending > 0 {
		msg += " (sent, outcome unknown: resent under their journaled keys)"
	}
	msg += fmt.Sprintf(", %d never started", b.ops-ev.done-ev.rejected-ev.pending)
	if ev.truncated > 0 {
		msg += fmt.Sprintf("; a torn last record of %d bytes was cut", ev.truncated)
	}
	b.screen.say("%s", msg)
}

// sayRound tells how a pass over the batch ended.
func (b *idemBatch) sayRound(n int, ev batchEvent) {
	msg := fmt.Sprintf("  round %d: %d/%d done", n, ev.done, b.ops)
	if ev.rejected > 0 {
		msg += fmt.Sprintf(", %d rejected", ev.rejected)
	}
	if ev.pending > 0 {
		msg += fmt.Sprintf(", %d pending", ev.pending)
		if !b.explained {
			msg += " (the retry budget ran dry: they keep their keys for the next round)"
			b.explained = true
		}
	}
	if ev.failed > 0 {
		msg += fmt.Sprintf(", %d could not be sent", ev.failed)
	}
	b.screen.say("%s", msg)
}

// journalSplit tells where the operations of the killed first process
// stood, from its journal: done or rejected, or pending (sent, or about to
// be, with no outcome recorded: the next process resends them under their
// journaled keys). The journal cannot tell a pending operation whose answer
// arrived from one still waiting for it, nor does it need to.
func journalSplit(ctx context.Context, path string) (killSplit, error) {
	s := killSplit{Killed: true, InFlight: map[string]bool{}}
	j, err := filejournal.Open(path, filejournal.Options{ReadOnly: true})
	if err != nil {
		return s, fmt.Errorf("reading the journal after the kill: %w", err)
	}
	defer j.Close()
	ops, err := j.List(ctx, journal.ListAll)
	if err != nil {
		return s, fmt.Errorf("reading the journal after the kill: %w", err)
	}
	for _, op := range ops {
		if op.State == journal.StatePending {
			s.InFlight[op.ID] = true
		} else {
			s.Recorded++
		}
	}
	return s, nil
}
