package idemserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// errRolledBack, from a transaction's function, rolls it back: the
// handler answered >= 500, and that answer is sent unstored.
var errRolledBack = errors.New("idemserver: rolled back")

// panicked carries a handler's panic out of its transaction, which rolls
// back, to be raised again.
type panicked struct{ value any }

func (p *panicked) Error() string { return fmt.Sprint("idemserver: handler panicked: ", p.value) }

// call runs h with buf for its answer, turning a panic into *panicked. It
// returns errAnsweredAround when h answered on out, the writer idemserver
// answers on, instead of on buf.
func call(h http.Handler, out http.ResponseWriter, buf *buffer, r *http.Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicked{v}
		}
	}()
	h.ServeHTTP(buf, r)
	if answeredAround(out) {
		return errAnsweredAround
	}
	return nil
}

// errAnsweredAround: the handler sent its answer to the client itself,
// around idemserver, which could not store it. Its transaction rolls back,
// and the error is logged.
var errAnsweredAround = errors.New("idemserver: the handler answered on the server's own writer, not on the one " +
	"idemserver gave it, so nothing was stored and its work was rolled back; a framework's handler that writes to the " +
	"framework's writer (gin's c.JSON) needs the framework's adapter (package idemgin)")

// answeredAround reports whether something answered on w, the writer a
// framework gave idemserver, while the handler ran: a framework whose
// writer says so (gin's, by Written) tells. A plain net/http writer cannot
// tell; a handler must answer on the writer it is given.
func answeredAround(w http.ResponseWriter) bool {
	written, ok := w.(interface{ Written() bool })
	return ok && written.Written()
}

// workContext is the context of a request's database work: detached from
// the client (one that goes away does not cancel a commit half-way), and
// bounded by d.
func workContext(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), d)
}

// serveAtomic serves an atomic route, as one transaction:
//
//	BEGIN IMMEDIATE (SQLite) or SERIALIZABLE (PostgreSQL)
//	  look the key up    -> found: replay, 422 or 409, and stop
//	  run the handler    with Tx, its answer buffered
//	  insert the key row with fingerprint and answer
//	COMMIT, then send the answer
//
// The transaction is the lock: on SQLite BEGIN IMMEDIATE serialises two
// requests under one key, and the second finds the first one's row; on
// PostgreSQL, of two transactions that both found no row, one fails (a
// serialization failure, a deadlock, or a unique violation on the key
// row or on a business row carrying the key) and runs again, handler
// included, and then finds the other's row.
func (k *Keys) serveAtomic(w http.ResponseWriter, r *http.Request, req *request, h http.Handler) {
	ctx, cancel := workContext(r, k.cfg.WorkTimeout)
	defer cancel()
	keyed := req.key != ""
	st := &state{k: k, req: req, seed: req.seed}
	hctx := st.context(ctx)
	var (
		buf   *buffer
		found bool
		row   keyRow
		now   time.Time
	)
	run := func(tx sqlkit.Tx) error {
		now = k.cfg.Now()
		found = false
		if keyed {
			var err error
			if row, found, err = k.load(ctx, tx, req.principal, req.key); err != nil || found {
				return err
			}
		}
		st.tx = tx
		buf = newBuffer(k.cfg.MaxResponseBytes)
		err := call(h, w, buf, withBody(r.WithContext(hctx), req.body))
		if failed := st.failed(); err == nil && failed != nil {
			err = k.dbError("the handler's work", failed)
		}
		if err != nil {
			return err
		}
		resp := buf.response()
		switch {
		case buf.over:
			return errResponseTooLarge
		case resp.Status >= 500:
			return errRolledBack
		case !keyed:
			return nil
		}
		_, err = k.insert(ctx, tx, req, now, &resp, "", 0)
		return err
	}
	err := k.inTx(ctx, sql.LevelSerializable, run)
	if err != nil && keyed && k.class(err) == sqlkit.Unique {
		k.stats.reruns.Add(1)
		err = k.inTx(ctx, sql.LevelSerializable, run)
	}
	st.tx = nil
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", err, context.Cause(ctx)) // Config.WorkTimeout passed: 503
	}
	var p *panicked
	switch {
	case errors.As(err, &p):
		k.stats.rolledBack.Add(1)
		panic(p.value)
	case errors.Is(err, errAnsweredAround):
		k.answeredAround(r, err)
	case errors.Is(err, errRolledBack):
		k.stats.rolledBack.Add(1)
		if keyed && k.answerIfStored(ctx, w, r, req) {
			return
		}
		buf.send(w)
	case err != nil:
		k.fail(w, r, err)
	case found:
		v := judge(row, req.fingerprint, now)
		if v == verdictResume {
			// Only phased routes leave unfinished rows; this one is not.
			v = verdictMismatch
		}
		k.answerExisting(w, r, v, row, now)
	default:
		if keyed {
			k.stats.stored.Add(1)
		}
		buf.send(w)
	}
}

// answerIfStored answers from the key's row if a concurrent request under
// the key committed one while this one failed: on PostgreSQL a handler's
// business row carrying the key under UNIQUE meets the other request's
// row, and the handler answers 5xx for what is in fact a duplicate. The
// retry would get the stored answer; this request gets it now.
func (k *Keys) answerIfStored(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) bool {
	row, found, err := k.load(ctx, k.db, req.principal, req.key)
	if err != nil || !found {
		return false
	}
	now := k.cfg.Now()
	v := judge(row, req.fingerprint, now)
	if v == verdictResume {
		v = verdictMismatch
	}
	k.answerExisting(w, r, v, row, now)
	return true
}
