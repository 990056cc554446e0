package idemserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/internal/sqlitekit"
	"github.com/idemkit/idem/idemserver/sqlite"
)

// A client that went away does not cancel its request's work: the
// handler's writes and the key commit.
func TestClientGoneWorkCommits(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequest("POST", "/items", strings.NewReader("a")).WithContext(ctx)
		r.Header.Set("Idempotency-Key", "k")
		srv.ServeHTTP(httptest.NewRecorder(), r)
		if e.count("items") != 1 || e.count("idempotency_keys") != 1 {
			t.Fatal("a cancelled request context cancelled the work")
		}
	})
}

// A handler still running at Config.WorkTimeout commits nothing and its
// request gets 503 with Retry-After.
func TestWorkTimeoutRollsBack(t *testing.T) {
	onBothStores(t, idemserver.Config{WorkTimeout: 100 * time.Millisecond}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, srv, "POST", "/items", "k", "a")
		if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
			t.Fatalf("%+v, want 503 with Retry-After", got)
		}
		if e.count("idempotency_keys") != 0 {
			t.Fatal("stored")
		}
	})
}

// A body that trickles past the server's read timeout gets 408, the
// connection is closed, and nothing runs.
func TestSlowBodyGets408(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		ts := httptest.NewUnstartedServer(e.keys.Handle(idemserver.Route{}, h))
		ts.Config.ReadTimeout = 200 * time.Millisecond
		ts.Start()
		defer ts.Close()
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte("POST /items HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 10\r\n\r\nab"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("status %d, close %v; want 408 and the connection closed", resp.StatusCode, resp.Close)
		}
		if h.Runs() != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("a slow body ran")
		}
	})
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAHandlerUsingTheSQLiteDatabaseIsNamed proves L2.13: on SQLite a
// handler's statement on the *sql.DB while its request's transaction is
// open fails with ErrOutsideTx, at once given the request's context and
// after the busy timeout given none, whatever the handler does with the
// error; the request answers 500, nothing is stored, the error logged
// names the cause, and the corrected retry under the key runs and is
// stored. WorkTimeout is long: the answer comes from the refusal, not
// from the timeout (which answers 503).
func TestAHandlerUsingTheSQLiteDatabaseIsNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out SQLite's busy timeout, seconds; -short skips the tests that do")
	}
	for _, c := range []struct {
		name   string
		exec   func(e *env, r *http.Request) error
		phased bool
	}{
		{"request context", func(e *env, r *http.Request) error {
			_, err := e.db.ExecContext(r.Context(), `INSERT INTO items (id, note) VALUES ('a', 'outside')`)
			return err
		}, false},
		{"request context, a read", func(e *env, r *http.Request) error {
			var n int
			return e.db.QueryRowContext(r.Context(), `SELECT count(*) FROM items`).Scan(&n)
		}, false},
		{"request context, a transaction", func(e *env, r *http.Request) error {
			tx, err := e.db.BeginTx(r.Context(), nil)
			if err == nil {
				tx.Rollback()
			}
			return err
		}, false},
		{"no context", func(e *env, r *http.Request) error {
			_, err := e.db.Exec(`INSERT INTO items (id, note) VALUES ('a', 'outside')`)
			return err
		}, false},
		{"no context, a transaction", func(e *env, r *http.Request) error {
			tx, err := e.db.Begin()
			if err == nil {
				tx.Rollback()
			}
			return err
		}, false},
		{"phased, request context", func(e *env, r *http.Request) error {
			idemserver.Tx(r.Context()) // the final transaction begins
			_, err := e.db.ExecContext(r.Context(), `INSERT INTO items (id, note) VALUES ('a', 'outside')`)
			return err
		}, true},
		{"phased, no context", func(e *env, r *http.Request) error {
			idemserver.Tx(r.Context())
			_, err := e.db.Exec(`INSERT INTO items (id, note) VALUES ('a', 'outside')`)
			return err
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log lockedBuffer
			cfg := idemserver.Config{WorkTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(&log, nil))}
			e := newEnv(t, stores[0], cfg)
			var handlerErr error
			route := idemserver.Route{Phased: c.phased}
			outside := e.keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				handlerErr = c.exec(e, r)
				w.WriteHeader(http.StatusCreated) // the error ignored
			}))
			got := do(t, outside, "POST", "/items", "k", "a")
			if got.status != http.StatusInternalServerError || got.header.Get("Retry-After") != "" {
				t.Fatalf("%d %q (Retry-After %q), want 500 without Retry-After", got.status, got.body, got.header.Get("Retry-After"))
			}
			if !errors.Is(handlerErr, idemserver.ErrOutsideTx) {
				t.Fatalf("the handler's statement: %v, want ErrOutsideTx", handlerErr)
			}
			var finished int
			if err := e.db.QueryRow(`SELECT count(*) FROM idempotency_keys WHERE finished <> 0`).Scan(&finished); err != nil {
				t.Fatal(err)
			}
			if n := e.count("items") + finished; n != 0 {
				t.Fatalf("%d rows stored, want none", n)
			}
			if !c.phased && e.count("idempotency_keys") != 0 {
				t.Fatal("the key row stayed") // a phased claim is released, kept for the retry
			}
			if l := log.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, idemserver.ErrOutsideTx.Error()) {
				t.Fatalf("log %q does not name the cause", l)
			}
			if s := e.keys.Stats(); s.Failed != 1 || s.Stored != 0 {
				t.Fatalf("Stats: %d failed, %d stored; want 1 and 0", s.Failed, s.Stored)
			}
			fixed := e.keys.Handle(route, &insertItem{e: e})
			if got := do(t, fixed, "POST", "/items", "k", "a"); got.status != http.StatusCreated || e.count("items") != 1 {
				t.Fatalf("the corrected retry: %d, %d items; want 201 and 1", got.status, e.count("items"))
			}
		})
	}
}

// TestAWriteOutsideTheTransactionCannotBeTold proves L2.12, what ErrOutsideTx's
// doc says of PostgreSQL and MySQL, where nothing tells a handler's
// statement on the *sql.DB: one on rows the request's transaction does
// not lock commits on its own, and the answer is stored; one on a row it
// locked waits for it until Config.WorkTimeout, the request gets 503 with
// nothing stored and the log asks whether that is what happened, and the
// statement then commits on its own.
func TestAWriteOutsideTheTransactionCannotBeTold(t *testing.T) {
	for _, s := range stores[1:] {
		for _, locked := range []bool{false, true} {
			name := s.name + "/free row"
			if locked {
				name = s.name + "/locked row"
			}
			t.Run(name, func(t *testing.T) {
				var log lockedBuffer
				e := newEnv(t, s, idemserver.Config{WorkTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))})
				var outsideErr error
				srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					if locked {
						if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES ('a', 'inside')`)); err != nil {
							idemserver.Fail(ctx, err)
							return
						}
					}
					_, outsideErr = e.db.Exec(e.q(`INSERT INTO items (id, note) VALUES ('a', 'outside')`))
					w.WriteHeader(http.StatusCreated)
				}))
				got := do(t, srv, "POST", "/items", "k", "a")
				want, keys := http.StatusCreated, 1
				if locked {
					want, keys = http.StatusServiceUnavailable, 0
				}
				if got.status != want || e.count("idempotency_keys") != keys {
					t.Fatalf("%d with %d key rows, want %d with %d", got.status, e.count("idempotency_keys"), want, keys)
				}
				var note string
				if err := e.db.QueryRow(`SELECT note FROM items`).Scan(&note); err != nil || note != "outside" || outsideErr != nil {
					t.Fatalf("items: %q, %v (the statement: %v); want the outside row alone, committed", note, err, outsideErr)
				}
				if l := log.String(); locked && (!strings.Contains(l, "outlived Config.WorkTimeout") || !strings.Contains(l, "to a row the transaction locked")) {
					t.Fatalf("log %q does not ask whether the handler wrote outside its transaction", l)
				}
			})
		}
	}
}

// TestSQLiteRequestsWaitForEachOtherPastTheBusyTimeout proves L2.16: on
// SQLite, requests' transactions wait for the one before them however
// long it holds the write lock; only a transaction begun on the *sql.DB
// outside any request gives up after the busy timeout (L2.13). A phased
// request, whose claim, Steps and final commit are transactions of their
// own, waits past the busy timeout for an atomic one held in its handler,
// and both are stored.
func TestSQLiteRequestsWaitForEachOtherPastTheBusyTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out SQLite's busy timeout, seconds; -short skips the tests that do")
	}
	const busyTimeout = 5 * time.Second // sqlite.Open's
	e := newEnv(t, stores[0], idemserver.Config{WorkTimeout: time.Minute})
	entered, release := make(chan struct{}), make(chan struct{})
	held := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		(&insertItem{e: e}).ServeHTTP(w, r)
	}))
	first := make(chan answer, 1)
	go func() { first <- do(t, held, "POST", "/items", "held", "a") }()
	select {
	case <-entered:
	case a := <-first:
		t.Fatalf("the first request answered %d without being held", a.status)
	}
	second := make(chan answer, 1)
	go func() {
		second <- do(t, e.keys.Handle(idemserver.Route{Phased: true}, &insertItem{e: e}), "POST", "/items", "waiting", "b")
	}()
	for {
		n, err := sqlitekit.Waiting(context.Background(), e.db)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(busyTimeout + time.Second) // the phased claim waits past the busy timeout
	close(release)
	if a, b := <-first, <-second; a.status != http.StatusCreated || b.status != http.StatusCreated {
		t.Fatalf("%d and %d, want 201 and 201", a.status, b.status)
	}
	if e.count("items") != 2 || e.count("idempotency_keys") != 2 {
		t.Fatalf("%d items, %d keys; want 2 and 2", e.count("items"), e.count("idempotency_keys"))
	}
}

// TestSQLiteInMemoryIsOneDatabase: sqlite.Open("") and sqlite.Open(":memory:")
// each open one database in memory that every connection of the *sql.DB
// shares (a statement outside the transactions runs on a connection of
// its own), and another Open another database.
func TestSQLiteInMemoryIsOneDatabase(t *testing.T) {
	for _, path := range []string{"", ":memory:"} {
		db, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		other, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := db.Exec(`CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer keys.Close()
		e := &env{t: t, store: stores[0], db: db}
		h := &insertItem{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		var wg sync.WaitGroup
		answers := make([]answer, 8)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = do(t, route, "POST", "/items", fmt.Sprintf("k%d", i%4), fmt.Sprintf("item-%d", i%4))
			}()
		}
		wg.Wait()
		for i, a := range answers {
			if a.status != http.StatusCreated {
				t.Fatalf("%q: answer %d: %d %q", path, i, a.status, a.body)
			}
		}
		// Two connections at once, each counting what the other wrote.
		c1, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		var n1, n2 int
		if err := c1.QueryRowContext(context.Background(), `SELECT count(*) FROM items`).Scan(&n1); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT count(*) FROM items`).Scan(&n2); err != nil {
			t.Fatal(err)
		}
		if n1 != 4 || n2 != 4 || h.Runs() != 4 {
			t.Fatalf("%q: %d and %d items seen, %d runs; want 4, 4, 4", path, n1, n2, h.Runs())
		}
		if _, err := other.Exec(`SELECT count(*) FROM items`); err == nil {
			t.Fatalf("%q: another Open sees this one's table", path)
		}
	}
}
