package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
)

type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }

// newPool opens a pool on a fresh database with a business table.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(t.Context(), `CREATE TABLE things (k TEXT NOT NULL, note TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
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

func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/things", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// inserter writes through postgres.Tx, as code written for pgx (sqlc's
// pgx/v5 mode) does, and answers with the body; 500 for "fail".
type inserter struct{ runs int }

func (h *inserter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs++
	ctx := r.Context()
	body, _ := io.ReadAll(r.Body)
	_, key, _ := idemserver.Key(ctx)
	if idemserver.Tx(ctx) != nil {
		http.Error(w, "a *sql.Tx on a pgxpool store", http.StatusInternalServerError)
		return
	}
	tx := postgres.Tx(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO things (k, note) VALUES ($1, $2)`, key, string(body)); err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	if string(body) == "fail" {
		http.Error(w, "failed after the write", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "made %s", body)
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM things`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAPoolHandlerWritesThroughPgxTx proves L2.11: on a pgxpool store the
// handler's pgx.Tx is the key row's transaction, on an atomic route and a
// phased one's final transaction: its write commits with the stored
// answer, a 5xx rolls it back, the retry replays without running it.
func TestAPoolHandlerWritesThroughPgxTx(t *testing.T) {
	for _, phased := range []bool{false, true} {
		t.Run(fmt.Sprint("phased=", phased), func(t *testing.T) {
			pool := newPool(t)
			keys := newKeys(t, idemserver.Config{Store: postgres.Pool(pool)})
			h := &inserter{}
			route := keys.Handle(idemserver.Route{Phased: phased}, h)
			first, again := post(route, "k1", "tea"), post(route, "k1", "tea")
			if first.Code != 201 || first.Body.String() != "made tea" || again.Code != 201 ||
				again.Body.String() != "made tea" || again.Header().Get(idemserver.HeaderReplayed) != "true" {
				t.Fatalf("first %d %q, again %d %q; want 201 and its replay", first.Code, first.Body, again.Code, again.Body)
			}
			if h.runs != 1 || count(t, pool) != 1 {
				t.Fatalf("%d runs, %d rows; want 1 and 1", h.runs, count(t, pool))
			}
			failed := post(route, "k2", "fail")
			if failed.Code != 500 || count(t, pool) != 1 {
				t.Fatalf("a 5xx after the write: %d, %d rows; want 500 and the write rolled back", failed.Code, count(t, pool))
			}
			if retry := post(route, "k2", "fail"); retry.Code != 500 || h.runs != 3 {
				t.Fatalf("the 5xx's retry: %d after %d runs; want it run again", retry.Code, h.runs)
			}
		})
	}
}

// TestAPoolTransactionIsolation proves L7.4 on a pgxpool store: the
// handler's pgx.Tx, on an atomic route and in a phased one's final
// transaction, runs at READ COMMITTED, and at SERIALIZABLE on a route that
// asks for it, as on a *sql.DB store.
func TestAPoolTransactionIsolation(t *testing.T) {
	for _, c := range []struct {
		route idemserver.Route
		want  string
	}{
		{idemserver.Route{}, "read committed"},
		{idemserver.Route{Phased: true}, "read committed"},
		{idemserver.Route{Serializable: true}, "serializable"},
		{idemserver.Route{Phased: true, Serializable: true}, "serializable"},
	} {
		t.Run(fmt.Sprintf("phased=%v,serializable=%v", c.route.Phased, c.route.Serializable), func(t *testing.T) {
			pool := newPool(t)
			keys := newKeys(t, idemserver.Config{Store: postgres.Pool(pool)})
			route := keys.Handle(c.route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				var level string
				if err := postgres.Tx(ctx).QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
					idemserver.Fail(ctx, err)
					return
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, level)
			}))
			if got := post(route, "k1", ""); got.Code != http.StatusCreated || got.Body.String() != c.want {
				t.Fatalf("the handler's transaction: %d %q; want 201 %s", got.Code, got.Body, c.want)
			}
		})
	}
}

// A pgxpool store's sweep hands Forget its transaction through
// postgres.Tx (its *sql.Tx is nil), and a Forget that fails undoes it.
func TestAPoolSweepForgetsInItsTransaction(t *testing.T) {
	pool := newPool(t)
	var now = time.Unix(1_800_000_000, 0)
	var forgot []string
	keys := newKeys(t, idemserver.Config{Store: postgres.Pool(pool), Now: func() time.Time { return now },
		Forget: func(ctx context.Context, tx *sql.Tx, swept []idemserver.Swept) error {
			if tx != nil {
				return errors.New("a *sql.Tx on a pgxpool store")
			}
			for _, s := range swept {
				if _, err := postgres.Tx(ctx).Exec(ctx, `UPDATE things SET k = '' WHERE k = $1`, s.Key); err != nil {
					return err
				}
				forgot = append(forgot, s.Key)
			}
			return nil
		}})
	route := keys.Handle(idemserver.Route{}, &inserter{})
	if w := post(route, "old", "tea"); w.Code != 201 {
		t.Fatalf("%d", w.Code)
	}
	now = now.Add(25 * time.Hour)
	n, err := keys.Sweep(t.Context())
	if err != nil || n != 1 || len(forgot) != 1 || forgot[0] != "old" {
		t.Fatalf("Sweep = %d, %v, forgot %v; want 1 key, old", n, err, forgot)
	}
	var k string
	if err := pool.QueryRow(t.Context(), `SELECT k FROM things`).Scan(&k); err != nil || k != "" {
		t.Fatalf("business row's key %q, %v; want it forgotten", k, err)
	}
}

// New refuses a Config with both a *sql.DB and a Store, and a Store
// without a pool.
func TestNewTakesOneDatabase(t *testing.T) {
	pool := newPool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if _, err := idemserver.New(t.Context(), idemserver.Config{DB: db, Store: postgres.Pool(pool)}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("DB and Store: %v, want refused", err)
	}
	if _, err := idemserver.New(t.Context(), idemserver.Config{Store: postgres.Pool(nil)}); err == nil {
		t.Error("a Store of a nil pool: accepted")
	}
}
