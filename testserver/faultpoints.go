package testserver

import (
	"context"
	"net/http"
	"time"
)

// The points in a request where injected faults act. A handler calls them
// in this order: delayed (before any work), beforeCommit (inside the final
// transaction), deliver (after the commit, instead of writing the answer).

// startWork draws the fault of a mutation about to be worked on and
// applies a delay fault. It reports false if the request has been answered
// and must stop.
func (s *Server) startWork(ctx context.Context, w http.ResponseWriter, m *mutation) bool {
	m.fault = s.dice.draw()
	return s.delayed(ctx, w, m)
}

// delayed applies a delay fault. It reports false if the wait was cut short
// because the client went away or the server is closing; the request has
// been answered then and must stop.
func (s *Server) delayed(ctx context.Context, w http.ResponseWriter, m *mutation) bool {
	if m.fault.kind != faultDelay {
		return true
	}
	s.stats.fault(faultDelay)
	t := time.NewTimer(s.dice.faults.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	writeProblem(w, problem(http.StatusServiceUnavailable, ProblemUnavailable, "Request abandoned", "the request was abandoned while delayed"))
	return false
}

// beforeCommit applies a fault that stops the request inside its final
// transaction. It reports true if it answered the request; the caller must
// then roll back and return. An error answer is 500 or 503 and is not
// stored: the rollback leaves the key as it was before the request.
func (s *Server) beforeCommit(w http.ResponseWriter, m *mutation) bool {
	switch m.fault.kind {
	case faultErrorBeforeCommit:
		s.stats.fault(faultErrorBeforeCommit)
		writeProblem(w, problem(m.fault.status, ProblemInjectedFault, "Injected fault",
			"the server failed before committing (injected); nothing was changed"))
		return true
	case faultCrashBeforeCommit:
		s.crash(w, faultCrashBeforeCommit, CrashPointBeforeCommit)
		return true
	}
	return false
}

// deliver sends the committed answer, unless a fault stands in the way: a
// hang-up, a 502 from "a proxy", or a crash. Either way the answer is stored
// and a retry gets it replayed.
func (s *Server) deliver(w http.ResponseWriter, m *mutation, resp response) {
	switch m.fault.kind {
	case faultHangUpAfterCommit:
		s.stats.fault(faultHangUpAfterCommit)
		hangUp(w)
	case faultBadGatewayAfterCommit:
		s.stats.fault(faultBadGatewayAfterCommit)
		writeProblem(w, problem(http.StatusBadGateway, ProblemInjectedFault, "Injected fault",
			"the request was committed but its answer was replaced by 502 (injected); retry with the same Idempotency-Key"))
	case faultCrashAfterCommit:
		s.crash(w, faultCrashAfterCommit, CrashPointAfterCommit)
	default:
		resp.write(w, false)
	}
}

// crash stops the request at a crash point: Config.Crash is called (a
// binary exits there), and if it returns the connection is dropped without
// an answer. The caller's deferred rollback then discards any open
// transaction, which is what SQLite does with the uncommitted part of the
// WAL when a process dies.
func (s *Server) crash(w http.ResponseWriter, kind faultKind, point string) {
	s.stats.fault(kind)
	s.log.Warn("injected crash", "point", point)
	if s.cfg.Crash != nil {
		s.cfg.Crash(point)
	}
	hangUp(w)
}

// hangUp closes the client's connection without writing a response. Where
// the connection cannot be hijacked (HTTP/2, a recorder) it aborts the
// handler the way net/http documents for that, with http.ErrAbortHandler.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
