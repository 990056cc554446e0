package idemserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
)

// L1.11: two Keys (replicas) on one PostgreSQL or MariaDB database, 200 concurrent
// requests under one key spread over both: one business row, one
// committed handler run, and every final answer is the stored one byte
// for byte; on an atomic route none is refused in flight (the
// transaction is the lock), on a phased route the others get 409 until
// the first finishes.
func TestL1ReplicasOneKeyOneEffect(t *testing.T) {
	for _, phased := range []bool{false, true} {
		t.Run(routeName(phased), func(t *testing.T) {
			eachSharedStore(t, func(t *testing.T, s proofStore) {
				e := newProofEnv(t, s)
				storm(t, e, replicas(t, e, 2, idemserver.Config{}), phased, 200)
			})
		})
	}
}

// L2.6: on one Keys of each store, 50 concurrent requests under one key
// have one effect and one answer, as across replicas.
func TestL2ConcurrentRequestsOnOneKeyHaveOneEffect(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		for _, phased := range []bool{false, true} {
			t.Run(routeName(phased), func(t *testing.T) {
				e := newProofEnv(t, s)
				storm(t, e, []*idemserver.Keys{e.keys(e.config())}, phased, 50)
			})
		}
	})
}

func routeName(phased bool) string {
	if phased {
		return "phased"
	}
	return "atomic"
}

// storm sends n concurrent requests under one key, spread over keys, and
// checks that they had one effect and got one answer.
func storm(t *testing.T, e *proofEnv, keys []*idemserver.Keys, phased bool, n int) {
	t.Helper()
	var routes []http.Handler
	var runs []func() int64
	for _, k := range keys {
		if phased {
			c := &charger{e: e, gw: newProofGateway()}
			routes = append(routes, k.Handle(idemserver.Route{Phased: true}, c))
			runs = append(runs, c.runs.Load)
		} else {
			h := &inserter{e: e}
			routes = append(routes, k.Handle(idemserver.Route{}, h))
			runs = append(runs, h.runs.Load)
		}
	}
	answers := make([]*httptestRecorder, n)
	conflicts := make([]int, n)
	start := make(chan struct{})
	// A request refused in flight retries once some request has its final
	// answer (sent after its commit), so its retry finds the stored one;
	// one refused for contention (503) retries at once.
	answered := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				w := serve(routes[i%len(routes)], req("POST", "/things", `{"amount":100}`, "one-key"))
				switch w.Code {
				case http.StatusConflict:
					conflicts[i]++
					<-answered
					continue
				case http.StatusServiceUnavailable:
					conflicts[i]++
					continue
				}
				answers[i] = w
				once.Do(func() { close(answered) })
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	// An atomic route's transaction that PostgreSQL aborts runs again,
	// handler included, and rolls back: only reruns may add runs, and
	// only one commits.
	var reruns, ran int64
	for i, k := range keys {
		reruns += k.Stats().Reruns
		ran += runs[i]()
	}
	if ran < 1 || ran > 1+reruns || phased && ran != 1 {
		t.Errorf("handlers ran %d times with %d reruns, want 1 (atomic: at most 1+reruns)", ran, reruns)
	}
	if b := e.count("things"); b != 1 {
		t.Errorf("%d business rows, want 1", b)
	}
	var first *httptestRecorder
	fresh, refused := 0, 0
	for i, w := range answers {
		if w.Header().Get(idemserver.HeaderReplayed) != "true" {
			fresh++
			first = w
		}
		if conflicts[i] > 0 {
			refused++
		}
	}
	if fresh != 1 || first == nil {
		t.Fatalf("%d answers not marked replayed, want 1 (the first)", fresh)
	}
	wantStatus(t, "the first answer", first, http.StatusCreated)
	for i, w := range answers {
		if w.Code != first.Code || w.Body.String() != first.Body.String() {
			t.Fatalf("answer %d: %d %q, want the stored %d %q", i, w.Code, w.Body.String(), first.Code, first.Body.String())
		}
	}
	if !phased && refused != 0 {
		t.Errorf("%d requests on the atomic route were refused in flight or for contention, want 0", refused)
	}
	t.Logf("%d of %d requests were refused at least once before their answer; %d reruns", refused, n, reruns)
}

// replicas opens n Keys on e's database (PostgreSQL or MySQL), each
// with its own pool, on e's clock.
func replicas(t *testing.T, e *proofEnv, n int, cfg idemserver.Config) []*idemserver.Keys {
	t.Helper()
	var out []*idemserver.Keys
	for range n {
		out = append(out, e.keys(e.replica(cfg)))
	}
	return out
}

// L1.13: replicas starting together on an empty PostgreSQL or MariaDB database all
// open it, and serve one key space.
func TestL1ReplicasCreateTheTablesAtOnce(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		const n = 4
		keys := make([]*idemserver.Keys, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			cfg := e.replica(idemserver.Config{Logger: proofQuiet, Now: e.clock.Now})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				keys[i], errs[i] = idemserver.New(context.Background(), cfg)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("replica %d: New: %v", i, err)
			}
			t.Cleanup(func() { keys[i].Close() })
		}
		h := &inserter{e: e}
		first := serve(keys[0].Handle(idemserver.Route{}, h), req("POST", "/things", "{}", "k"))
		wantStatus(t, "replica 0", first, http.StatusCreated)
		for i := 1; i < n; i++ {
			wantReplay(t, "another replica", serve(keys[i].Handle(idemserver.Route{}, h), req("POST", "/things", "{}", "k")), first)
		}
	})
}

// L1.14: replicas sweeping at once delete each expired key once: the
// counts add up to the keys, and each key's Forget commits once.
func TestL1ReplicasSweepEachKeyOnce(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		// Forget writes each swept key into a table whose primary key
		// refuses a second row, in the sweep's transaction: what counts is
		// what committed, not how often Forget ran (a sweep whose commit
		// failed, a connection lost under load, runs it again in a new
		// transaction, and the first one's rows are rolled back with it).
		if _, err := e.db.Exec(`CREATE TABLE swept_once (k VARCHAR(64) PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		ks := replicas(t, e, 2, idemserver.Config{Forget: func(ctx context.Context, tx *sql.Tx, swept []idemserver.Swept) error {
			ftx := forgetTx(ctx, tx)
			for _, s := range swept {
				if _, err := ftx.ExecContext(ctx, e.q(`INSERT INTO swept_once (k) VALUES (?)`), s.Key); err != nil {
					return err
				}
			}
			return nil
		}})
		h := &inserter{e: e}
		const n = 60
		for i := range n {
			wantStatus(t, "storing", serve(ks[i%2].Handle(idemserver.Route{}, h), req("POST", "/things", "{}", fmt.Sprintf("sweep-%d", i))), http.StatusCreated)
		}
		e.clock.Add(idemserver.DefaultRetention + time.Second)
		counts := make([]int64, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				counts[i], errs[i] = ks[i].Sweep(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || counts[0]+counts[1] != n {
			t.Fatalf("sweeps: %d, %v and %d, %v; want %d in all", counts[0], errs[0], counts[1], errs[1], n)
		}
		if got := e.count("swept_once"); got != n {
			t.Errorf("Forget committed %d keys, want each of the %d once", got, n)
		}
		if k := e.keyRows(); k != 0 {
			t.Errorf("%d key rows left, want 0", k)
		}
	})
}

// L3.3: a replica that dies after the gateway call, before its record, is
// resumed by another replica once the lease lapses, under the same
// downstream key: one capture, the recorded step not run again.
func TestL3AnotherReplicaResumes(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		ks := replicas(t, e, 2, idemserver.Config{})
		gw := newProofGateway()
		crashed := false
		c := &charger{e: e, gw: gw, afterCharge: func(ctx context.Context, dk string) error {
			if !crashed {
				crashed = true
				panic(http.ErrAbortHandler)
			}
			return nil
		}}
		a := ks[0].Handle(idemserver.Route{Phased: true}, c)
		b := ks[1].Handle(idemserver.Route{Phased: true}, c)
		if _, p := servePanic(a, req("POST", "/charges", "x", "dies")); p != http.ErrAbortHandler {
			t.Fatalf("replica a's request raised %v, want http.ErrAbortHandler", p)
		}
		wantProblem(t, "replica b, the lease live", serve(b, req("POST", "/charges", "x", "dies")), http.StatusConflict)
		e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
		first := serve(b, req("POST", "/charges", "x", "dies"))
		wantStatus(t, "replica b, resumed", first, http.StatusCreated)
		captures, calls := gw.state()
		if captures != 1 || len(calls) != 2 || calls[0] != calls[1] {
			t.Errorf("gateway: %d captures under %q; want 1 under one key", captures, calls)
		}
		if r := c.reserves.Load(); r != 1 {
			t.Errorf("reserve ran %d times, want 1", r)
		}
		wantReplay(t, "replica a afterwards", serve(a, req("POST", "/charges", "x", "dies")), first)
		if st := ks[1].Stats(); st.Resumed != 1 {
			t.Errorf("replica b's Stats.Resumed %d, want 1", st.Resumed)
		}
	})
}

// eachSharedStore runs f as a subtest on every store that replicas share
// over the network: PostgreSQL and MariaDB.
func eachSharedStore(t *testing.T, f func(t *testing.T, s proofStore)) {
	t.Helper()
	for _, s := range proofStores {
		if s.pg || s.mysql {
			t.Run(s.name, func(t *testing.T) { f(t, s) })
		}
	}
}

// replica sets on cfg a pool of its own on e's shared database: a
// pgxpool.Pool on the pgxpool store, else a *sql.DB.
func (e *proofEnv) replica(cfg idemserver.Config) idemserver.Config {
	e.t.Helper()
	if e.s.pool {
		cfg.Store = postgres.Pool(e.openPool())
		return cfg
	}
	db, err := sql.Open(e.s.driver(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	db.SetMaxOpenConns(10)
	e.t.Cleanup(func() { db.Close() })
	cfg.DB = db
	return cfg
}

// driver is the database/sql driver of a shared store.
func (s proofStore) driver() string {
	if s.mysql {
		return "mysql"
	}
	return "pgx"
}
