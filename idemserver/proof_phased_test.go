package idemserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// L3.1: a request that dies after the gateway call and before its step's
// record (a panic in the step, as a crash) is resumed, once its lease has
// lapsed, under the same downstream key, so the gateway (idempotent by
// key) captures once; a step already recorded is not run again. A step
// that fails after the call (502) releases the claim and is resumed at
// once, under the same key too.
func TestL3AResumeKeepsTheDownstreamKey(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		for _, how := range []string{"crash", "failure"} {
			t.Run(how, func(t *testing.T) {
				e := newProofEnv(t, s)
				keys := e.keys(e.config())
				gw := newProofGateway()
				broken := true
				c := &charger{e: e, gw: gw, afterCharge: func(ctx context.Context, dk string) error {
					if !broken {
						return nil
					}
					broken = false
					if how == "crash" {
						panic(http.ErrAbortHandler)
					}
					return errors.New("connection reset after the gateway answered")
				}}
				route := keys.Handle(idemserver.Route{Phased: true}, c)
				w, p := servePanic(route, req("POST", "/charges", "x", "pay-1"))
				switch how {
				case "crash":
					if p != http.ErrAbortHandler {
						t.Fatalf("the crashed request raised %v, want http.ErrAbortHandler", p)
					}
					e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
				case "failure":
					wantStatus(t, "the failed step", w, http.StatusBadGateway)
				}
				if n := e.count("things"); n != 0 {
					t.Fatalf("%d business rows after the first attempt, want 0", n)
				}
				first := serve(route, req("POST", "/charges", "x", "pay-1"))
				wantStatus(t, "the resumed request", first, http.StatusCreated)
				captures, calls := gw.state()
				if captures != 1 || len(calls) != 2 || calls[0] != calls[1] || calls[0] == "" {
					t.Errorf("gateway: %d captures, calls under keys %q; want 1 capture, the same key twice", captures, calls)
				}
				if !strings.Contains(first.Body.String(), `"capture":"capture-1"`) {
					t.Errorf("resumed answer %q does not carry capture-1", first.Body.String())
				}
				if r, ch := c.reserves.Load(), c.charges.Load(); r != 1 || ch != 2 {
					t.Errorf("reserve ran %d times, charge %d; want 1 (recorded, not run again), 2", r, ch)
				}
				wantReplay(t, "after the resume", serve(route, req("POST", "/charges", "x", "pay-1")), first)
				if n := e.count("things"); n != 1 {
					t.Errorf("%d business rows, want 1", n)
				}
				if st := keys.Stats(); st.StepsKept < 1 {
					t.Errorf("Stats.StepsKept %d, want at least 1", st.StepsKept)
				}
			})
		}
	})
}

// L3.2: DownstreamKey is what Step passes to its function, the same on
// every attempt of one request, and another for another step, another
// key and another principal; it is "" outside idemserver. Step outside a
// phased route is ErrNotPhased.
func TestL3DownstreamKeysDifferPerStepKeyAndPrincipal(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		cfg := e.config()
		cfg.Principal = accountOf
		keys := e.keys(cfg)
		fail := true
		var seen []string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			a, b := idemserver.DownstreamKey(ctx, "a"), idemserver.DownstreamKey(ctx, "b")
			var given string
			if _, err := idemserver.Step(ctx, "a", func(ctx context.Context, dk string) ([]byte, error) {
				given = dk
				return nil, nil
			}); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if given != "" && given != a {
				t.Errorf("Step gave %q, DownstreamKey says %q", given, a)
			}
			seen = append(seen, a, b)
			if fail {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		route := keys.Handle(idemserver.Route{Phased: true}, h)
		wantStatus(t, "alice k1, failing", serve(route, of(req("POST", "/x", "", "k1"), "alice")), http.StatusServiceUnavailable)
		fail = false
		wantStatus(t, "alice k1, resumed", serve(route, of(req("POST", "/x", "", "k1"), "alice")), http.StatusCreated)
		if len(seen) != 4 || seen[0] != seen[2] || seen[1] != seen[3] {
			t.Fatalf("downstream keys across two attempts %q, want the same pair twice", seen)
		}
		seen = seen[2:]
		wantStatus(t, "alice k2", serve(route, of(req("POST", "/x", "", "k2"), "alice")), http.StatusCreated)
		wantStatus(t, "bob k1", serve(route, of(req("POST", "/x", "", "k1"), "bob")), http.StatusCreated)
		distinct := map[string]bool{}
		for _, k := range seen {
			if k == "" {
				t.Errorf("an empty downstream key in %q", seen)
			}
			distinct[k] = true
		}
		if len(seen) != 6 || len(distinct) != 6 {
			t.Errorf("downstream keys for (alice k1), (alice k2), (bob k1), steps a and b: %q, want 6 distinct", seen)
		}
		for _, k := range seen {
			if strings.Contains(k, "k1") || strings.Contains(k, "alice") {
				t.Errorf("downstream key %q shows the client's key or principal", k)
			}
		}
		if k := idemserver.DownstreamKey(context.Background(), "a"); k != "" {
			t.Errorf("DownstreamKey outside idemserver %q, want empty", k)
		}

		var stepErr error
		atomicRoute := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, stepErr = idemserver.Step(r.Context(), "a", func(ctx context.Context, dk string) ([]byte, error) { return nil, nil })
			w.WriteHeader(http.StatusNoContent)
		}))
		serve(atomicRoute, of(req("POST", "/y", "", "atomic"), "alice"))
		if !errors.Is(stepErr, idemserver.ErrNotPhased) {
			t.Errorf("Step on an atomic route: %v, want ErrNotPhased", stepErr)
		}
	})
}

// L5.1: a live claim is not taken over (409) until its lease lapses by
// the Keys' clock; then a retry takes it over, runs the steps not yet
// recorded under the same downstream key and commits; the stale holder's
// next Step fails with ErrLockLost and proofStores nothing.
func TestL5AClaimIsTakenOverOnlyWhenItLapses(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		gw := newProofGateway()
		entered, release, open := gate(t)
		c := &charger{e: e, gw: gw, stepErr: make(chan error, 1)}
		c.inCharge = func(ctx context.Context, dk string) {
			if c.charges.Load() == 1 {
				close(entered)
				<-release
			}
		}
		route := keys.Handle(idemserver.Route{Phased: true}, c)
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(route, req("POST", "/charges", "x", "lease")) }()
		waitEntered(t, entered, done)
		wantProblem(t, "a live claim", serve(route, req("POST", "/charges", "x", "lease")), http.StatusConflict)
		e.clock.Add(idemserver.DefaultLockTimeout - time.Second)
		wantProblem(t, "a claim a second from lapsing", serve(route, req("POST", "/charges", "x", "lease")), http.StatusConflict)
		e.clock.Add(2 * time.Second)
		second := serve(route, req("POST", "/charges", "x", "lease"))
		wantStatus(t, "the retry after the lease lapsed", second, http.StatusCreated)
		open()
		stale := <-done
		select {
		case err := <-c.stepErr:
			if !errors.Is(err, idemserver.ErrLockLost) {
				t.Errorf("the stale holder's Step: %v, want ErrLockLost", err)
			}
		default:
			t.Errorf("the stale holder's Step succeeded; its answer %d %q", stale.Code, stale.Body.String())
		}
		if stale.Code == http.StatusCreated {
			t.Errorf("the stale holder answered 201 %q", stale.Body.String())
		}
		captures, calls := gw.state()
		if captures != 1 || len(calls) != 2 || calls[0] != calls[1] {
			t.Errorf("gateway: %d captures under %q; want 1 capture, one key", captures, calls)
		}
		if n := e.count("things"); n != 1 {
			t.Errorf("%d business rows, want 1", n)
		}
		wantReplay(t, "afterwards", serve(route, req("POST", "/charges", "x", "lease")), second)
		if r := c.reserves.Load(); r != 1 {
			t.Errorf("reserve ran %d times, want 1", r)
		}
	})
}

// L5.2: a holder taken over after its steps, before its commit, can no
// longer commit: the takeover changed the token every fenced write
// matches. Nothing of it is stored; the new holder resumes without
// running the recorded steps, and one business row stands.
func TestL5ALapsedHolderCannotCommit(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		gw := newProofGateway()
		entered, release, open := gate(t)
		c := &charger{e: e, gw: gw}
		c.beforeTx = func(ctx context.Context) {
			if c.runs.Load() == 1 {
				close(entered)
				<-release
			}
		}
		route := keys.Handle(idemserver.Route{Phased: true}, c)
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(route, req("POST", "/charges", "x", "late")) }()
		waitEntered(t, entered, done)
		e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
		second := serve(route, req("POST", "/charges", "x", "late"))
		wantStatus(t, "the new holder", second, http.StatusCreated)
		open()
		stale := <-done
		if stale.Code == http.StatusCreated || stale.Code < 400 {
			t.Errorf("the taken-over holder's commit answered %d %q, want a refusal", stale.Code, stale.Body.String())
		}
		if r, ch := c.reserves.Load(), c.charges.Load(); r != 1 || ch != 1 {
			t.Errorf("reserve ran %d times, charge %d; want 1, 1 (recorded before the takeover)", r, ch)
		}
		if captures, _ := gw.state(); captures != 1 {
			t.Errorf("%d captures, want 1", captures)
		}
		if n := e.count("things"); n != 1 {
			t.Errorf("%d business rows, want 1 (the new holder's)", n)
		}
		wantReplay(t, "afterwards", serve(route, req("POST", "/charges", "x", "late")), second)
		if st := keys.Stats(); st.LockLost < 1 {
			t.Errorf("Stats.LockLost %d, want at least 1", st.LockLost)
		}
	})
}

// L5.3: a claim lapses by a takeover only: a holder whose lease ended by
// the Keys' clock, inside a Step or after its steps, and whom no request
// took over, still records its Step and commits; its answer is stored
// and replayed, with one capture and one business row.
func TestL5AnUntakenHolderStillFinishes(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		for _, where := range []string{"inside a Step", "after its steps"} {
			t.Run(where, func(t *testing.T) {
				e := newProofEnv(t, s)
				keys := e.keys(e.config())
				gw := newProofGateway()
				entered, release, open := gate(t)
				c := &charger{e: e, gw: gw, stepErr: make(chan error, 1)}
				hold := func() {
					if c.runs.Load() == 1 {
						close(entered)
						<-release
					}
				}
				if where == "inside a Step" {
					c.inCharge = func(context.Context, string) { hold() }
				} else {
					c.beforeTx = func(context.Context) { hold() }
				}
				route := keys.Handle(idemserver.Route{Phased: true}, c)
				done := make(chan *httptestRecorder, 1)
				go func() { done <- serve(route, req("POST", "/charges", "x", "untaken")) }()
				waitEntered(t, entered, done)
				e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
				open()
				first := <-done
				select {
				case err := <-c.stepErr:
					t.Errorf("the untaken holder's Step: %v, want it recorded", err)
				default:
				}
				wantStatus(t, "the untaken holder", first, http.StatusCreated)
				wantReplay(t, "the retry", serve(route, req("POST", "/charges", "x", "untaken")), first)
				if captures, calls := gw.state(); captures != 1 || len(calls) != 1 {
					t.Errorf("gateway: %d captures, %d calls; want 1, 1", captures, len(calls))
				}
				if r, ch, n := c.reserves.Load(), c.charges.Load(), c.runs.Load(); r != 1 || ch != 1 || n != 1 {
					t.Errorf("reserve ran %d times, charge %d, the handler %d; want 1, 1, 1", r, ch, n)
				}
				if n := e.count("things"); n != 1 {
					t.Errorf("%d business rows, want 1", n)
				}
				if st := keys.Stats(); st.LockLost != 0 {
					t.Errorf("Stats.LockLost %d, want 0", st.LockLost)
				}
			})
		}
	})
}

// L5.4: a stale holder that gives up after a takeover it has not noticed
// (it answers 5xx without another Step) cannot release the claim of the
// request that took over while that one still works: a third request
// still gets 409, and the new holder commits, with one capture.
func TestL5AStaleHolderCannotReleaseTheNewClaim(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		gw := newProofGateway()
		entered1, release1, open1 := gate(t)
		entered2, release2, open2 := gate(t)
		var runs atomic.Int64
		route := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			ctx := r.Context()
			capture, err := idemserver.Step(ctx, "charge", func(ctx context.Context, dk string) ([]byte, error) {
				return []byte(gw.capture(dk)), nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			switch n {
			case 1:
				close(entered1)
				<-release1
				http.Error(w, "the local work failed", http.StatusServiceUnavailable)
				return
			case 2:
				close(entered2)
				<-release2
			}
			p, k, _ := idemserver.Key(ctx)
			if _, err := txOf(ctx).ExecContext(ctx, e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), p, k, string(capture)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write(capture)
		}))
		done1 := make(chan *httptestRecorder, 1)
		go func() { done1 <- serve(route, req("POST", "/charges", "x", "two")) }()
		waitEntered(t, entered1, done1)
		e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
		done2 := make(chan *httptestRecorder, 1)
		go func() { done2 <- serve(route, req("POST", "/charges", "x", "two")) }()
		waitEntered(t, entered2, done2)
		open1()
		if stale := <-done1; stale.Code == http.StatusCreated {
			t.Errorf("the stale holder answered 201 %q", stale.Body.String())
		}
		wantProblem(t, "a third request while the new holder works", serve(route, req("POST", "/charges", "x", "two")), http.StatusConflict)
		open2()
		second := <-done2
		wantStatus(t, "the new holder", second, http.StatusCreated)
		if captures, calls := gw.state(); captures != 1 || len(calls) != 1 {
			t.Errorf("gateway: %d captures, %d calls; want 1, 1 (the step recorded)", captures, len(calls))
		}
		if n := e.count("things"); n != 1 {
			t.Errorf("%d business rows, want 1", n)
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
		wantReplay(t, "afterwards", serve(route, req("POST", "/charges", "x", "two")), second)
	})
}

// L5.6: retries racing to take over one lapsed claim take it over once:
// eight retries meet the row while another transaction holds it locked,
// and once it lets go one takes the claim over and runs the handler; the
// others find the new claim (409) or its answer, and run nothing. (On
// MySQL the look-up reads the row FOR UPDATE: read without the lock, each
// retry would judge the old claim lapsed and take it over in turn.)
func TestL5RetriesTakeALapsedClaimOverOnce(t *testing.T) {
	const n = 8
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		gw := newProofGateway()
		crash := &charger{e: e, gw: gw, beforeTx: func(context.Context) { panic("crash after the steps") }}
		if _, p := servePanic(keys.Handle(idemserver.Route{Phased: true}, crash), req("POST", "/charges", "x", "lapsed")); p == nil {
			t.Fatal("the first request did not crash")
		}
		e.clock.Add(idemserver.DefaultLockTimeout + time.Second)

		// Another transaction holds the key row locked while the retries
		// arrive (on SQLite, the write lock).
		lock, err := e.db.BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Rollback()
		forUpdate := " FOR UPDATE"
		if !s.pg && !s.mysql {
			forUpdate = ""
		}
		var id int64
		if err := lock.QueryRow(e.q(`SELECT id FROM `+idemserver.DefaultTable+` WHERE idem_key = ?`+forUpdate), "lapsed").Scan(&id); err != nil {
			t.Fatal(err)
		}
		retry := &charger{e: e, gw: gw}
		route := keys.Handle(idemserver.Route{Phased: true}, retry)
		done := make(chan *httptestRecorder, n)
		for range n {
			go func() { done <- serve(route, req("POST", "/charges", "x", "lapsed")) }()
		}
		e.awaitWaiting(n, done)
		if err := lock.Commit(); err != nil {
			t.Fatal(err)
		}
		created := 0
		for range n {
			switch w := <-done; w.Code {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
			default:
				t.Errorf("a retry answered %d %q, want 201 or 409", w.Code, w.Body.String())
			}
		}
		if runs := retry.runs.Load(); runs != 1 || created < 1 {
			t.Fatalf("the handler ran %d times for %d retries of a lapsed claim (%d answered 201); want once", runs, n, created)
		}
		if captures, _ := gw.state(); captures != 1 || e.count("things") != 1 {
			t.Fatalf("%d captures, %d business rows; want 1 and 1", captures, e.count("things"))
		}
	})
}
