package main

// What the demo's careful job tells the demo, one line at a time on its
// stdout, so that the demo can draw progress, pick the moment to kill it,
// and know where each row stood when it did:
//
//	start RECORDED         the done file as the process opened it: rows skipped
//	sent ID KEY            an attempt of the invoice's charge is about to be sent under KEY
//	answer ID              the charge's 201 arrived, its body read in full
//	recorded ID            the invoice is in the done file, fsync'd
//	gaveup ID              retrying stopped without a 201: sent again next round
//	round RECORDED FAILED  a pass over the rows left ended
//
// Every line is written with one write(2) before the step it tells of
// happens (sent) or once it has happened (the others), so a request the
// server sees was reported first, and a kill loses no line that was
// written.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Kinds of the careful job's lines.
const (
	carefulLineStart    = "start"
	carefulLineSent     = "sent"
	carefulLineAnswer   = "answer"
	carefulLineRecorded = "recorded"
	carefulLineGaveUp   = "gaveup"
	carefulLineRound    = "round"
)

// carefulReport writes the careful job's lines; its methods may be called
// from any goroutine. The first write error is kept, and later lines are
// not written.
type carefulReport struct {
	mu   sync.Mutex
	w    io.Writer
	werr error
}

func (r *carefulReport) line(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.werr == nil {
		_, r.werr = fmt.Fprintf(r.w, format+"\n", args...)
	}
}

func (r *carefulReport) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.werr
}

func (r *carefulReport) start(recorded int)  { r.line("%s %d", carefulLineStart, recorded) }
func (r *carefulReport) sent(id, key string) { r.line("%s %s %s", carefulLineSent, id, key) }
func (r *carefulReport) answer(id string)    { r.line("%s %s", carefulLineAnswer, id) }
func (r *carefulReport) recorded(id string)  { r.line("%s %s", carefulLineRecorded, id) }
func (r *carefulReport) gaveUp(id string)    { r.line("%s %s", carefulLineGaveUp, id) }
func (r *carefulReport) round(recorded, failed int) {
	r.line("%s %d %d", carefulLineRound, recorded, failed)
}

// carefulEvent is one line of the careful job's report.
type carefulEvent struct {
	kind     string
	id, key  string // sent: both; answer, recorded, gaveup: id
	recorded int    // start, round
	failed   int    // round
}

// parseCarefulEvent parses one line of the careful job's report.
func parseCarefulEvent(line string) (carefulEvent, error) {
	f := strings.Fields(line)
	bad := func() (carefulEvent, error) {
		return carefulEvent{}, fmt.Errorf("unexpected line from the careful job: %q", line)
	}
	num := func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 0
	}
	if len(f) == 0 {
		return bad()
	}
	ev := carefulEvent{kind: f[0]}
	ok := true
	switch {
	case ev.kind == carefulLineStart && len(f) == 2:
		ev.recorded, ok = num(f[1])
	case ev.kind == carefulLineSent && len(f) == 3:
		ev.id, ev.key = f[1], f[2]
	case (ev.kind == carefulLineAnswer || ev.kind == carefulLineRecorded || ev.kind == carefulLineGaveUp) && len(f) == 2:
		ev.id = f[1]
	case ev.kind == carefulLineRound && len(f) == 3:
		var ok2 bool
		ev.recorded, ok = num(f[1])
		ev.failed, ok2 = num(f[2])
		ok = ok && ok2
	default:
		ok = false
	}
	if !ok {
		return bad()
	}
	return ev, nil
}
