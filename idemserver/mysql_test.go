package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/mysql"
	"github.com/idemkit/idem/internal/mysqltest"
)

// TestKeysCompareByteForByte: keys and principals that differ only in
// case are different keys on every database, MySQL's case-insensitive
// default collations included (its key columns are binary).
func TestKeysCompareByteForByte(t *testing.T) {
	principal := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	onBothStores(t, idemserver.Config{Principal: principal}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		route := e.keys.Handle(idemserver.Route{}, h)
		for i, c := range []struct{ key, user, item string }{
			{"order-1", "alice", "a"}, {"ORDER-1", "alice", "b"}, {"Order-1", "alice", "c"}, {"order-1", "Alice", "d"},
		} {
			first := do(t, route, "POST", "/items", c.key, c.item, "X-User", c.user)
			again := do(t, route, "POST", "/items", c.key, c.item, "X-User", c.user)
			if first.status != http.StatusCreated || first.header.Get(idemserver.HeaderReplayed) != "" ||
				again.body != first.body || again.header.Get(idemserver.HeaderReplayed) != "true" || h.Runs() != i+1 {
				t.Fatalf("key %q of %q: %+v then %+v after %d runs; want a new 201, then its replay", c.key, c.user, first, again, h.Runs())
			}
		}
		if n := e.count("items"); n != 4 {
			t.Fatalf("%d items, want 4", n)
		}
	})
}

// TestMySQLNeedsAStrictSQLMode: on a session whose sql_mode is not
// strict, which would cut a long key short instead of refusing it, New
// fails with mysql.ErrSession naming sql_mode, and creates no table.
func TestMySQLNeedsAStrictSQLMode(t *testing.T) {
	dsn := mysqltest.NewDatabase(t)
	db, err := sql.Open("mysql", dsn+"?sql_mode=%27NO_ENGINE_SUBSTITUTION%27")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = idemserver.New(context.Background(), idemserver.Config{DB: db})
	if !errors.Is(err, mysql.ErrSession) || !strings.Contains(err.Error(), "sql_mode") || !strings.Contains(err.Error(), "STRICT_TRANS_TABLES") {
		t.Fatalf("New on a non-strict session: %v; want mysql.ErrSession naming sql_mode", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after a refused New (%v), want 0", n, err)
	}

	strict, err := sql.Open("mysql", dsn+"?sql_mode=%27STRICT_ALL_TABLES%27")
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: strict})
	if err != nil {
		t.Fatalf("New on a STRICT_ALL_TABLES session: %v", err)
	}
	keys.Close()
}

// TestMySQLTooLongAKeyIsRefused: a key longer than mysql.MaxText, which a
// larger Config.MaxKeyLength lets through, fails loudly at its claim (5xx,
// the handler not run, nothing stored) instead of being cut short into
// another key.
func TestMySQLTooLongAKeyIsRefused(t *testing.T) {
	db, err := sql.Open("mysql", mysqltest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, MaxKeyLength: 2 * mysql.MaxText, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	runs := 0
	route := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	base := strings.Repeat("k", mysql.MaxText)
	if w := serve(route, req("POST", "/x", "{}", base)); w.Code != http.StatusCreated {
		t.Fatalf("a key of mysql.MaxText bytes: %d, want 201", w.Code)
	}
	if w := serve(route, req("POST", "/x", "{}", base+"-other")); w.Code < 500 {
		t.Fatalf("a key past mysql.MaxText: %d %q, want 5xx", w.Code, w.Body.String())
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM idempotency_keys`).Scan(&n); err != nil || n != 1 || runs != 1 {
		t.Fatalf("%d key rows (%v) after %d runs; want 1 and 1", n, err, runs)
	}
}

// TestMySQLDownIsUnavailable: with the server stopped, a request gets 503
// with Retry-After and nothing runs to completion; started again, the
// retry under the same key runs and is stored.
func TestMySQLDownIsUnavailable(t *testing.T) {
	srv := mysqltest.Own(t)
	ctx := context.Background()
	dsn, err := srv.CreateDatabase(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys, err := idemserver.New(ctx, idemserver.Config{DB: db, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	route := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("made"))
	}))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w := serve(route, req("POST", "/x", "{}", "down"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("with the server down: %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := serve(route, req("POST", "/x", "{}", "down"))
	wantStatus(t, "the retry once the server is back", first, http.StatusCreated)
	wantReplay(t, "again", serve(route, req("POST", "/x", "{}", "down")), first)
}

// TestMySQLTwoRetriesCannotBothTakeOverAClaim: on MySQL, where every
// transaction of a key runs at READ COMMITTED, the key row is read FOR
// UPDATE, so that two retries of a released phased claim cannot both take
// it over. The first request answers 502 (its claim released); a retry
// takes the claim over and is held inside its UPDATE (a trigger waits for
// a lock the test holds) while a second retry reads the row. The second
// waits for the first's claim (its read is in flight when the first
// commits), then finds it held: 409 (or, if the first has finished by
// then, its replay). The handler runs once for the two.
func TestMySQLTwoRetriesCannotBothTakeOverAClaim(t *testing.T) {
	e := newProofEnv(t, proofStore{name: "mariadb", mysql: true})
	keys := e.keys(e.config())
	var runs atomic.Int64
	route := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "the gateway failed", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	if first := serve(route, req("POST", "/charges", "x", "k")); first.Code != http.StatusBadGateway {
		t.Fatalf("first request: %d %q, want 502", first.Code, first.Body)
	}
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, `CREATE TRIGGER takeover_gate BEFORE UPDATE ON `+idemserver.DefaultTable+` FOR EACH ROW
		BEGIN
			IF NEW.lock_token IS NOT NULL AND NOT (NEW.lock_token <=> OLD.lock_token) THEN
				SET @gate = GET_LOCK('takeover_gate', 60);
				SET @gate = RELEASE_LOCK('takeover_gate');
			END IF;
		END`); err != nil {
		t.Fatal(err)
	}
	gate, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	var got int
	if err := gate.QueryRowContext(ctx, `SELECT GET_LOCK('takeover_gate', 10)`).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %d, %v", got, err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			gate.ExecContext(ctx, `DO RELEASE_LOCK('takeover_gate')`)
		}
	}
	defer release()
	waitFor := func(what, query string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var n int
			if err := e.db.QueryRowContext(ctx, query).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
		}
	}
	answers := make(chan *httptest.ResponseRecorder, 2)
	go func() { answers <- serve(route, req("POST", "/charges", "x", "k")) }()
	waitFor("the first retry held in its takeover",
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE 'SET @gate = GET_LOCK%'`)
	go func() { answers <- serve(route, req("POST", "/charges", "x", "k")) }()
	waitFor("the second retry reading the key row",
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Execute' AND INFO LIKE '%`+
			idemserver.DefaultTable+`%'`)
	release()
	a, b := <-answers, <-answers
	if a.Code != http.StatusCreated {
		a, b = b, a
	}
	if a.Code != http.StatusCreated || a.Body.String() != "charged" || (b.Code != http.StatusConflict && b.Body.String() != "charged") ||
		(b.Code != http.StatusConflict && b.Header().Get(idemserver.HeaderReplayed) != "true") {
		t.Errorf("the retries: %d %q and %d %q; want 201 and 409 (or its replay)", a.Code, a.Body, b.Code, b.Body)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (the first request, then one retry)", n)
	}
}
