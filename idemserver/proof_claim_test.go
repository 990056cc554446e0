package idemserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/internal/sqlitekit"
)

// orderer is an atomic handler that draws an order number from the
// database's own counter (an identity column, a sequence: numbers a
// rolled-back run uses up too) and answers 201 with it.
type orderer struct {
	e    *proofEnv
	runs atomic.Int64
	// wait, if set, runs in the handler before it answers.
	wait func(ctx context.Context)
}

func (h *orderer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	ctx := r.Context()
	_, key, _ := idemserver.Key(ctx)
	var id int64
	var err error
	if h.e.s.mysql {
		var res sql.Result
		if res, err = txOf(ctx).ExecContext(ctx, `INSERT INTO orders (k) VALUES (?)`, key); err == nil {
			id, err = res.LastInsertId()
		}
	} else {
		err = txOf(ctx).QueryRowContext(ctx, h.e.q(`INSERT INTO orders (k) VALUES (?) RETURNING id`), key).Scan(&id)
	}
	if err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	if h.wait != nil {
		h.wait(ctx)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d}`, id)
}

// ordersDDL is the table of orders of s, numbered by the database.
func ordersDDL(s proofStore) string {
	if s.pg {
		return `CREATE TABLE orders (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, k TEXT NOT NULL)`
	}
	if s.mysql {
		// InnoDB's AUTO_INCREMENT, like a sequence, keeps a number a
		// rolled-back insert used.
		return `CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, k TEXT NOT NULL)`
	}
	return `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT NOT NULL)`
}

// waiting counts the requests that wait for the database: on PostgreSQL
// the sessions waiting for a lock, on MySQL the transactions waiting for
// a lock, on SQLite the transactions waiting for the one before them.
func (e *proofEnv) waiting() int {
	query := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	switch {
	case e.s.mysql:
		// InnoDB refreshes what information_schema.innodb_trx shows only
		// when it has not been read for 0.1 s: read it no more often.
		e.waitMu.Lock()
		defer e.waitMu.Unlock()
		time.Sleep(time.Until(e.lastWaitQuery.Add(150 * time.Millisecond)))
		defer func() { e.lastWaitQuery = time.Now() }()
		query = `SELECT COUNT(*) FROM information_schema.innodb_trx t
			JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`
	case !e.s.pg:
		n, err := sqlitekit.Waiting(context.Background(), e.db)
		if err != nil {
			e.t.Errorf("counting the transactions waiting: %v", err)
			return 1 << 20
		}
		return n
	}
	var n int
	if err := e.db.QueryRow(query).Scan(&n); err != nil {
		e.t.Errorf("counting the sessions waiting for a lock: %v", err)
		return 1 << 20
	}
	return n
}

// awaitWaiting waits until n requests wait for the database (see
// waiting), failing the test if a request of done finishes first or if
// they do not within a minute.
func (e *proofEnv) awaitWaiting(n int, done <-chan *httptestRecorder) {
	e.t.Helper()
	deadline := time.After(time.Minute)
	for e.waiting() < n {
		select {
		case w := <-done:
			e.t.Fatalf("a request finished (%d %q) instead of waiting for the key", w.Code, w.Body.String())
		case <-deadline:
			e.t.Fatalf("%d requests wait for the database after a minute, want %d", e.waiting(), n)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestL2ADuplicateNeverRunsTheHandler proves L2.10: 16 concurrent
// requests under one key on an atomic route run the handler once; the
// other 15 wait on the key, run nothing and get its stored answer, and the
// database's counter moved once, so that the next key's order is number 2.
func TestL2ADuplicateNeverRunsTheHandler(t *testing.T) {
	const n = 16
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		if _, err := e.db.Exec(ordersDDL(s)); err != nil {
			t.Fatal(err)
		}
		k := e.keys(e.config())
		// The first run answers only once the 15 others wait for the
		// database (or, were a duplicate to run the handler, once one
		// does), so that they all meet its key while it runs.
		h := &orderer{e: e}
		var firstRun sync.Once
		h.wait = func(ctx context.Context) {
			firstRun.Do(func() {
				for h.runs.Load() == 1 && e.waiting() < n-1 {
					select {
					case <-ctx.Done():
						t.Errorf("the others never waited for the key: %d waiting", e.waiting())
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
			})
		}
		route := k.Handle(idemserver.Route{}, h)
		answers := make([]*httptest.ResponseRecorder, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				w := httptest.NewRecorder()
				route.ServeHTTP(w, req("POST", "/orders", `{"item":"tea"}`, "one-order"))
				answers[i] = w
			}()
		}
		close(start)
		wg.Wait()
		if runs := h.runs.Load(); runs != 1 {
			t.Errorf("the handler ran %d times for %d requests under one key, want 1", runs, n)
		}
		fresh := 0
		for i, w := range answers {
			if w.Code != http.StatusCreated || w.Body.String() != `{"order":1}` {
				t.Errorf("answer %d: %d %q, want 201 {\"order\":1}", i, w.Code, w.Body.String())
			}
			if w.Header().Get(idemserver.HeaderReplayed) != "true" {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d answers not marked replayed, want 1", fresh)
		}
		if got := k.Stats(); got.Stored != 1 || got.Replays != n-1 {
			t.Errorf("Stats: %d stored, %d replays; want 1 and %d", got.Stored, got.Replays, n-1)
		}
		next := serve(route, req("POST", "/orders", `{"item":"tea"}`, "another-order"))
		if next.Code != http.StatusCreated || next.Body.String() != `{"order":2}` {
			t.Errorf("the next key's order: %d %q, want 201 {\"order\":2}: the duplicates drew numbers", next.Code, next.Body.String())
		}
		if rows := e.count("orders"); rows != 2 {
			t.Errorf("%d orders, want 2", rows)
		}
	})
}
