package idemserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// Keys is a key store in front of a service's handlers. It is safe for
// concurrent use, and any number of Keys (replicas) may share one
// database.
type Keys struct {
	cfg    Config
	db     sqlkit.DB
	stmts  *sqlkit.Stmts // this package's statements, as the database takes them
	table  string
	keys   keyReader
	stored []string // canonical names of the stored response headers
	log    *slog.Logger
	stats  counters

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
	done    chan struct{} // closed by Close
}

// counters are the atomic fields behind Stats.
type counters struct {
	requests, unkeyed, invalid, stored, replays, mismatches, inFlight, rolledBack, failed,
	reruns, resumed, stepsRun, stepsKept, lockLost, swept, abandoned atomic.Int64
}

// New opens the key store in cfg.DB (or cfg.Store), creating its tables
// if needed (under an advisory lock on PostgreSQL, so that replicas may
// start together). It refuses a Config without a database or with both,
// with a Table that is no plain SQL identifier, or with a negative limit,
// and a database of a kind none of the imported database packages speaks
// (ErrUnsupportedDatabase).
func New(ctx context.Context, cfg Config) (*Keys, error) {
	if cfg.DB == nil && !cfg.Store.set {
		return nil, errors.New("idemserver: Config.DB (or Config.Store) is required")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if !identifier.MatchString(cfg.Table) {
		return nil, fmt.Errorf("idemserver: Config.Table %q is not a plain SQL identifier", cfg.Table)
	}
	if cfg.MaxKeyLength < 0 || cfg.Retention < 0 || cfg.SweepInterval < 0 || cfg.LockTimeout < 0 ||
		cfg.WorkTimeout < 0 || cfg.MaxBodyBytes < 0 || cfg.MaxResponseBytes < 0 || cfg.Reruns < 0 {
		return nil, errors.New("idemserver: Config has a negative limit")
	}
	if cfg.Principal == nil {
		cfg.Principal = globalPrincipal
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = HeaderIdempotencyKey
	}
	// Kept as configured for messages; http.Header canonicalizes it for
	// the look-up.
	setDefault(&cfg.MaxKeyLength, DefaultMaxKeyLength)
	setDefault(&cfg.Retention, DefaultRetention)
	setDefault(&cfg.SweepInterval, DefaultSweepInterval)
	setDefault(&cfg.LockTimeout, DefaultLockTimeout)
	setDefault(&cfg.WorkTimeout, DefaultWorkTimeout)
	setDefault(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	setDefault(&cfg.Reruns, DefaultReruns)
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = Fingerprint
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := &Keys{
		cfg:   cfg,
		table: cfg.Table,
		keys:  keyReader{header: cfg.KeyHeader, field: cfg.KeyField, limit: cfg.MaxKeyLength},
		log:   cfg.Logger,
		done:  make(chan struct{}),
	}
	k.stored = []string{"Content-Type", "Location"}
	for _, h := range cfg.Answers.StoredHeaders {
		k.stored = append(k.stored, http.CanonicalHeaderKey(h))
	}
	var err error
	if k.db, err = openStore(ctx, cfg); err != nil {
		return nil, err
	}
	k.stmts = sqlkit.NewStmts(k.db.Flavor(), map[string]string{"{{t}}": k.table, "{{steps}}": k.table + "_steps"})
	if err := k.checkTables(ctx); err != nil {
		return nil, err
	}
	if err := k.migrate(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Handle returns the middleware of one route in front of h.
func (k *Keys) Handle(route Route, h http.Handler) http.Handler {
	if route.Retention <= 0 {
		route.Retention = k.cfg.Retention
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.serve(w, r, route, h) })
}

// Middleware is Handle for routers that take func(http.Handler)
// http.Handler, such as chi: r.With(keys.Middleware(idemserver.Route{})).
func (k *Keys) Middleware(route Route) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler { return k.Handle(route, h) }
}

// enter registers a running request or sweep; false after Close.
func (k *Keys) enter() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	k.running.Add(1)
	return true
}

// Stats returns the counters.
func (k *Keys) Stats() Stats {
	c := &k.stats
	return Stats{
		Requests: c.requests.Load(), Unkeyed: c.unkeyed.Load(), Invalid: c.invalid.Load(),
		Stored: c.stored.Load(), Replays: c.replays.Load(), Mismatches: c.mismatches.Load(),
		InFlight: c.inFlight.Load(), RolledBack: c.rolledBack.Load(), Failed: c.failed.Load(),
		Reruns: c.reruns.Load(), Resumed: c.resumed.Load(), StepsRun: c.stepsRun.Load(),
		StepsKept: c.stepsKept.Load(), LockLost: c.lockLost.Load(), Swept: c.swept.Load(),
		Abandoned: c.abandoned.Load(),
	}
}

// Close refuses new requests (503 with Retry-After) and sweeps
// (ErrClosed), stops Run, and waits for the running requests to commit or
// roll back: an atomic one within Config.WorkTimeout, a phased one within
// its lease. It does not close Config.DB. Close is idempotent.
func (k *Keys) Close() error {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.done)
	}
	k.mu.Unlock()
	k.running.Wait()
	return nil
}

// fail answers a request whose database work failed: 503 with
// Retry-After for an unreachable or busy database, contention or a
// timeout (a retry may well succeed), else 500.
func (k *Keys) fail(w http.ResponseWriter, r *http.Request, err error) {
	k.stats.failed.Add(1)
	if k.class(err) == sqlkit.Unavailable || errors.Is(err, ErrContention) || errors.Is(err, context.DeadlineExceeded) {
		k.log.WarnContext(r.Context(), "idemserver: database unavailable or contended", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		k.cfg.Answers.failed(w, r, http.StatusServiceUnavailable, "the database is unavailable or busy; nothing was stored: retry with the same key")
		return
	}
	k.log.ErrorContext(r.Context(), "idemserver: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	k.cfg.Answers.failed(w, r, http.StatusInternalServerError, "the server failed; nothing was stored: retry with the same key")
}

// timedOut answers a request whose work outlived Config.WorkTimeout,
// whatever its handler answered then: 503 with Retry-After, nothing
// stored, and an error logged naming the cause. When acquires waited for
// a connection of a bounded pool while the handler ran (pool says), the
// cause named is the pool, exhausted: a handler that runs its
// statements on the pool instead of its transaction waits for a
// connection that the requests' own transactions hold. Otherwise it is
// the flavour's hint of what makes a handler hang on its database (on
// PostgreSQL and MySQL, a write through the pool to a row the request's
// transaction locked).
func (k *Keys) timedOut(w http.ResponseWriter, r *http.Request, err error, pool *poolWatch) {
	k.stats.failed.Add(1)
	exhausted, waits := pool.exhausted()
	msg := "idemserver: the request's work outlived Config.WorkTimeout and rolled back; nothing was stored"
	switch hint := k.db.Flavor().TimeoutHint; {
	case exhausted:
		msg += "; the database's connection pool was exhausted (requests waited for a connection while the handler ran): " +
			"does the handler run statements on the pool (Config.DB, the pgxpool) instead of its transaction (Tx)? " +
			"Each such statement waits for a connection that the requests' own transactions hold"
	case hint != "":
		msg += "; " + hint
	}
	k.log.ErrorContext(r.Context(), msg, "method", r.Method, "path", r.URL.Path, "timeout", k.cfg.WorkTimeout,
		"pool_waits", waits, "err", err)
	w.Header().Set("Retry-After", "1")
	k.cfg.Answers.failed(w, r, http.StatusServiceUnavailable, "the request took too long and was rolled back; nothing was stored: retry with the same key")
}

// answeredAround fails a request whose handler answered around idemserver
// (errAnsweredAround): the client must not take that answer for one that
// was stored, since the work was rolled back. The error is logged, and the
// answer aborted while it can be: the connection's writes are made to fail
// at once (so that bytes the server still buffers never leave), and the
// handler aborted (http.ErrAbortHandler), so that the client sees a
// failed connection. Bytes the framework sent already cannot be taken
// back.
func (k *Keys) answeredAround(w http.ResponseWriter, r *http.Request, err error) {
	k.stats.failed.Add(1)
	k.log.ErrorContext(r.Context(), "idemserver: internal error; the answer is aborted", "method", r.Method, "path", r.URL.Path, "err", err)
	abort(w)
}

// abort makes the connection of w fail its writes from now on, and aborts
// the handler.
func abort(w http.ResponseWriter) {
	http.NewResponseController(w).SetWriteDeadline(time.Unix(1, 0))
	panic(http.ErrAbortHandler)
}

// panicked fails a request whose handler panicked (p), its work rolled
// back: it logs the panic with the handler's own stack, answers 500 (or,
// if the handler answered around idemserver, aborts the answer) so that
// no framework's recovery leaves the client a success, and raises the
// panic again, for the server and its recovery to see. A deliberate
// abort (http.ErrAbortHandler) is not logged.
func (k *Keys) panicked(w http.ResponseWriter, r *http.Request, p *panicked) {
	if p.value != http.ErrAbortHandler {
		k.log.ErrorContext(r.Context(), "idemserver: the handler panicked; its work was rolled back and nothing was stored "+
			"(the stack is the handler's; the panic is raised again from idemserver)",
			"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
	}
	if answeredAround(w) {
		http.NewResponseController(w).SetWriteDeadline(time.Unix(1, 0))
	} else {
		k.cfg.Answers.failed(w, r, http.StatusInternalServerError, "the server failed; nothing was stored: retry with the same key")
	}
	panic(p.value)
}

// noAnswer answers 500 for a handler that wrote nothing (errNoAnswer), its
// work rolled back, and logs why.
func (k *Keys) noAnswer(w http.ResponseWriter, r *http.Request, err error) {
	k.log.ErrorContext(r.Context(), "idemserver: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	k.cfg.Answers.failed(w, r, http.StatusInternalServerError, "the server failed; nothing was stored: retry with the same key")
}

// inFlight answers 409 with Retry-After: secs.
func (k *Keys) inFlight(w http.ResponseWriter, r *http.Request, secs int64, detail string) {
	k.stats.inFlight.Add(1)
	w.Header().Set("Retry-After", fmt.Sprint(max(secs, 1)))
	k.cfg.Answers.inFlight(w, r, detail)
}

// answerExisting answers from a key row: replay, 422 or 409.
func (k *Keys) answerExisting(w http.ResponseWriter, r *http.Request, v verdict, row keyRow, now time.Time) {
	switch v {
	case verdictReplay:
		k.stats.replays.Add(1)
		k.cfg.Answers.replay(w, r, row.response)
	case verdictMismatch:
		k.stats.mismatches.Add(1)
		k.cfg.Answers.mismatch(w, r, "this key was used for a different request (method, path, query or body differ); use a new key for a new request")
	case verdictInFlight:
		wait := time.Duration(row.leaseUntil.Int64 - now.UnixNano())
		k.inFlight(w, r, int64((wait+time.Second-1)/time.Second), "the first request with this key is still in progress; retry after the time given in Retry-After")
	}
}
