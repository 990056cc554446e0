package testserver

import (
	"context"
	"net/http"
	"time"
)

// The points in a request where injected faults act, in this order:
// delayed (before any work, see Server.mutating), beforeCommit (inside
// the final transaction, called by the handler), and afterCommit (around
// the layer, when it sends the committed answer).

// delayed applies a delay fault. It reports false if the wait was cut short
// because the client went away or the server is closing; the request has
// been answered then and must stop.
func (s *Server) delayed(ctx context.Context, w http.ResponseWriter, wk *work) bool {
	if wk.fault.kind != faultDelay {
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
// stored: the rollback leaves the key as it was before the request. A
// crash panics with http.ErrAbortHandler (once Config.Crash returns): the
// layer rolls back and keeps a charge's claim, as a crash would.
func (s *Server) beforeCommit(w http.ResponseWriter, wk *work) bool {
	switch wk.fault.kind {
	case faultErrorBeforeCommit:
		s.stats.fault(faultErrorBeforeCommit)
		writeProblem(w, problem(wk.fault.status, ProblemInjectedFault, "Injected fault",
			"the server failed before committing (injected); nothing was changed"))
		return true
	case faultCrashBeforeCommit:
		s.crash(w, faultCrashBeforeCommit, CrashPointBeforeCommit)
		return true
	}
	return false
}

// crash stops the request at a crash point: Config.Crash is called (a
// binary exits there), and if it returns the connection is dropped without
// an answer. Inside the layer, which buffers the answer, that is a panic
// with http.ErrAbortHandler: the layer rolls the open transaction back,
// which is what SQLite does with the uncommitted part of the WAL when a
// process dies.
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
