package testserver

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// applyFunc performs a mutation's business change inside the key's
// transaction and returns the answer to store. A business refusal
// (insufficient stock) is an answer, not an error: it is stored and
// replayed like a success. An error means the database failed; the
// transaction is rolled back and nothing is stored. On PostgreSQL the
// transaction may run more than once (see store.inTx): apply must do
// nothing outside it.
type applyFunc func(ctx context.Context, tx *txn, now time.Time) (response, error)

// serveAtomic runs a mutation whose whole effect is local to the database,
// as one transaction (rule S3):
//
//	BEGIN IMMEDIATE (SQLite) or BEGIN ISOLATION LEVEL SERIALIZABLE (PostgreSQL)
//	  look the key up       -> found: replay, 422 or 409, and stop
//	  apply the change      (reserve stock, set stock, ...)
//	  insert the key row    with fingerprint and answer, finished
//	COMMIT
//
// On SQLite, BEGIN IMMEDIATE takes the write lock first, so two requests
// with the same key are serialised: the second one finds the first one's
// row and replays it. On PostgreSQL, SERIALIZABLE gives the same outcome
// across replicas: of two transactions that both found no row, one fails
// (a serialization failure, or a deadlock) and runs again, and then finds
// the other's row. No in-flight lock is needed; the transaction is the
// lock.
//
// One collision escapes SERIALIZABLE: two requests with one key and
// different bodies (a key reused at once, on two replicas) whose business
// rows do not otherwise conflict. The second one's INSERT of its business
// row waits for the first one's row under the same key, and fails with a
// unique violation once the first commits, before it reaches the key row.
// That transaction runs once more, and then finds the first one's key row
// and answers from it (422, replay or 409). A second unique violation is a
// real error.
func (s *Server) serveAtomic(w http.ResponseWriter, r *http.Request, m *mutation, apply applyFunc) {
	ctx, cancel := s.workContext(r)
	defer cancel()

	var (
		resp    response
		found   bool
		row     keyRow
		now     time.Time
		unkeyed = s.cfg.DisableIdempotency
	)
	run := func(tx *txn) error {
		now = s.cfg.Now()
		if !unkeyed {
			var err error
			row, found, err = loadKey(ctx, tx, m.scope, m.key)
			if err != nil || found {
				return err
			}
		}
		var err error
		if resp, err = apply(ctx, tx, now); err != nil {
			return err
		}
		if !unkeyed {
			if _, err := insertKey(ctx, tx, m, now, pointFinished, "", &resp); err != nil {
				return err
			}
		}
		if s.beforeCommit(w, m) {
			return errRolledBack
		}
		return nil
	}
	err := s.db.inTx(ctx, run)
	if err != nil && !unkeyed && uniqueViolation(err) {
		s.db.retries.Add(1)
		err = s.db.inTx(ctx, run)
	}
	switch {
	case errors.Is(err, errRolledBack):
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	case found:
		v := s.judge(row, m, now)
		if v == verdictResume {
			// Only multi-phase requests leave unfinished rows, and their
			// fingerprint (method and path) cannot match this request.
			v = verdictMismatch
		}
		s.answerExisting(w, r, v, row, now)
		return
	}
	s.deliver(w, m, resp)
}
