package idemserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// errRaced: a key row that the transaction's look-up did not find was
// there when it claimed the key (a concurrent request committed it in
// between). The transaction runs again, like a serialization failure.
var errRaced = errors.New("idemserver: the key was stored by another request while this one claimed it")

// errRolledBack, from a transaction's function, rolls it back: the
// handler answered >= 500, and that answer is sent unstored.
var errRolledBack = errors.New("idemserver: rolled back")

// panicked carries a handler's panic out of its transaction, which rolls
// back, to be raised again; stack is the handler's, where it panicked.
type panicked struct {
	value any
	stack []byte
}

func (p *panicked) Error() string { return fmt.Sprint("idemserver: handler panicked: ", p.value) }

// call runs h with buf for its answer, turning a panic into *panicked. It
// returns errAnsweredAround when h answered on out, the writer idemserver
// answers on, instead of on buf, and errNoAnswer when h wrote nothing.
func call(h http.Handler, out http.ResponseWriter, buf *buffer, r *http.Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicked{v, debug.Stack()}
		}
	}()
	h.ServeHTTP(buf, r)
	switch {
	case answeredAround(out):
		return errAnsweredAround
	case !buf.wrote:
		return errNoAnswer
	}
	return nil
}

// errNoAnswer: the handler returned without writing anything, not even a
// status. Its transaction rolls back, and the request gets 500.
var errNoAnswer = errors.New("idemserver: the handler wrote no answer, not even a status, so nothing was stored and " +
	"its work was rolled back; a handler answers on the writer idemserver gives it (under echo.WrapMiddleware, an error " +
	"the handler returns is answered by echo after idemserver has finished: use package idemecho)")

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
//	BEGIN IMMEDIATE (SQLite), else READ COMMITTED (or SERIALIZABLE: Route.Serializable)
//	  look the key up    -> found: replay, 422 or 409, and stop
//	  claim the key      insert its row, unfinished, if it has none
//	                     -> it has one now: run the transaction again
//	  run the handler    with Tx, its answer buffered
//	  store the answer   in the key row
//	COMMIT, then send the answer
//
// The transaction is the lock: on SQLite BEGIN IMMEDIATE serialises two
// requests under one key, and the second finds the first one's row. On
// PostgreSQL and MySQL the claim is: a concurrent request under the key
// waits at its own insert of the key row until the first ends, then finds
// that it inserted nothing (or fails to serialize) and runs again, finding
// the first one's row, or, if the first rolled back, claims the key
// itself. A duplicate
// therefore never runs the handler. A unique violation on a business row
// carrying the key (a key row in another table) reruns once too.
func (k *Keys) serveAtomic(w http.ResponseWriter, r *http.Request, req *request, h http.Handler) {
	ctx, cancel := workContext(r, k.cfg.WorkTimeout)
	defer cancel()
	pool := &poolWatch{k: k}
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
		st.conflicted() // one of an earlier run's statements
		var id int64
		if keyed {
			var err error
			if row, found, err = k.load(ctx, tx, req.principal, req.key); err != nil || found {
				return err
			}
			var claimed bool
			if id, claimed, err = k.claimAtomic(ctx, tx, req, now); err != nil {
				return err
			}
			if !claimed {
				return errRaced
			}
		}
		st.tx = tx
		buf = newBuffer(k.cfg.MaxResponseBytes)
		pool.handlerRuns()
		st.holding.Store(true)
		err := call(h, w, buf, withBody(r.WithContext(hctx), req.body))
		st.holding.Store(false)
		failed := st.failed()
		if met := st.conflicted(); met != nil {
			failed = met // the transaction is lost, whatever the handler made of it
		}
		if failed != nil && (err == nil || errors.Is(err, errNoAnswer)) {
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
		return k.finishAtomic(ctx, tx, id, &resp)
	}
	// The transaction's context names the request to the database's
	// glue, which tells it a statement run outside it (SQLite's).
	tctx := sqlkit.WithWork(ctx, st)
	err := k.inTx(tctx, req.level, run)
	if err != nil && keyed && k.class(err) == sqlkit.Unique {
		k.stats.reruns.Add(1)
		err = k.inTx(tctx, req.level, run)
	}
	st.tx = nil
	switch {
	case err != nil:
		k.atomicFailed(ctx, w, r, err, buf, pool)
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

// atomicFailed answers an atomic request whose transaction committed
// nothing, err saying why: ctx, the request's work context, tells
// whether Config.WorkTimeout passed; buf holds the handler's answer, if
// it ran; pool tells whether the handler waited for the pool.
func (k *Keys) atomicFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, err error, buf *buffer, pool *poolWatch) {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", err, context.Cause(ctx)) // Config.WorkTimeout passed: 503
	}
	var p *panicked
	switch {
	case errors.As(err, &p):
		k.stats.rolledBack.Add(1)
		k.panicked(w, r, p)
	case errors.Is(err, errAnsweredAround):
		k.answeredAround(w, r, err)
	case errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		if errors.Is(err, errRolledBack) {
			k.stats.rolledBack.Add(1)
		}
		k.timedOut(w, r, err, pool)
	case errors.Is(err, errNoAnswer):
		k.stats.rolledBack.Add(1)
		k.noAnswer(w, r, err)
	case errors.Is(err, errRolledBack):
		k.stats.rolledBack.Add(1)
		buf.send(w)
	default:
		k.fail(w, r, err)
	}
}
