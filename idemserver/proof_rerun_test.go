package idemserver_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
)

// L7.1: requests under distinct keys never rerun each other. 24
// concurrent requests, each under its own key, whose handlers are inside
// their transactions all at once (on PostgreSQL and MariaDB; SQLite's
// transactions run one at a time), each a plain insert, or a read of the
// table and then an insert: every request answers 201, the handler runs
// 24 times, nothing runs again, 24 rows. Each handler answers its own
// statement's error 500, as handlers do, and does not use Fail.
func TestL7DistinctKeysNeverRerunEachOther(t *testing.T) {
	const n = 24
	for _, readFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("read first=", readFirst), func(t *testing.T) {
			eachProofStore(t, func(t *testing.T, s proofStore) {
				e := newProofEnv(t, s)
				cfg := e.config()
				if s.pool {
					cfg.Store = postgres.Pool(e.openPoolOf(n + 6))
				} else {
					e.db.SetMaxOpenConns(n + 6)
				}
				keys := e.keys(cfg)
				var runs, arrived atomic.Int64
				all := make(chan struct{})
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					ctx := r.Context()
					if s.pg || s.mysql {
						if arrived.Add(1) == n {
							close(all)
						}
						select { // every transaction open before any writes
						case <-all:
						case <-ctx.Done():
						}
					}
					_, k, _ := idemserver.Key(ctx)
					tx := txOf(ctx)
					if readFirst {
						var c int
						if err := tx.QueryRowContext(ctx, e.q(`SELECT COUNT(*) FROM things WHERE k = ?`), k).Scan(&c); err != nil {
							http.Error(w, err.Error(), http.StatusInternalServerError)
							return
						}
					}
					if _, err := tx.ExecContext(ctx, e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), "", k, "made"); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					w.WriteHeader(http.StatusCreated)
				})
				route := keys.Handle(idemserver.Route{}, h)
				answers := make([]*httptestRecorder, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						answers[i] = serve(route, req("POST", "/things", "{}", fmt.Sprintf("key-%d", i)))
					}()
				}
				wg.Wait()
				for i, a := range answers {
					if a.Code != http.StatusCreated {
						t.Errorf("request %d: %d %q, want 201", i, a.Code, a.Body.String())
					}
				}
				if got, reruns, rows := runs.Load(), keys.Stats().Reruns, e.count("things"); got != n || reruns != 0 || rows != n {
					t.Fatalf("%d handler runs, %d reruns, %d rows for %d requests under distinct keys; want %d, 0, %d", got, reruns, rows, n, n, n)
				}
			})
		})
	}
}

// conflictStatement is a statement that fails as a serialization failure
// would on the store: SQLSTATE 40001 on PostgreSQL, a deadlock (1213) on
// MySQL.
func (e *proofEnv) conflictStatement() string {
	if e.s.mysql {
		return `SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'a deadlock (the test''s)'`
	}
	return `DO $$ BEGIN RAISE EXCEPTION 'a serialization failure (the test''s)' USING ERRCODE = 'serialization_failure'; END $$`
}

// observedStores are the stores whose handlers' statements Keys sees:
// PostgreSQL through postgres.Open and a pgxpool, MariaDB through
// mysql.Open.
func eachObservedStore(t *testing.T, f func(t *testing.T, s proofStore)) {
	t.Helper()
	for _, s := range proofStores {
		if s.pg || s.mysql {
			t.Run(s.name, func(t *testing.T) { f(t, s) })
		}
	}
}

// L7.2: a serialization failure met by one of the handler's own
// statements reruns the transaction, whatever the handler then answers:
// a handler that turns it into a 500, or one that goes on (writing
// another row) and answers 201. The client gets the rerun's answer; only
// the rerun's row is committed; on an atomic route and in a phased
// route's final transaction.
func TestL7AHandlersOwnConflictIsRerun(t *testing.T) {
	for _, phased := range []bool{false, true} {
		for _, goOn := range []bool{false, true} {
			t.Run(fmt.Sprintf("phased=%v,the handler goes on=%v", phased, goOn), func(t *testing.T) {
				eachObservedStore(t, func(t *testing.T, s proofStore) {
					e := newProofEnv(t, s)
					keys := e.keys(e.config())
					var runs atomic.Int64
					h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						run := runs.Add(1)
						ctx := r.Context()
						tx := txOf(ctx)
						if run == 1 {
							_, err := tx.ExecContext(ctx, e.conflictStatement())
							if err == nil {
								t.Error("the conflict statement did not fail")
							}
							if !goOn {
								http.Error(w, err.Error(), http.StatusInternalServerError)
								return
							}
							// A handler that ignores the error: its next
							// write must not commit on its own.
							tx.ExecContext(ctx, e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), "", "k", "after the conflict")
						}
						if _, err := tx.ExecContext(ctx, e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), "", "k", fmt.Sprint("run ", run)); err != nil {
							http.Error(w, err.Error(), http.StatusInternalServerError)
							return
						}
						w.WriteHeader(http.StatusCreated)
						fmt.Fprintf(w, "run %d", run)
					})
					got := serve(keys.Handle(idemserver.Route{Phased: phased}, h), req("POST", "/things", "{}", "k"))
					if got.Code != http.StatusCreated || got.Body.String() != "run 2" {
						t.Fatalf("the client got %d %q, want the rerun's 201", got.Code, got.Body.String())
					}
					if things := e.things(); runs.Load() != 2 || len(things) != 1 || things[0] != "|k|run 2" {
						t.Fatalf("%d runs, business rows %q; want 2 runs and the rerun's row alone", runs.Load(), things)
					}
					if st := keys.Stats(); st.Reruns != 1 || st.Stored != 1 {
						t.Fatalf("stats %+v, want one rerun and one answer stored", st)
					}
					wantReplay(t, "the retry", serve(keys.Handle(idemserver.Route{Phased: phased}, h), req("POST", "/things", "{}", "k")), got)
				})
			})
		}
	}
}

// L7.4: the transaction a handler writes in runs at READ COMMITTED on
// PostgreSQL, through database/sql and a pgxpool, on an atomic route and
// in a phased one's final transaction; at SERIALIZABLE on a route that
// asks for it.
func TestL7HandlersRunAtReadCommittedUnlessSerializable(t *testing.T) {
	eachPostgresStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			var level string
			if err := txOf(ctx).QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
				idemserver.Fail(ctx, err)
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, level)
		})
		for i, c := range []struct {
			route idemserver.Route
			want  string
		}{
			{idemserver.Route{}, "read committed"},
			{idemserver.Route{Phased: true}, "read committed"},
			{idemserver.Route{Serializable: true}, "serializable"},
			{idemserver.Route{Phased: true, Serializable: true}, "serializable"},
		} {
			got := serve(keys.Handle(c.route, h), req("POST", "/things", "{}", fmt.Sprint("k", i)))
			if got.Code != http.StatusCreated || got.Body.String() != c.want {
				t.Errorf("%+v: %d %q, want 201 %s", c.route, got.Code, got.Body.String(), c.want)
			}
		}
	})
}

// eachPostgresStore runs f on PostgreSQL through database/sql and through
// a pgxpool.
func eachPostgresStore(t *testing.T, f func(t *testing.T, s proofStore)) {
	t.Helper()
	for _, s := range proofStores {
		if s.pg {
			t.Run(s.name, func(t *testing.T) { f(t, s) })
		}
	}
}
