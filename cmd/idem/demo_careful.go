package main

// The other half of the demo: the same batch without idem, as a careful
// user writes it (demo_careful_job.go), in a process of its own that the
// demo kills at the same point as the idem batch and starts again. The
// demo follows its report, and reads its done file after the kill, to know
// where every row stood at the kill: recorded done, in flight (sent, no
// answer yet), or answered but not yet recorded.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// carefulRun is how the careful job went, as its processes reported it.
type carefulRun struct {
	Processes int
	Rounds    int
	Recorded  int // rows recorded done in the end
	Elapsed   time.Duration
	// Kill is where the rows stood when the first process was killed.
	Kill killSplit
	// Keys holds, for each process in order, the key each invoice was
	// sent under by that process.
	Keys []map[string]string
}

// killSplit is where a batch's rows stood when its first process was
// killed.
type killSplit struct {
	Killed   bool
	Recorded int // rows recorded done at the kill
	// InFlight holds the rows sent but not answered (for idem: the
	// journal's pending operations, answered or not).
	InFlight map[string]bool
	// Unrecorded holds the rows answered but not yet recorded done; nil
	// when the batch does not tell them from InFlight.
	Unrecorded map[string]bool
}

// carefulBatch runs the careful job's processes.
type carefulBatch struct {
	exe    string // the executable to run as the job
	url    string
	done   string // the job's done file
	ops    int
	killAt int       // kill the first process once this many rows are recorded; 0: never
	log    io.Writer // gets the job's report, the demo's own lines marked; nil: nothing
	screen *screen

	explained bool // a round said why rows were left for the next
}

// Lines the demo adds to the log of the careful job's report.
const (
	carefulLogProcess = "# process" // then its number: a process starts
	carefulLogKill    = "# kill"    // the demo sent SIGKILL
)

// run runs the job to the end: a first process, killed at killAt, then a
// second one that skips the rows in the done file and runs the others.
func (b *carefulBatch) run(ctx context.Context) (carefulRun, error) {
	start := time.Now()
	var r carefulRun
	b.screen.startBar(b.ops, "careful")
	defer b.screen.endBar()
	for {
		r.Processes++
		killed, err := b.runProcess(ctx, &r)
		if err != nil {
			return r, err
		}
		if !killed {
			break
		}
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// runProcess runs one process of the job to its end, or until it is
// killed (only the first one is), following its report.
func (b *carefulBatch) runProcess(ctx context.Context, r *carefulRun) (killed bool, err error) {
	cmd := exec.CommandContext(ctx, b.exe, carefulJobArgs(b.url, b.done, b.ops)...)
	cmd.Env = append(os.Environ(), demoBatchEnv+"="+demoBatchCareful)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, fmt.Errorf("starting the careful job: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting the careful job: %w", err)
	}
	b.logLine(fmt.Sprintf("%s %d", carefulLogProcess, r.Processes))
	kill := b.killAt > 0 && r.Processes == 1
	keys := map[string]string{}
	r.Keys = append(r.Keys, keys)
	answered := map[string]bool{}
	skipped, recorded := 0, 0
	var protoErr error
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		b.logLine(sc.Text())
		ev, err := parseCarefulEvent(sc.Text())
		if err == nil && ev.kind == carefulLineSent && keys[ev.id] != "" && keys[ev.id] != ev.key {
			err = fmt.Errorf("the careful job sent %s under two keys in one process", ev.id)
		}
		if err != nil {
			protoErr = err
			cmd.Process.Kill()
			break
		}
		switch ev.kind {
		case carefulLineStart:
			skipped = ev.recorded
		case carefulLineSent:
			keys[ev.id] = ev.key
		case carefulLineAnswer:
			answered[ev.id] = true
		case carefulLineRecorded:
			recorded++
			b.screen.set(skipped + recorded)
		case carefulLineRound:
			r.Rounds++
			b.sayRound(r.Rounds, ev)
		}
		if r.Processes > 1 && ev.kind == carefulLineStart {
			b.sayRestart(ev.recorded, r.Kill)
		}
		if kill && !killed && recorded >= b.killAt {
			if err := cmd.Process.Kill(); err == nil { // SIGKILL on Unix
				killed = true
				r.Rounds++
				b.logLine(carefulLogKill)
				b.screen.say("  round %d: killed the job (SIGKILL) at %d/%d recorded done — starting it again on its done file", r.Rounds, recorded, b.ops)
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
		r.Kill, err = b.split(keys, answered, recorded)
		return true, err
	case werr != nil:
		return false, fmt.Errorf("the careful job failed: %w\n%s", werr, strings.TrimSpace(stderr.String()))
	case sc.Err() != nil:
		return false, fmt.Errorf("reading the careful job: %w", sc.Err())
	}
	if kill {
		b.screen.say("  the job ended before %d rows were recorded done, so it was not killed", b.killAt)
	}
	r.Recorded = skipped + recorded
	return false, nil
}

// split tells where the rows of the killed first process stood, from
// what it reported (the keys it sent rows under, the rows it had answers
// for) and what its done file holds: the file, not the report, says what
// the next process skips, since the kill may fall between a row's fsync
// and its line.
func (b *carefulBatch) split(keys map[string]string, answered map[string]bool, reported int) (killSplit, error) {
	done, err := readDoneFile(b.done)
	if err != nil {
		return killSplit{}, err
	}
	s := killSplit{Killed: true, Recorded: len(done), InFlight: map[string]bool{}, Unrecorded: map[string]bool{}}
	if len(done) < reported {
		return s, fmt.Errorf("the careful job reported %d rows recorded, its done file holds %d", reported, len(done))
	}
	for id := range done {
		if !answered[id] {
			return s, fmt.Errorf("the careful job's done file holds %s, which it had no answer for", id)
		}
	}
	for id := range keys {
		switch {
		case done[id]:
		case answered[id]:
			s.Unrecorded[id] = true
		default:
			s.InFlight[id] = true
		}
	}
	return s, nil
}

// logLine copies a line to the log, if any; a log that fails is dropped,
// since the demo does not need it.
func (b *carefulBatch) logLine(line string) {
	if b.log == nil {
		return
	}
	if _, err := io.WriteString(b.log, line+"\n"); err != nil {
		b.log = nil
	}
}

// sayRestart tells what the second process found.
func (b *carefulBatch) sayRestart(recorded int, k killSplit) {
	msg := fmt.Sprintf("  the done file holds %d rows, skipped; the other %d run under new keys", recorded, b.ops-recorded)
	if n := len(k.InFlight) + len(k.Unrecorded); n > 0 {
		msg += fmt.Sprintf(", %d of them sent before the kill (%d without an answer yet, %d answered but not yet recorded)", n, len(k.InFlight), len(k.Unrecorded))
	}
	b.screen.say("%s", msg)
}

// sayRound tells how a pass over the rows left ended.
func (b *carefulBatch) sayRound(n int, ev carefulEvent) {
	msg := fmt.Sprintf("  round %d: %d/%d recorded done", n, ev.recorded, b.ops)
	if ev.failed > 0 {
		msg += fmt.Sprintf(", %d gave up", ev.failed)
		if !b.explained {
			msg += " (retries ran out: sent again in the next round, under the same key)"
			b.explained = true
		}
	}
	b.screen.say("%s", msg)
}

// chargedUnderBothKeys returns how many invoices the server charged
// exactly twice: once under the key the job's first process sent it
// under, once under the key of its second.
func chargedUnderBothKeys(keys chargeKeys, processKeys []map[string]string) int {
	if len(processKeys) < 2 {
		return 0
	}
	n := 0
	for ref, ks := range keys {
		k1, k2 := processKeys[0][ref], processKeys[1][ref]
		if len(ks) == 2 && k1 != "" && k2 != "" && k1 != k2 &&
			(ks[0] == k1 && ks[1] == k2 || ks[0] == k2 && ks[1] == k1) {
			n++
		}
	}
	return n
}
