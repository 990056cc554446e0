package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"

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
