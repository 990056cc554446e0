package stacks_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idem/examples/stacks"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }

// schema is the table sqlc generated its code for.
func schema(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("sqlc/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkOrders sends an order, its retry, a malformed order and then a
// good one under its key, and another order, and checks the answers and
// the rows: the retry replayed, the malformed order refused without using
// the key up, one row per order.
func checkOrders(t *testing.T, keys *idemserver.Keys, h http.HandlerFunc, rows func() int) {
	t.Helper()
	route := keys.Handle(idemserver.Route{Check: stacks.CheckOrder}, h)
	first, again := post(route, "k1", `{"item":"tea","quantity":2}`), post(route, "k1", `{"item":"tea","quantity":2}`)
	const want = `{"id":1,"item":"tea","quantity":2}` + "\n"
	if first.Code != 201 || first.Body.String() != want {
		t.Fatalf("first: %d %q, want 201 %q", first.Code, first.Body, want)
	}
	if again.Code != 201 || again.Body.String() != want || again.Header().Get(idemserver.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q, want the replay of the first", again.Code, again.Body)
	}
	if bad := post(route, "k2", `{"item":"tea"`); bad.Code != 400 {
		t.Fatalf("a malformed order: %d, want 400", bad.Code)
	}
	const second = `{"id":2,"item":"jam","quantity":1}` + "\n"
	if good := post(route, "k2", `{"item":"jam","quantity":1}`); good.Code != 201 || good.Body.String() != second {
		t.Fatalf("the corrected order under the same key: %d %q, want 201 %q", good.Code, good.Body, second)
	}
	if n := rows(); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

func newKeys(t *testing.T, cfg idemserver.Config) *idemserver.Keys {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	keys, err := idemserver.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	return keys
}

// sqlDB opens a fresh database through database/sql with the orders table.
func sqlDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(schema(t)); err != nil {
		t.Fatal(err)
	}
	return db
}

func countSQL(t *testing.T, db *sql.DB) func() int {
	return func() int {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestSqlcPgxOnAPool runs sqlc's pgx/v5 code on a pgxpool store.
func TestSqlcPgxOnAPool(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(t.Context(), schema(t)); err != nil {
		t.Fatal(err)
	}
	keys := newKeys(t, idemserver.Config{Store: postgres.Pool(pool)})
	checkOrders(t, keys, stacks.PgxOrders, func() int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	})
}

// TestSqlcDatabaseSQL runs sqlc's database/sql code on a *sql.DB.
func TestSqlcDatabaseSQL(t *testing.T) {
	db := sqlDB(t)
	checkOrders(t, newKeys(t, idemserver.Config{DB: db}), stacks.SQLOrders, countSQL(t, db))
}

// TestGormOnTheRequestsTransaction runs GORM opened on the request's
// *sql.Tx.
func TestGormOnTheRequestsTransaction(t *testing.T) {
	db := sqlDB(t)
	checkOrders(t, newKeys(t, idemserver.Config{DB: db}), stacks.GormOrders, countSQL(t, db))
}
