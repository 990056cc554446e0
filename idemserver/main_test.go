package idemserver_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
	"github.com/idemkit/idem/lab/testkit/mysqltest"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"go.uber.org/goleak"
)

// withPostgres runs the tests with pgtest's shared PostgreSQL available.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

// withServers runs the tests with mysqltest's shared MariaDB available
// too.
type withServers struct{ m *testing.M }

func (w withServers) Run() int { return mysqltest.Run(withPostgres(w)) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withServers{m}) }

// store is one of the databases every behaviour is checked on.
type store struct {
	name    string
	open    func(t *testing.T) *sql.DB
	dialect string // "sqlite", "postgres" or "mysql": the SQL of the tests
}

var stores = []store{
	{"sqlite", openSQLite, "sqlite"},
	{"postgres", openPostgres, "postgres"},
	{"mariadb", openMariaDB, "mysql"},
}

func openMariaDB(t *testing.T) *sql.DB {
	db, err := sql.Open("mysql", mysqltest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

func openSQLite(t *testing.T) *sql.DB {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "service.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t *testing.T) *sql.DB {
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

// env is a service under test: a Keys on one store, a business table
// items (id, note) and a clock the test moves.
type env struct {
	t     *testing.T
	store store
	db    *sql.DB
	keys  *idemserver.Keys
	clock *clock
}

// onBothStores runs f as a subtest on SQLite and on PostgreSQL, with a
// Keys configured by cfg (DB, Now and Logger are filled in).
func onBothStores(t *testing.T, cfg idemserver.Config, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			f(t, newEnv(t, s, cfg))
		})
	}
}

func newEnv(t *testing.T, s store, cfg idemserver.Config) *env {
	t.Helper()
	db := s.open(t)
	e := &env{t: t, store: s, db: db, clock: &clock{now: time.Unix(1_800_000_000, 0)}}
	children := `CREATE TABLE children (id TEXT PRIMARY KEY,
			parent TEXT NOT NULL REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`
	if s.dialect == "mysql" {
		// No deferred constraints: the key is checked at each statement.
		children = `CREATE TABLE children (id TEXT PRIMARY KEY, parent TEXT NOT NULL, FOREIGN KEY (parent) REFERENCES parents (id))`
	}
	for _, stmt := range []string{
		`CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL)`,
		`CREATE TABLE parents (id TEXT PRIMARY KEY)`,
		children,
	} {
		if _, err := db.Exec(e.ddl(stmt)); err != nil {
			t.Fatal(err)
		}
	}
	cfg.DB = db
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	keys, err := idemserver.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	e.keys = keys
	return e
}

// ddl spells a CREATE TABLE for the store: on MySQL a TEXT column cannot
// be part of a key, and becomes VARCHAR(255).
func (e *env) ddl(stmt string) string {
	if e.store.dialect != "mysql" {
		return stmt
	}
	return strings.ReplaceAll(stmt, "TEXT", "VARCHAR(255)")
}

// q rewrites ? placeholders for the store.
func (e *env) q(query string) string {
	if e.store.dialect != "postgres" {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + string(rune('0'+n)))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// count returns the number of rows of table.
func (e *env) count(table string) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// clock is a Config.Now the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// answer is a response as a test reads it.
type answer struct {
	status int
	header http.Header
	body   string
}

// do sends a request to h and returns the answer. opts are header
// name/value pairs.
func do(t *testing.T, h http.Handler, method, target, key, body string, opts ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(opts); i += 2 {
		r.Header.Set(opts[i], opts[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return answer{w.Code, w.Header(), w.Body.String()}
}

// insertItem is a handler that inserts an item named by the body through
// Tx and answers 201 with a Location; it counts its runs.
type insertItem struct {
	mu   sync.Mutex
	runs int
	e    *env
}

func (h *insertItem) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.runs++
	h.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	id := string(bytes.TrimSpace(body))
	tx := idemserver.Tx(r.Context())
	if _, err := tx.ExecContext(r.Context(), h.e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), id, "made"); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/items/"+id)
	w.Header().Set("X-Not-Stored", "1")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":"`+id+`"}`)
}

func (h *insertItem) Runs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}
