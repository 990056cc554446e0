package idemserver_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// L2.17: a request whose work runs out of time while its handler waits
// for a connection of the pool (a statement on the database instead of
// its transaction, every connection held by the requests' own
// transactions: here the one of a pool of one) gets 503, and the log
// names the cause: the pool exhausted, the handler to use its
// transaction, one acquire that waited. One that runs out of time without
// anyone waiting for the pool (its pool as full) is not told so. PostgreSQL through database/sql
// and a pgxpool, and MariaDB; on SQLite a statement outside the
// transaction is refused at once (L2.13).
func TestL2AnExhaustedPoolIsNamedInTheLog(t *testing.T) {
	eachObservedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		var logs syncBuffer
		cfg := e.config()
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.WorkTimeout = 300 * time.Millisecond
		var pool *pgxpool.Pool
		if s.pool {
			pool = e.openPoolOf(1)
			cfg.Store = postgres.Pool(pool)
		} else {
			e.db.SetMaxOpenConns(1)
		}
		keys := e.keys(cfg)
		onThePool := func(ctx context.Context) error {
			var n int
			if pool != nil {
				return pool.QueryRow(ctx, `SELECT 1`).Scan(&n)
			}
			return e.db.QueryRowContext(ctx, `SELECT 1`).Scan(&n)
		}
		misuse := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := onThePool(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		got := serve(misuse, req("POST", "/things", "{}", "k1"))
		wantStatus(t, "a handler waiting for the pool", got, http.StatusServiceUnavailable)
		if l := logs.String(); !strings.Contains(l, "idemserver: the request's work outlived Config.WorkTimeout and rolled back") ||
			!strings.Contains(l, "connection pool was exhausted") || !strings.Contains(l, "instead of its transaction (Tx)") ||
			!strings.Contains(l, "pool_waits=1") {
			t.Fatalf("the log says %q, want the pool exhausted named", l)
		}

		slow := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // holds the only connection, waits for nothing of the pool
			w.WriteHeader(http.StatusCreated)
		}))
		before := len(logs.String())
		got = serve(slow, req("POST", "/things", "{}", "k2"))
		wantStatus(t, "a handler too slow", got, http.StatusServiceUnavailable)
		if l := logs.String()[before:]; !strings.Contains(l, "outlived Config.WorkTimeout") || strings.Contains(l, "pool was exhausted") {
			t.Fatalf("the log says %q, want the timeout without the pool blamed", l)
		}
	})
}
