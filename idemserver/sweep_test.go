package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// The sweep deletes finished keys once their route's retention has
// passed, calls Forget in its transaction with them, and never deletes an
// unfinished key, which it counts as abandoned once no claim holds it.
func TestSweepDeletesFinishedKeysPastRetention(t *testing.T) {
	var forgotten []idemserver.Swept
	cfg := idemserver.Config{Forget: func(ctx context.Context, tx *sql.Tx, swept []idemserver.Swept) error {
		forgotten = append(forgotten, swept...)
		return nil
	}}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		forgotten = nil
		h := &insertItem{e: e}
		day := e.keys.Handle(idemserver.Route{}, h)
		week := e.keys.Handle(idemserver.Route{Retention: 7 * 24 * time.Hour}, h)
		crash := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		}))
		do(t, day, "POST", "/items", "d", "a")
		do(t, week, "POST", "/items", "w", "b")
		func() {
			defer func() { recover() }()
			do(t, crash, "POST", "/charges", "c", "x")
		}()

		e.clock.Advance(idemserver.DefaultRetention - time.Second)
		if n, err := e.keys.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("before retention: swept %d, %v", n, err)
		}
		e.clock.Advance(time.Second)
		n, err := e.keys.Sweep(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("at retention: swept %d, %v; want 1", n, err)
		}
		if len(forgotten) != 1 || forgotten[0] != (idemserver.Swept{Principal: "", Key: "d"}) {
			t.Fatalf("Forget got %v", forgotten)
		}
		if s := e.keys.Stats(); s.Abandoned != 1 || s.Swept != 1 {
			t.Fatalf("stats %+v: want the crashed key abandoned", s)
		}
		// The key is new again: the handler runs.
		if got := do(t, day, "POST", "/items", "d", "c"); got.status != http.StatusCreated || got.header.Get(idemserver.HeaderReplayed) != "" {
			t.Fatalf("after the sweep: %+v", got)
		}

		e.clock.Advance(7 * 24 * time.Hour)
		if n, err := e.keys.Sweep(context.Background()); err != nil || n != 2 {
			t.Fatalf("a week on: swept %d, %v; want 2", n, err)
		}
		if n := e.count("idempotency_keys"); n != 1 {
			t.Fatalf("%d keys left, want the unfinished one", n)
		}
	})
}

// A Forget that fails rolls the batch back: nothing is deleted.
func TestSweepForgetFailureKeepsKeys(t *testing.T) {
	boom := errors.New("boom")
	cfg := idemserver.Config{Forget: func(context.Context, *sql.Tx, []idemserver.Swept) error { return boom }}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		do(t, e.keys.Handle(idemserver.Route{}, &insertItem{e: e}), "POST", "/items", "d", "a")
		e.clock.Advance(idemserver.DefaultRetention)
		if _, err := e.keys.Sweep(context.Background()); !errors.Is(err, boom) {
			t.Fatalf("Sweep: %v, want boom", err)
		}
		if e.count("idempotency_keys") != 1 {
			t.Fatal("deleted despite Forget failing")
		}
	})
}

// After Close requests get 503 and Sweep ErrClosed; Run returns.
func TestClose(t *testing.T) {
	onBothStores(t, idemserver.Config{SweepInterval: time.Hour}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		done := make(chan error)
		go func() { done <- e.keys.Run(context.Background()) }()
		if err := e.keys.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := do(t, srv, "POST", "/items", "k", "a"); got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
			t.Fatalf("after Close: %+v", got)
		}
		if _, err := e.keys.Sweep(context.Background()); !errors.Is(err, idemserver.ErrClosed) {
			t.Fatalf("Sweep after Close: %v", err)
		}
	})
}

// New refuses a Config it cannot use.
func TestNewRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := idemserver.New(ctx, idemserver.Config{}); err == nil {
		t.Error("no DB accepted")
	}
	db := openSQLite(t)
	if _, err := idemserver.New(ctx, idemserver.Config{DB: db, Table: "keys; DROP TABLE x"}); err == nil {
		t.Error("bad table name accepted")
	}
	if _, err := idemserver.New(ctx, idemserver.Config{DB: db, Retention: -time.Second}); err == nil {
		t.Error("negative retention accepted")
	}
}

// Two Keys (replicas) open one PostgreSQL database at once: both create
// or find the tables, and share keys.
func TestReplicasShareKeys(t *testing.T) {
	db := openPostgres(t)
	ctx := context.Background()
	ks := make([]*idemserver.Keys, 3)
	errs := make(chan error, len(ks))
	for i := range ks {
		go func() {
			var err error
			ks[i], err = idemserver.New(ctx, idemserver.Config{DB: db})
			errs <- err
		}()
	}
	for range ks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, store: stores[1], db: db}
	if _, err := db.Exec(`CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	h := &insertItem{e: e}
	do(t, ks[0].Handle(idemserver.Route{}, h), "POST", "/items", "k", "a")
	if got := do(t, ks[2].Handle(idemserver.Route{}, h), "POST", "/items", "k", "a"); got.header.Get(idemserver.HeaderReplayed) != "true" {
		t.Fatalf("replica 2: %+v", got)
	}
	for _, k := range ks {
		k.Close()
	}
}

// Count reads the key table: every key, the finished ones, the claimed
// ones (live or lapsed), the live claims, and the unfinished keys past
// retention that no live claim holds.
func TestCountReadsTheTable(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		count := func(when string, want idemserver.Counts) {
			t.Helper()
			if got, err := e.keys.Count(ctx); err != nil || got != want {
				t.Errorf("%s: %+v, %v; want %+v", when, got, err, want)
			}
		}
		count("empty", idemserver.Counts{})
		do(t, e.keys.Handle(idemserver.Route{}, &insertItem{e: e}), "POST", "/items", "done", "a")
		func() {
			defer func() { recover() }()
			do(t, e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				panic(http.ErrAbortHandler) // a crash: the claim is kept
			})), "POST", "/charges", "crashed", "x")
		}()
		do(t, e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway) // the claim is released
		})), "POST", "/charges", "released", "x")
		count("at once", idemserver.Counts{Keys: 3, Finished: 1, Locked: 1, Live: 1})
		e.clock.Advance(idemserver.DefaultLockTimeout)
		count("the lease ended", idemserver.Counts{Keys: 3, Finished: 1, Locked: 1})
		e.clock.Advance(idemserver.DefaultRetention)
		count("past retention", idemserver.Counts{Keys: 3, Finished: 1, Locked: 1, Abandoned: 2})
	})
}

// The tables' columns mean what the package doc says.
func TestTablesAsDocumented(t *testing.T) {
	onBothStores(t, idemserver.Config{Principal: accountOf}, func(t *testing.T, e *env) {
		var downstream string
		crash := true
		srv := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			downstream = idemserver.DownstreamKey(r.Context(), "capture")
			idemserver.Step(r.Context(), "capture", func(context.Context, string) ([]byte, error) { return []byte("ch-1"), nil })
			if crash {
				panic(http.ErrAbortHandler)
			}
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("done"))
		}))
		func() {
			defer func() { recover() }()
			do(t, srv, "POST", "/charges", "k", "x", headerAccount, "t")
		}()
		start := e.clock.Now().UnixNano()
		var (
			id, created, expires, finished int64
			principal, key, seed           string
			token                          sql.NullString
			lease, status                  sql.NullInt64
		)
		row := func() {
			t.Helper()
			err := e.db.QueryRow(`SELECT id, principal, idem_key, seed, created_at, expires_at, finished, lock_token, lease_until, response_status
				FROM idempotency_keys`).Scan(&id, &principal, &key, &seed, &created, &expires, &finished, &token, &lease, &status)
			if err != nil {
				t.Fatal(err)
			}
		}
		row()
		if principal != "account:t" || key != "k" || downstream != "idem-"+seed+"-capture" || created != start ||
			expires != start+int64(idemserver.DefaultRetention) || finished != 0 || !token.Valid ||
			lease.Int64 != start+int64(idemserver.DefaultLockTimeout) || status.Valid {
			t.Fatalf("claimed row: %v %q %q seed %q (downstream %q) %d %d %d %v %v %v", id, principal, key, seed, downstream,
				created, expires, finished, token, lease, status)
		}
		var stepKey int64
		var name string
		var result []byte
		if err := e.db.QueryRow(`SELECT key_id, name, result FROM idempotency_keys_steps`).Scan(&stepKey, &name, &result); err != nil ||
			stepKey != id || name != "capture" || string(result) != "ch-1" {
			t.Fatalf("recovery point: %d %q %q, %v", stepKey, name, result, err)
		}
		e.clock.Advance(idemserver.DefaultLockTimeout)
		crash = false
		do(t, srv, "POST", "/charges", "k", "x", headerAccount, "t")
		row()
		var header string
		var body []byte
		if err := e.db.QueryRow(`SELECT response_header, response_body FROM idempotency_keys`).Scan(&header, &body); err != nil {
			t.Fatal(err)
		}
		if finished != 1 || token.Valid || lease.Valid || status.Int64 != http.StatusCreated ||
			header != `{"Content-Type":["text/plain"]}` || string(body) != "done" || expires != start+int64(idemserver.DefaultRetention) {
			t.Fatalf("finished row: %d %v %v %v %q %q expires %d", finished, token, lease, status, header, body, expires)
		}
		if n := e.count("idempotency_keys_steps"); n != 0 {
			t.Fatalf("%d recovery points after the finish", n)
		}
	})
}

// Close waits for a running request to commit: the handler, held until
// Close has begun (new requests get 503), finds Close not yet returned
// when it is released, and once Close returns the request's key and
// writes are committed. On both kinds of route.
func TestCloseWaitsForRunningCommit(t *testing.T) {
	for _, phased := range []bool{false, true} {
		t.Run(fmt.Sprintf("phased=%v", phased), func(t *testing.T) {
			onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
				entered, release, closed := make(chan struct{}), make(chan struct{}), make(chan struct{})
				var returnedEarly atomic.Bool
				srv := e.keys.Handle(idemserver.Route{Phased: phased}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					if phased {
						if _, err := idemserver.Step(ctx, "call", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
							t.Error(err)
						}
					}
					if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "a", "held"); err != nil {
						t.Error(err)
					}
					close(entered)
					<-release
					select {
					case <-closed:
						returnedEarly.Store(true)
					default:
					}
					w.WriteHeader(http.StatusCreated)
				}))
				served := make(chan answer, 1)
				go func() { served <- do(t, srv, "POST", "/items", "k", "a") }()
				<-entered
				go func() {
					e.keys.Close()
					close(closed)
				}()
				// Close has begun once a request that needs no database
				// (it has no key) is refused as shutting down.
				for do(t, srv, "POST", "/items", "", "a").status != http.StatusServiceUnavailable {
					runtime.Gosched()
				}
				close(release)
				<-closed
				var keys, items int
				if err := e.db.QueryRow(`SELECT (SELECT COUNT(*) FROM idempotency_keys WHERE finished = 1), (SELECT COUNT(*) FROM items)`).
					Scan(&keys, &items); err != nil {
					t.Fatal(err)
				}
				if keys != 1 || items != 1 {
					t.Fatalf("when Close returned: %d finished keys, %d items; want the request committed", keys, items)
				}
				if got := <-served; got.status != http.StatusCreated {
					t.Fatalf("the running request: %+v", got)
				}
				if returnedEarly.Load() { // read once the handler is done
					t.Fatal("Close returned while a request was running")
				}
			})
		})
	}
}

// Run sweeps every Config.SweepInterval: an expired key is deleted with
// no Sweep called. Close, called once Forget has seen the key, waits for
// that sweep to commit, and Run then returns nil.
func TestRunSweeps(t *testing.T) {
	swept := make(chan []idemserver.Swept, 1)
	cfg := idemserver.Config{SweepInterval: 10 * time.Millisecond, Forget: func(ctx context.Context, tx *sql.Tx, s []idemserver.Swept) error {
		select {
		case swept <- s:
		default:
		}
		return nil
	}}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		do(t, e.keys.Handle(idemserver.Route{}, &insertItem{e: e}), "POST", "/items", "k", "a")
		e.clock.Advance(idemserver.DefaultRetention)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound, not an expectation
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- e.keys.Run(ctx) }()
		var s []idemserver.Swept
		select {
		case s = <-swept:
		case err := <-done:
			t.Fatalf("Run returned %v before sweeping", err)
		}
		if err := e.keys.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v, want nil after Close", err)
		}
		if len(s) != 1 || s[0].Key != "k" {
			t.Errorf("Forget got %+v, want the key k", s)
		}
		if st := e.keys.Stats(); st.Swept != 1 || e.count("idempotency_keys") != 0 {
			t.Errorf("Stats.Swept %d with %d keys left; want 1 and 0", st.Swept, e.count("idempotency_keys"))
		}
	})
}
