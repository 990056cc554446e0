package testserver

import (
	"context"
	"database/sql"
	"net/http"
	"time"
)

// applyFunc performs a mutation's business change inside the key's
// transaction and returns the answer to store. A business refusal
// (insufficient stock) is an answer, not an error: it is stored and
// replayed like a success. An error means the database failed; the
// transaction is rolled back and nothing is stored.
type applyFunc func(ctx context.Context, tx *sql.Tx, now time.Time) (response, error)

// serveAtomic runs a mutation whose whole effect is local to the database,
// as one transaction (rule S3):
//
//	BEGIN IMMEDIATE
//	  look the key up       -> found: replay, 422 or 409, and stop
//	  apply the change      (reserve stock, set stock, ...)
//	  insert the key row    with fingerprint and answer, finished
//	COMMIT
//
// BEGIN IMMEDIATE takes the write lock first, so two requests with the same
// key are serialised: the second one finds the first one's row and replays
// it. No in-flight lock is needed; the transaction is the lock.
func (s *Server) serveAtomic(w http.ResponseWriter, r *http.Request, m *mutation, apply applyFunc) {
	ctx, cancel := s.workContext(r)
	defer cancel()
	tx, err := s.db.write.BeginTx(ctx, nil)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	defer tx.Rollback() // after Commit, a no-op

	now := s.cfg.Now()
	if s.cfg.DisableIdempotency {
		s.serveUnkeyed(ctx, w, r, tx, m, now, apply)
		return
	}
	row, found, err := loadKey(ctx, tx, m.scope, m.key)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if found {
		v := s.judge(row, m, now)
		tx.Rollback()
		if v == verdictResume {
			// Only multi-phase requests leave unfinished rows, and their
			// fingerprint (method and path) cannot match this request.
			v = verdictMismatch
		}
		s.answerExisting(w, r, v, row, now)
		return
	}
	resp, err := apply(ctx, tx, now)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if _, err := insertKey(ctx, tx, m, now, pointFinished, "", &resp); err != nil {
		s.internalError(w, r, err)
		return
	}
	if s.beforeCommit(w, m) {
		return
	}
	if err := tx.Commit(); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.deliver(w, m, resp)
}

// serveUnkeyed is serveAtomic without the idempotency layer (benchmarks
// only; see Config.DisableIdempotency): the change alone, in tx, committed.
func (s *Server) serveUnkeyed(ctx context.Context, w http.ResponseWriter, r *http.Request, tx *sql.Tx, m *mutation, now time.Time, apply applyFunc) {
	resp, err := apply(ctx, tx, now)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if s.beforeCommit(w, m) {
		return
	}
	if err := tx.Commit(); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.deliver(w, m, resp)
}
