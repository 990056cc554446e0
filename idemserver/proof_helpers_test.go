package idemserver_test

// The proof's fixtures: a service database of each store with a business
// table, a controllable clock, a fake payment gateway idempotent by key,
// and request helpers. Every proof_*_test.go test runs on every store.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/mysql"
	"github.com/idemkit/idem/idemserver/postgres"
	"github.com/idemkit/idem/idemserver/sqlite"
	"github.com/idemkit/idem/lab/testkit/mysqltest"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// proofStore is one of the databases idemserver runs on.
type proofStore struct {
	name  string
	pg    bool
	pool  bool // PostgreSQL through a pgxpool.Pool (postgres.Pool), not database/sql
	mysql bool // MariaDB, as MySQL
}

var proofStores = []proofStore{
	{name: "sqlite"},
	{name: "postgres", pg: true},
	{name: "pgxpool", pg: true, pool: true},
	{name: "mariadb", mysql: true},
}

// eachProofStore runs f as a subtest on every store.
func eachProofStore(t *testing.T, f func(t *testing.T, s proofStore)) {
	t.Helper()
	for _, s := range proofStores {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// proofClock is a Config.Now the test moves by hand.
type proofClock struct {
	mu  sync.Mutex
	now time.Time
}

func newProofClock() *proofClock { return &proofClock{now: time.Now().UTC().Truncate(time.Second)} }

func (c *proofClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *proofClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// proofEnv is a service database of one store with its business tables.
// The tests read and set it up through db, database/sql's handle, whatever
// the store Keys runs on.
type proofEnv struct {
	t    *testing.T
	s    proofStore
	db   *sql.DB
	pool *pgxpool.Pool // the pgxpool store's
	dsn  string        // PostgreSQL and MySQL only

	waitMu        sync.Mutex // serializes waiting's reads on MySQL
	lastWaitQuery time.Time  // the last of them
	clock         *proofClock
}

var proofQuiet = slog.New(slog.DiscardHandler)

// newProofEnv opens a fresh database of s, through postgres.Open or
// mysql.Open (the *sql.DB the documentation recommends; env's tests use
// sql.Open's), with the business tables:
// things (one row per effect, no UNIQUE, so that a second effect shows),
// and parents/children with a deferred foreign key (a commit that fails).
func newProofEnv(t *testing.T, s proofStore) *proofEnv {
	t.Helper()
	e := &proofEnv{t: t, s: s, clock: newProofClock()}
	var err error
	if s.pg {
		e.dsn = pgtest.NewDatabase(t)
		e.db, err = postgres.Open(e.dsn)
		if err == nil {
			e.db.SetMaxOpenConns(20)
		}
		if err == nil && s.pool {
			e.pool = e.openPool()
		}
	} else if s.mysql {
		e.dsn = mysqltest.NewDatabase(t)
		e.db, err = mysql.Open(e.dsn)
		if err == nil {
			e.db.SetMaxOpenConns(20)
		}
	} else {
		e.db, err = sqlite.Open(filepath.Join(t.TempDir(), "service.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	children := `CREATE TABLE children (id INTEGER NOT NULL, parent INTEGER NOT NULL REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`
	if s.mysql {
		// MySQL checks a foreign key at each statement: it has no
		// deferred constraints.
		children = `CREATE TABLE children (id INTEGER NOT NULL, parent INTEGER NOT NULL, FOREIGN KEY (parent) REFERENCES parents (id))`
	}
	for _, ddl := range []string{
		`CREATE TABLE things (principal TEXT NOT NULL, k TEXT NOT NULL, note TEXT NOT NULL, forgotten INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE parents (id INTEGER PRIMARY KEY)`,
		children,
	} {
		if _, err := e.db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// ddl spells a CREATE TABLE for the store: on MySQL a TEXT column cannot
// be part of a key, and becomes VARCHAR(255).
func (e *proofEnv) ddl(stmt string) string {
	if !e.s.mysql {
		return stmt
	}
	return strings.ReplaceAll(stmt, "TEXT", "VARCHAR(255)")
}

// q spells a query with ? placeholders for the store.
func (e *proofEnv) q(query string) string {
	if !e.s.pg {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// openPool opens a pgxpool.Pool on the env's PostgreSQL database, closed
// when the test ends.
func (e *proofEnv) openPool() *pgxpool.Pool { return e.openPoolOf(20) }

// openPoolOf is openPool with a pool of max connections.
func (e *proofEnv) openPoolOf(max int32) *pgxpool.Pool {
	e.t.Helper()
	pc, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	pc.MaxConns = max
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

// store sets the env's database on cfg: Store on the pgxpool store, else DB.
func (e *proofEnv) store(cfg idemserver.Config) idemserver.Config {
	if e.s.pool {
		cfg.Store = postgres.Pool(e.pool)
	} else {
		cfg.DB = e.db
	}
	return cfg
}

// config is the tests' usual Config: quiet, on the env's clock.
func (e *proofEnv) config() idemserver.Config {
	return e.store(idemserver.Config{Logger: proofQuiet, Now: e.clock.Now})
}

// keys opens a Keys on cfg (the env's database, Logger and Now filled in
// if unset), closed when the test ends.
func (e *proofEnv) keys(cfg idemserver.Config) *idemserver.Keys {
	e.t.Helper()
	if cfg.DB == nil && cfg.Store == (idemserver.Store{}) {
		cfg = e.store(cfg)
	}
	if cfg.Logger == nil {
		cfg.Logger = proofQuiet
	}
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	k, err := idemserver.New(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(func() {
		if err := k.Close(); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
	return k
}

// count returns the number of rows of table (where, if given, with args).
func (e *proofEnv) count(table string, where ...any) int {
	e.t.Helper()
	query := "SELECT count(*) FROM " + table
	var args []any
	if len(where) > 0 {
		query += " WHERE " + where[0].(string)
		args = where[1:]
	}
	var n int
	if err := e.db.QueryRow(e.q(query), args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// keyRows is the number of rows in the key table.
func (e *proofEnv) keyRows() int { return e.count(idemserver.DefaultTable) }

// things returns the notes of the business rows, in insertion order.
func (e *proofEnv) things() []string {
	e.t.Helper()
	rows, err := e.db.Query(`SELECT principal, k, note FROM things`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p, k, n string
		if err := rows.Scan(&p, &k, &n); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p+"|"+k+"|"+n)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// req builds a request; each of keys is one Idempotency-Key header value
// as sent (none: no header).
func req(method, target, body string, keys ...string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for _, k := range keys {
		r.Header.Add(idemserver.HeaderIdempotencyKey, k)
	}
	return r
}

// as sets a bearer token on r.
func as(r *http.Request, token string) *http.Request {
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// serve runs h on r and returns the answer.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// servePanic runs h on r and returns the panic value h re-raised (nil if
// none).
func servePanic(h http.Handler, r *http.Request) (w *httptest.ResponseRecorder, p any) {
	w = httptest.NewRecorder()
	defer func() { p = recover() }()
	h.ServeHTTP(w, r)
	return w, nil
}

// inserter is the usual atomic handler: it inserts one business row in
// Tx and answers 201 with the run's number, the principal, the key and
// the body it read.
type inserter struct {
	e    *proofEnv
	runs atomic.Int64
	// then, if set, runs after the insert and may write the answer
	// itself (returning true) or panic. Its r.Body holds again the bytes
	// the run read.
	then func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool
}

func (h *inserter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	ctx := r.Context()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	p, k, _ := idemserver.Key(ctx)
	tx := txOf(ctx)
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	if _, err := tx.ExecContext(ctx, h.e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), p, k, fmt.Sprintf("run %d: %s", n, body)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if h.then != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if h.then(w, r, tx) {
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/things/%d", n))
	w.Header().Set("X-Not-Stored", "run "+strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d,"principal":%q,"key":%q,"body":%q}`, n, p, k, body)
}

// proofGateway is a fake payment gateway, idempotent by key: a call with a key
// it has seen returns that key's capture and captures nothing new.
type proofGateway struct {
	mu       sync.Mutex
	byKey    map[string]string
	calls    []string // the key of every call
	captures int
}

func newProofGateway() *proofGateway { return &proofGateway{byKey: map[string]string{}} }

func (g *proofGateway) capture(key string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, key)
	if id, ok := g.byKey[key]; ok {
		return id
	}
	g.captures++
	id := fmt.Sprintf("capture-%d", g.captures)
	g.byKey[key] = id
	return id
}

func (g *proofGateway) state() (captures int, calls []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.captures, append([]string(nil), g.calls...)
}

// charger is the usual phased handler: Step "reserve" (local, counted),
// Step "charge" (the gateway, under the step's downstream key), then the
// business row in Tx and 201. Hooks let a test hold or break it.
type charger struct {
	e        *proofEnv
	gw       *proofGateway
	runs     atomic.Int64
	reserves atomic.Int64 // "reserve" step functions run
	charges  atomic.Int64 // "charge" step functions run

	inCharge    func(ctx context.Context, dk string)       // before the gateway call
	afterCharge func(ctx context.Context, dk string) error // after it, before Step records; an error fails the step
	beforeTx    func(ctx context.Context)                  // after the Steps
	stepErr     chan error                                 // receives a Step's error, if set
}

func (h *charger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	ctx := r.Context()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fail := func(err error) {
		if h.stepErr != nil {
			h.stepErr <- err
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	if _, err := idemserver.Step(ctx, "reserve", func(ctx context.Context, dk string) ([]byte, error) {
		h.reserves.Add(1)
		return []byte("reserved"), nil
	}); err != nil {
		fail(err)
		return
	}
	capture, err := idemserver.Step(ctx, "charge", func(ctx context.Context, dk string) ([]byte, error) {
		h.charges.Add(1)
		if h.inCharge != nil {
			h.inCharge(ctx, dk)
		}
		id := h.gw.capture(dk)
		if h.afterCharge != nil {
			if err := h.afterCharge(ctx, dk); err != nil {
				return nil, err
			}
		}
		return []byte(id), nil
	})
	if err != nil {
		fail(err)
		return
	}
	if h.beforeTx != nil {
		h.beforeTx(ctx)
	}
	p, k, _ := idemserver.Key(ctx)
	tx := txOf(ctx)
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	if _, err := tx.ExecContext(ctx, h.e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), p, k, fmt.Sprintf("run %d: %s", n, capture)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d,"capture":%q,"body":%q}`, n, capture, body)
}

// wantStatus fails the test unless w answered status.
func wantStatus(t *testing.T, what string, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("%s: status %d, want %d; body %q", what, w.Code, status, w.Body.String())
	}
}

// wantProblem fails the test unless w is a problem document of status,
// not marked replayed.
func wantProblem(t *testing.T, what string, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	wantStatus(t, what, w, status)
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if v := w.Header().Get(idemserver.HeaderReplayed); v != "" {
		t.Errorf("%s: %s: %q on a refusal", what, idemserver.HeaderReplayed, v)
	}
}

// wantReplay fails the test unless w is first, byte for byte, marked
// replayed.
func wantReplay(t *testing.T, what string, w, first *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != first.Code || w.Body.String() != first.Body.String() {
		t.Fatalf("%s: %d %q, want the stored %d %q", what, w.Code, w.Body.String(), first.Code, first.Body.String())
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got, want := w.Header().Get(h), first.Header().Get(h); got != want {
			t.Errorf("%s: %s %q, want the stored %q", what, h, got, want)
		}
	}
	if v := w.Header().Get(idemserver.HeaderReplayed); v != "true" {
		t.Errorf("%s: %s %q, want true", what, idemserver.HeaderReplayed, v)
	}
}

// Short names the fixtures' signatures use.
type httptestRecorder = httptest.ResponseRecorder

// sqlTx is the request's transaction as the proof's handlers write
// through it: database/sql's (idemserver.Tx), or on the pgxpool store the
// pgx.Tx (postgres.Tx).
type sqlTx struct {
	sql *sql.Tx
	pgx pgx.Tx
}

// txOf returns the request's transaction of ctx, nil if there is none.
func txOf(ctx context.Context) *sqlTx {
	return forgetTx(ctx, idemserver.Tx(ctx))
}

// forgetTx is txOf for Config.Forget, given database/sql's transaction
// (nil on the pgxpool store).
func forgetTx(ctx context.Context, tx *sql.Tx) *sqlTx {
	if tx != nil {
		return &sqlTx{sql: tx}
	}
	if tx := postgres.Tx(ctx); tx != nil {
		return &sqlTx{pgx: tx}
	}
	return nil
}

func (t *sqlTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.sql != nil {
		return t.sql.ExecContext(ctx, query, args...)
	}
	tag, err := t.pgx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxResult(tag.RowsAffected()), nil
}

// scanner is a row of QueryRowContext.
type scanner interface{ Scan(dest ...any) error }

func (t *sqlTx) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	if t.sql != nil {
		return t.sql.QueryRowContext(ctx, query, args...)
	}
	return t.pgx.QueryRow(ctx, query, args...)
}

// pgxResult is a pgx statement's sql.Result: rows affected, no last id.
type pgxResult int64

func (r pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("PostgreSQL reports no last insert id")
}
func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

// gate holds a request inside its handler: the handler closes entered
// and waits on release; open releases it, once, and runs when the test
// ends (before the Keys' Close, which waits for the request), so that a
// failing test never leaves it waiting.
func gate(t *testing.T) (entered, release chan struct{}, open func()) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return entered, release, open
}

// waitEntered waits until the held request is inside its handler, or
// fails the test if it finished without getting there.
func waitEntered(t *testing.T, entered chan struct{}, done chan *httptestRecorder) {
	t.Helper()
	select {
	case <-entered:
	case w := <-done:
		t.Fatalf("the first request finished without reaching its hold: %d %q", w.Code, w.Body.String())
	}
}
