package testserver

import (
	"context"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// applyFunc performs a mutation's business change inside the key's
// transaction and returns the answer to store. A business refusal
// (insufficient stock) is an answer, not an error: it is stored and
// replayed like a success. An error means the database failed; the
// transaction is rolled back and nothing is stored. On PostgreSQL the
// transaction may run more than once: apply must do nothing outside it.
type applyFunc func(ctx context.Context, tx *txn, now time.Time) (response, error)

// serveAtomic runs a mutation whose whole effect is local to the database
// in the transaction its key row lives in (rule S3): the layer begins it
// (BEGIN IMMEDIATE on SQLite, SERIALIZABLE on PostgreSQL) and looks the
// key up; apply makes the change; the layer stores the answer with the key
// and commits, then sends it. An answer of 500 or more rolls everything
// back and is not stored. The business table carries the key too, under a
// UNIQUE constraint: two requests with one key and different bodies on two
// replicas meet there, and the layer runs the loser again, to find the
// winner's key row and answer 422.
func (s *Server) serveAtomic(w http.ResponseWriter, r *http.Request, wk *work, apply applyFunc) {
	ctx := r.Context()
	resp, err := apply(ctx, s.txOf(ctx), s.cfg.Now())
	if err != nil {
		// The layer reruns a serialization failure, a deadlock, or a
		// unique violation on the business row carrying the key (a
		// concurrent request under it), and answers anything else 500 or
		// 503; the answer written here is for Config.DisableIdempotency.
		idemserver.Fail(ctx, err)
		s.internalError(w, r, err)
		return
	}
	if s.beforeCommit(w, wk) {
		return
	}
	resp.write(w, false)
}
