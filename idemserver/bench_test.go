package idemserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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

// BenchmarkKeyedRequests serves requests under distinct keys, each a
// plain insert, from 1, 8 and 24 concurrent clients, on each database,
// two ways in alternating rounds of one run: keyed, through a Keys, and
// bare, the same insert in a transaction of its own at the isolation a
// handler gets (READ COMMITTED; SQLite's BEGIN IMMEDIATE), without
// idemserver. It reports each way's requests per second, the keyed way's
// share of the bare way's, and the keyed handler's runs per request (1
// when no request runs another's again); it fails if a request does not
// get 201. On PostgreSQL the 24 clients run again on a Serializable
// route, the isolation every key's transaction had before READ COMMITTED,
// where the requests that ran out of reruns (503) are counted instead.
//
//	CI=true go test -run '^$' -bench BenchmarkKeyedRequests -benchtime 600x -count 5 ./idemserver
func BenchmarkKeyedRequests(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres", "pgxpool", "mariadb"} {
		for _, clients := range []int{1, 8, 24} {
			b.Run(fmt.Sprintf("db=%s/clients=%d", db, clients), func(b *testing.B) {
				benchRequests(b, db, clients, idemserver.Route{})
			})
		}
		if db == "postgres" || db == "pgxpool" {
			b.Run(fmt.Sprintf("db=%s/clients=24/serializable", db), func(b *testing.B) {
				benchRequests(b, db, 24, idemserver.Route{Serializable: true})
			})
		}
	}
}

// benchStore is a database of the benchmark: a *sql.DB, or a pgxpool.
type benchStore struct {
	db   *sql.DB
	pool *pgxpool.Pool
	pg   bool
}

// insert is the handler's write: one row of things.
func (s benchStore) insert(ctx context.Context, tx *sqlTx, key string) error {
	q := `INSERT INTO things (principal, k, note) VALUES ('', ?, 'made')`
	if s.pg {
		q = strings.Replace(q, "?", "$1", 1)
	}
	_, err := tx.ExecContext(ctx, q, key)
	return err
}

func openBenchStore(b *testing.B, kind string) benchStore {
	b.Helper()
	const conns = 30
	var s benchStore
	var err error
	switch kind {
	case "sqlite":
		s.db, err = sqlite.Open(filepath.Join(b.TempDir(), "bench.db"))
	case "postgres", "pgxpool":
		dsn := pgtest.NewDatabase(b)
		s.pg = true
		s.db, err = postgres.Open(dsn)
		if err == nil && kind == "pgxpool" {
			var pc *pgxpool.Config
			if pc, err = pgxpool.ParseConfig(dsn); err == nil {
				pc.MaxConns = conns
				s.pool, err = pgxpool.NewWithConfig(context.Background(), pc)
			}
		}
	case "mariadb":
		s.db, err = mysql.Open(mysqltest.NewDatabase(b))
	}
	if err != nil {
		b.Fatal(err)
	}
	s.db.SetMaxOpenConns(conns)
	b.Cleanup(func() {
		if s.pool != nil {
			s.pool.Close()
		}
		s.db.Close()
	})
	if _, err := s.db.Exec(`CREATE TABLE things (principal VARCHAR(255) NOT NULL, k VARCHAR(255) NOT NULL, note VARCHAR(255) NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchRequests(b *testing.B, kind string, clients int, route idemserver.Route) {
	s := openBenchStore(b, kind)
	var runs atomic.Int64
	cfg := idemserver.Config{Logger: proofQuiet}
	if s.pool != nil {
		cfg.Store = postgres.Pool(s.pool)
	} else {
		cfg.DB = s.db
	}
	keys, err := idemserver.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { keys.Close() })
	h := keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		_, key, _ := idemserver.Key(ctx)
		if err := s.insert(ctx, txOf(ctx), key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	keyed := func(key string) int {
		r := httptest.NewRequest("POST", "/things", strings.NewReader("{}"))
		r.Header.Set(idemserver.HeaderIdempotencyKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	bare := func(key string) int {
		ctx := context.Background()
		if s.pool != nil {
			iso := pgx.ReadCommitted
			if route.Serializable {
				iso = pgx.Serializable
			}
			tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				return http.StatusServiceUnavailable
			}
			defer tx.Rollback(ctx)
			if err := s.insert(ctx, &sqlTx{pgx: tx}, key); err != nil || tx.Commit(ctx) != nil {
				return http.StatusInternalServerError
			}
			return http.StatusCreated
		}
		var opts *sql.TxOptions
		if kind != "sqlite" {
			opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
			if route.Serializable {
				opts.Isolation = sql.LevelSerializable
			}
		}
		tx, err := s.db.BeginTx(ctx, opts)
		if err != nil {
			return http.StatusServiceUnavailable
		}
		defer tx.Rollback()
		if err := s.insert(ctx, &sqlTx{sql: tx}, key); err != nil || tx.Commit() != nil {
			return http.StatusInternalServerError
		}
		return http.StatusCreated
	}
	// round serves n requests of serve from the clients, and returns how
	// long they took.
	var failed, seq atomic.Int64
	round := func(serve func(key string) int, n int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if serve(fmt.Sprint("key-", seq.Add(1))) != http.StatusCreated {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	const rounds = 10
	var keyedTime, bareTime time.Duration
	served := 0
	b.ResetTimer()
	for i := range rounds {
		n := (b.N - served) / (rounds - i)
		served += n
		bareTime += round(bare, n)
		keyedTime += round(keyed, n)
	}
	b.StopTimer()
	if n := failed.Load(); n != 0 && !route.Serializable {
		b.Fatalf("%d of %d requests did not get 201", n, 2*b.N)
	}
	keyedRate, bareRate := float64(b.N)/keyedTime.Seconds(), float64(b.N)/bareTime.Seconds()
	b.ReportMetric(keyedRate, "keyed-req/s")
	b.ReportMetric(bareRate, "bare-req/s")
	b.ReportMetric(keyedRate/bareRate, "keyed/bare")
	b.ReportMetric(float64(runs.Load())/float64(b.N), "runs/req")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/req")
}
