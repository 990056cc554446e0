package idemserver

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// state is what a handler's context carries.
type state struct {
	k      *Keys
	req    *request
	seed   string // of the key row's downstream keys
	phased bool
	tx     sqlkit.Tx // atomic: the key row's transaction

	// Phased: the claim, and the final transaction once begun.
	id    int64
	token string
	lease *lease
	mu    sync.Mutex
	final sqlkit.Tx
	begun error // why the final transaction could not begin

	// Whether the claim took over an unfinished row, and whether that
	// row's earlier claim had lapsed (rather than been released).
	resumed, lapsed bool

	// What a Step learnt about the claim, whatever the handler then wrote.
	lostClaim, rowGone atomic.Bool

	failMu   sync.Mutex
	failure  error // reported by Fail
	conflict error // a serialization failure a statement of the transaction met

	// Whether the request's transaction is open and its handler running.
	holding atomic.Bool
}

// Holding reports whether the request's transaction is open and its
// handler running (sqlkit.Work).
func (st *state) Holding() bool { return st.holding.Load() }

// Misused fails the request with err, a statement the handler ran on the
// database outside its open transaction (sqlkit.Work).
func (st *state) Misused(err error) { st.fail(err) }

// Met records err, met by a statement of the request's transaction
// (sqlkit.Work), if it is a serialization failure or a deadlock and none
// is recorded: the transaction then runs again, whatever the handler
// answered.
func (st *state) Met(err error) {
	if st.k.class(err) != sqlkit.Serialization {
		return
	}
	st.failMu.Lock()
	defer st.failMu.Unlock()
	if st.conflict == nil {
		st.conflict = err
	}
}

// conflicted returns and forgets the serialization failure a statement
// of the transaction met.
func (st *state) conflicted() error {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	err := st.conflict
	st.conflict = nil
	return err
}

// fail records err as the handler's failure, unless one is recorded.
func (st *state) fail(err error) {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	if st.failure == nil {
		st.failure = err
	}
}

// failed returns and forgets the error the handler reported with Fail.
func (st *state) failed() error {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	err := st.failure
	st.failure = nil
	return err
}

// beginErr returns why the final transaction could not begin, or nil.
func (st *state) beginErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.begun
}

// reset forgets the final transaction before the handler runs again.
func (st *state) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.final, st.begun = nil, nil
	st.holding.Store(false)
	st.conflicted() // one of the last run's statements
}

type ctxKey struct{}

// context returns parent carrying st, and the transaction of st as Tx
// and the database packages' accessors find it.
func (st *state) context(parent context.Context) context.Context {
	return sqlkit.WithWork(sqlkit.WithTx(context.WithValue(parent, ctxKey{}, st), st.transaction), st)
}

func stateOf(ctx context.Context) *state {
	st, _ := ctx.Value(ctxKey{}).(*state)
	return st
}

// Tx returns the transaction of the request, on a database/sql database
// (Config.DB): on an atomic route the one its key row lives in (begun
// before the key was looked up: BEGIN IMMEDIATE on SQLite, READ COMMITTED
// on PostgreSQL and MySQL, SERIALIZABLE on a Route.Serializable route); on
// a phased route the final one, begun at the first call and fenced by the
// claim; in Config.Forget the sweep's. The handler must
// not commit or roll it back. It is nil outside idemserver, on a Store of
// another interface (postgres.Tx gives a pgxpool's), and on a phased
// route whose final transaction could not begin (the layer then answers
// 503 or 500, whatever the handler writes).
func Tx(ctx context.Context) *sql.Tx {
	tx := sqlkit.TxFrom(ctx)
	if tx == nil {
		return nil
	}
	sqlTx, _ := tx.Native().(*sql.Tx)
	return sqlTx
}

// transaction returns the request's transaction (see Tx), beginning a
// phased route's final one at the first call; nil if it could not begin.
func (st *state) transaction() sqlkit.Tx {
	if !st.phased {
		return st.tx
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final == nil && st.begun == nil {
		k := st.k
		var tx sqlkit.Tx
		tx, st.begun = k.db.Begin(sqlkit.WithWork(st.lease.ctx, st), st.req.level)
		if st.begun != nil {
			st.begun = k.dbError("beginning the final transaction", st.begun)
		} else {
			st.final = tx
			st.holding.Store(true)
		}
	}
	return st.final
}

// Fail reports that the handler's database work failed with err; the
// handler then returns, and what it writes is ignored. The transaction
// rolls back and, if err is a serialization failure or deadlock (or, on an
// atomic route under a key, a unique violation: another request's row
// carrying the same key), runs again with the handler, as a failed commit
// would; otherwise the
// request gets 503 with Retry-After (database unreachable or busy,
// Config.Reruns exhausted) or 500, and nothing is stored. Outside
// idemserver Fail does nothing. A handler that answers 5xx without Fail is
// rolled back too, but not rerun, unless Keys saw its statement fail to
// serialize (postgres.Tx, and a *sql.DB of postgres.Open or mysql.Open).
func Fail(ctx context.Context, err error) {
	st := stateOf(ctx)
	if st == nil || err == nil {
		return
	}
	st.fail(err)
}

// Key returns the principal and key of the request; ok is false outside
// idemserver and on an unkeyed request.
func Key(ctx context.Context) (principal, key string, ok bool) {
	st := stateOf(ctx)
	if st == nil || st.req.key == "" {
		return "", "", false
	}
	return st.req.principal, st.req.key, true
}

// Resumed tells a phased route's handler whether this attempt took over
// an unfinished key row left by an earlier one (resumed), and if so
// whether the earlier attempt's claim had lapsed, its lease ended with
// the claim still held, as after a crash (lapsed), rather than been
// released by an answer >= 500. Steps recorded by the earlier attempt
// answer from their recovery points. Both are false on a new row, on an
// atomic route, on an unkeyed request and outside idemserver.
func Resumed(ctx context.Context) (resumed, lapsed bool) {
	st := stateOf(ctx)
	if st == nil || !st.phased {
		return false, false
	}
	return st.resumed, st.lapsed
}

// DownstreamKey returns the key to pass to a downstream service for step:
// the same in every attempt of one request (a random seed stored in its
// key row, then step), never the same for two key rows, so that two
// principals' keys, or a key reused after the sweep, never meet
// downstream. It is "" on an unkeyed request and outside idemserver. On
// an atomic route the seed is stored only with the committed row, so a
// downstream key is stable across reruns of one attempt, not across
// attempts: calls out belong on a phased route.
func DownstreamKey(ctx context.Context, step string) string {
	st := stateOf(ctx)
	if st == nil || st.req.key == "" {
		return ""
	}
	return "idem-" + st.seed + "-" + step
}

// Step runs a phased route's call to the outside world (a payment, a
// mail) as a recovery point. If an earlier attempt of the request recorded
// a result for name, Step returns it without calling fn. Otherwise it
// calls fn, outside any transaction, with DownstreamKey(ctx, name), and
// records the result in a transaction of its own, fenced by the claim.
// Both renew the claim's lease. An error from fn is returned and nothing
// is recorded.
//
// ErrLockLost means another request took the claim over, or the
// holder's lease ended in real time (its context has ended): the handler
// must stop (the layer answers 409 whatever it writes). ErrNotPhased outside a
// phased route; ErrTxBegun after Tx. On an unkeyed request Step just calls
// fn with the key "".
func Step(ctx context.Context, name string, fn func(ctx context.Context, downstreamKey string) ([]byte, error)) ([]byte, error) {
	st := stateOf(ctx)
	if st == nil || !st.phased {
		return nil, ErrNotPhased
	}
	if st.req.key == "" {
		return fn(ctx, "")
	}
	st.mu.Lock()
	begun := st.final != nil || st.begun != nil
	st.mu.Unlock()
	if begun {
		return nil, ErrTxBegun
	}
	k := st.k
	var result []byte
	var found bool
	err := st.fenced(func(tx sqlkit.Tx) error {
		err := k.queryRow(st.lease.ctx, tx, `SELECT result FROM {{steps}} WHERE key_id = ? AND name = ?`,
			st.id, name).Scan(&result)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return k.dbError("reading a recovery point", err)
		}
		found = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found {
		k.stats.stepsKept.Add(1)
		return result, nil
	}
	k.stats.stepsRun.Add(1)
	out, err := fn(st.lease.ctx, DownstreamKey(ctx, name))
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []byte{}
	}
	err = st.fenced(func(tx sqlkit.Tx) error {
		if _, err := k.exec(st.lease.ctx, tx, `INSERT INTO {{steps}} (key_id, name, result) VALUES (?, ?, ?)`,
			st.id, name, out); err != nil {
			return k.dbError("recording a recovery point", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fenced runs fn in a transaction that first checks the claim and renews
// its lease; the holder's context then lasts until the new lease ends.
func (st *state) fenced(fn func(tx sqlkit.Tx) error) error {
	k := st.k
	start := time.Now()
	err := k.inTx(st.lease.ctx, sql.LevelReadCommitted, func(tx sqlkit.Tx) error {
		now := k.cfg.Now()
		if err := k.fence(st.lease.ctx, tx, st.id, st.token, now.Add(k.cfg.LockTimeout).UnixNano(), nil); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil {
		return st.lost(err)
	}
	if !st.lease.renew(k.cfg.LockTimeout - time.Since(start)) {
		return st.lost(ErrLockLost)
	}
	return nil
}

// lost returns err, made ErrLockLost if the lease has ended, and notes
// a lost claim or a vanished row for the answer.
func (st *state) lost(err error) error {
	if !errors.Is(err, ErrLockLost) && errors.Is(context.Cause(st.lease.ctx), ErrLockLost) {
		err = errors.Join(ErrLockLost, err)
	}
	if errors.Is(err, ErrLockLost) {
		st.lostClaim.Store(true)
	}
	if errors.Is(err, ErrKeyRowGone) {
		st.rowGone.Store(true)
	}
	return err
}

// lease is the holder's side of a phased claim: a context that ends, with
// cause ErrLockLost, when the lease does.
type lease struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
}

func newLease(parent context.Context, d time.Duration) *lease {
	ctx, cancel := context.WithCancelCause(parent)
	l := &lease{ctx: ctx, cancel: cancel}
	l.timer = time.AfterFunc(d, func() { cancel(ErrLockLost) })
	return l
}

// renew extends the lease to d from now; false if it had ended.
func (l *lease) renew(d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.timer.Stop() || l.ctx.Err() != nil {
		return false
	}
	l.timer.Reset(d)
	return true
}

// end stops the lease's timer and ends its context.
func (l *lease) end() {
	l.mu.Lock()
	l.timer.Stop()
	l.mu.Unlock()
	l.cancel(context.Canceled)
}
