package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// gateway is a downstream service that captures money once per key.
type gateway struct {
	mu    sync.Mutex
	calls map[string]int
	fail  bool
}

func (g *gateway) capture(ctx context.Context, key string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[string]int{}
	}
	g.calls[key]++
	if g.fail {
		return nil, errors.New("gateway down")
	}
	return []byte("ch-" + strconv.Itoa(len(g.calls))), nil
}

func (g *gateway) total() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.calls {
		n += c
	}
	return n
}

// charge is a phased handler: capture (a Step), then record the charge
// through Tx. hook, if set, runs between the two with the attempt number.
type charge struct {
	e       *env
	gw      *gateway
	mu      sync.Mutex
	attempt int
	hook    func(ctx context.Context, attempt int) bool // false: stop, answer 502
}

func (c *charge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.attempt++
	attempt := c.attempt
	c.mu.Unlock()
	ctx := r.Context()
	body, _ := io.ReadAll(r.Body)
	id, err := idemserver.Step(ctx, "capture", c.gw.capture)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if c.hook != nil && !c.hook(ctx, attempt) {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	tx := idemserver.Tx(ctx)
	if _, err := tx.ExecContext(ctx, c.e.q(`INSERT INTO items (id, note) VALUES (?, ?)`),
		fmt.Sprintf("%s-%d", body, attempt), string(id)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "charged %s", id)
}

// A crash between the downstream call and the commit: the claim holds
// until its lease ends (409 meanwhile), then the retry resumes from the
// recovery point and the gateway is not called again (L3).
func TestPhasedCrashResumesWithoutSecondCall(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		gw := &gateway{}
		h := &charge{e: e, gw: gw, hook: func(ctx context.Context, attempt int) bool {
			if attempt == 1 {
				panic(http.ErrAbortHandler) // the crash
			}
			return true
		}}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		func() {
			defer func() { recover() }()
			do(t, srv, "POST", "/charges", "k", "a")
		}()
		if e.count("items") != 0 {
			t.Fatal("the crashed attempt committed")
		}
		busy := do(t, srv, "POST", "/charges", "k", "a")
		if busy.status != http.StatusConflict || busy.header.Get("Retry-After") != "10" {
			t.Fatalf("while the claim holds: %+v, want 409 with Retry-After: 10", busy)
		}
		e.clock.Advance(idemserver.DefaultLockTimeout)
		got := do(t, srv, "POST", "/charges", "k", "a")
		if got.status != http.StatusCreated || got.body != "charged ch-1" {
			t.Fatalf("resumed: %+v", got)
		}
		if gw.total() != 1 {
			t.Fatalf("gateway called %d times, want 1", gw.total())
		}
		if again := do(t, srv, "POST", "/charges", "k", "a"); again.body != "charged ch-1" || again.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("replay: %+v", again)
		}
		if s := e.keys.Stats(); s.Resumed != 1 || s.StepsKept != 1 || s.StepsRun != 1 || s.InFlight != 1 {
			t.Errorf("stats %+v", s)
		}
		if n := e.count("idempotency_keys_steps"); n != 0 {
			t.Errorf("%d recovery points left after the finish, want 0", n)
		}
	})
}

// An answer >= 500 releases the claim and keeps the recovery point: the
// retry resumes at once, without calling again.
func TestPhasedServerErrorReleasesClaim(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		gw := &gateway{}
		h := &charge{e: e, gw: gw, hook: func(ctx context.Context, attempt int) bool { return attempt > 1 }}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusBadGateway {
			t.Fatalf("first: %+v", got)
		}
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusCreated {
			t.Fatalf("retry: %+v", got)
		}
		if gw.total() != 1 {
			t.Fatalf("gateway called %d times, want 1", gw.total())
		}
	})
}

// The downstream key is the same in every attempt of a request, and
// differs between principals using the same key.
func TestDownstreamKeyIsStable(t *testing.T) {
	onBothStores(t, idemserver.Config{Principal: accountOf}, func(t *testing.T, e *env) {
		gw := &gateway{fail: true}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, &charge{e: e, gw: gw})
		do(t, srv, "POST", "/charges", "k", "a", headerAccount, "one") // fails: nothing recorded
		do(t, srv, "POST", "/charges", "k", "a", headerAccount, "one")
		do(t, srv, "POST", "/charges", "k", "a", headerAccount, "other")
		gw.mu.Lock()
		defer gw.mu.Unlock()
		if len(gw.calls) != 2 {
			t.Fatalf("downstream keys %v: want one per principal", gw.calls)
		}
		for dk, n := range gw.calls {
			if n != 2 && n != 1 {
				t.Errorf("key %s called %d times", dk, n)
			}
		}
	})
}

// A second request while the claim is live gets 409; the holder then
// finishes and the second's retry is replayed.
func TestPhasedInFlight(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		started, proceed := make(chan struct{}), make(chan struct{})
		h := &charge{e: e, gw: &gateway{}, hook: func(ctx context.Context, attempt int) bool {
			if attempt == 1 {
				close(started)
				<-proceed
			}
			return true
		}}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		first := make(chan answer)
		go func() { first <- do(t, srv, "POST", "/charges", "k", "a") }()
		<-started
		busy := do(t, srv, "POST", "/charges", "k", "a")
		close(proceed)
		if busy.status != http.StatusConflict || busy.header.Get("Retry-After") == "" {
			t.Fatalf("duplicate in flight: %+v", busy)
		}
		if got := <-first; got.status != http.StatusCreated {
			t.Fatalf("holder: %+v", got)
		}
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("after: %+v", got)
		}
	})
}

// L5: a holder whose lease lapsed (by Config.Now) and that another
// request took over commits nothing: the takeover fenced it. One that
// nobody took over finishes, and its answer is stored and replayed.
func TestPhasedLapsedHolder(t *testing.T) {
	for _, takeover := range []bool{true, false} {
		t.Run(fmt.Sprintf("takeover=%v", takeover), func(t *testing.T) {
			onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
				started, proceed := make(chan struct{}), make(chan struct{})
				gw := &gateway{}
				h := &charge{e: e, gw: gw, hook: func(ctx context.Context, attempt int) bool {
					if attempt == 1 {
						close(started)
						<-proceed
					}
					return true
				}}
				srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
				first := make(chan answer)
				go func() { first <- do(t, srv, "POST", "/charges", "k", "a") }()
				<-started
				e.clock.Advance(idemserver.DefaultLockTimeout)
				var taker answer
				if takeover {
					if taker = do(t, srv, "POST", "/charges", "k", "a"); taker.status != http.StatusCreated {
						t.Errorf("taker: %+v", taker)
					}
				}
				close(proceed)
				holder := <-first
				var holderRows int
				if err := e.db.QueryRow(e.q(`SELECT COUNT(*) FROM items WHERE id = ?`), "a-1").Scan(&holderRows); err != nil {
					t.Fatal(err)
				}
				if !takeover {
					if holder.status != http.StatusCreated || holder.body != "charged ch-1" || holderRows != 1 {
						t.Fatalf("untaken lapsed holder: %+v with %d rows, want 201 stored", holder, holderRows)
					}
					replay := do(t, srv, "POST", "/charges", "k", "a")
					if replay.body != holder.body || replay.header.Get(idemserver.HeaderReplayed) != "true" {
						t.Fatalf("replay: %+v, want the holder's answer", replay)
					}
					if s := e.keys.Stats(); s.LockLost != 0 || s.Resumed != 0 || s.Stored != 1 {
						t.Errorf("stats %+v", s)
					}
					return
				}
				if holder.status != http.StatusConflict || holderRows != 0 {
					t.Fatalf("taken-over holder: %+v with %d rows, want 409 and none", holder, holderRows)
				}
				if n := e.count("items"); n != 1 {
					t.Fatalf("%d items, want the taker's 1", n)
				}
				if gw.total() != 1 {
					t.Fatalf("gateway called %d times", gw.total())
				}
				if replay := do(t, srv, "POST", "/charges", "k", "a"); replay.body != taker.body {
					t.Fatalf("replay: %+v, want the taker's answer %+v", replay, taker)
				}
				if s := e.keys.Stats(); s.LockLost != 1 {
					t.Errorf("LockLost = %d, want 1", s.LockLost)
				}
			})
		})
	}
}

// The holder's context ends when its lease does, with cause ErrLockLost,
// and its Steps then fail with ErrLockLost.
func TestPhasedLeaseEndsHolderContext(t *testing.T) {
	onBothStores(t, idemserver.Config{LockTimeout: 200 * time.Millisecond}, func(t *testing.T, e *env) {
		var cause, stepErr error
		srv := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			<-ctx.Done()
			cause = context.Cause(ctx)
			_, stepErr = idemserver.Step(ctx, "late", func(context.Context, string) ([]byte, error) {
				t.Error("a Step ran after the lease ended")
				return nil, nil
			})
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, srv, "POST", "/charges", "k", "a")
		if !errors.Is(cause, idemserver.ErrLockLost) || !errors.Is(stepErr, idemserver.ErrLockLost) {
			t.Fatalf("cause %v, Step error %v; want ErrLockLost", cause, stepErr)
		}
		if got.status != http.StatusConflict || e.count("idempotency_keys") != 1 {
			t.Fatalf("answer %+v", got)
		}
	})
}

// Step refuses to run outside a phased route and after Tx.
func TestStepMisuse(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		noop := func(context.Context, string) ([]byte, error) { return nil, nil }
		var atomicErr, afterTx error
		atomic := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, atomicErr = idemserver.Step(r.Context(), "s", noop)
		}))
		phased := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemserver.Tx(r.Context())
			_, afterTx = idemserver.Step(r.Context(), "s", noop)
		}))
		do(t, atomic, "POST", "/a", "k1", "x")
		do(t, phased, "POST", "/p", "k2", "x")
		if _, err := idemserver.Step(context.Background(), "s", noop); !errors.Is(err, idemserver.ErrNotPhased) {
			t.Errorf("outside: %v", err)
		}
		if !errors.Is(atomicErr, idemserver.ErrNotPhased) || !errors.Is(afterTx, idemserver.ErrTxBegun) {
			t.Errorf("atomic: %v; after Tx: %v", atomicErr, afterTx)
		}
	})
}

// A Step that finds the claim taken over returns ErrLockLost, and the
// request gets 409 whatever its handler then writes.
func TestPhasedStepAfterTakeoverIsLockLost(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		started, proceed := make(chan struct{}), make(chan struct{})
		var second error
		h := &charge{e: e, gw: &gateway{}, hook: func(ctx context.Context, attempt int) bool {
			if attempt != 1 {
				return true
			}
			close(started)
			<-proceed
			_, second = idemserver.Step(ctx, "mail", func(context.Context, string) ([]byte, error) {
				t.Error("a Step ran for a holder that lost its claim")
				return nil, nil
			})
			return false // 502
		}}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		first := make(chan answer)
		go func() { first <- do(t, srv, "POST", "/charges", "k", "a") }()
		<-started
		e.clock.Advance(idemserver.DefaultLockTimeout)
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusCreated {
			t.Fatalf("taker: %+v", got)
		}
		close(proceed)
		if got := <-first; got.status != http.StatusConflict || !errors.Is(second, idemserver.ErrLockLost) {
			t.Fatalf("holder: %+v, Step error %v; want 409, ErrLockLost", got, second)
		}
	})
}

// A handler whose lease ended gets a nil Tx; the panic of using it is
// answered as the lost claim, not raised.
func TestPhasedTxAfterLeaseIsAnswered(t *testing.T) {
	onBothStores(t, idemserver.Config{LockTimeout: 200 * time.Millisecond}, func(t *testing.T, e *env) {
		var tx *sql.Tx
		srv := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			tx = idemserver.Tx(r.Context())
			tx.ExecContext(r.Context(), "SELECT 1") // panics on a nil Tx
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, srv, "POST", "/charges", "k", "a")
		if tx != nil || got.status != http.StatusConflict {
			t.Fatalf("Tx %v, answer %+v; want nil, 409", tx, got)
		}
	})
}

// A phased key's retention counts from its first request, not from its
// finish, however long the request took: the sweep deletes it once the
// retention has passed since the claim.
func TestPhasedRetentionCountsFromTheClaim(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &charge{e: e, gw: &gateway{}, hook: func(ctx context.Context, attempt int) bool { return attempt > 1 }}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		do(t, srv, "POST", "/charges", "k", "a") // 502: claim released, row kept
		e.clock.Advance(idemserver.DefaultRetention - time.Second)
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusCreated {
			t.Fatalf("resumed almost a day later: %+v", got)
		}
		if n, err := e.keys.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("swept %d, %v before the retention passed since the claim", n, err)
		}
		e.clock.Advance(time.Second)
		if n, err := e.keys.Sweep(context.Background()); err != nil || n != 1 {
			t.Fatalf("swept %d, %v a day after the claim; want 1", n, err)
		}
	})
}

// A key row deleted while its request ran (by something outside Keys):
// 500, telling the client not to send the request again.
func TestPhasedRowGoneIsNotRetried(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &charge{e: e, gw: &gateway{}, hook: func(ctx context.Context, attempt int) bool {
			if _, err := e.db.Exec(`DELETE FROM idempotency_keys`); err != nil {
				t.Error(err)
			}
			return true
		}}
		got := do(t, e.keys.Handle(idemserver.Route{Phased: true}, h), "POST", "/charges", "k", "a")
		if got.status != http.StatusInternalServerError || !strings.Contains(got.body, "Do not send this request again") {
			t.Fatalf("%+v", got)
		}
		if e.count("items") != 0 {
			t.Fatal("committed without its key row")
		}
	})
}

// Resumed tells a new row from one taken over after a release (a 5xx)
// and from one taken over after its claim lapsed (a crash).
func TestResumedTellsLapsedFromReleased(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		var seen []string
		h := &charge{e: e, gw: &gateway{}, hook: func(ctx context.Context, attempt int) bool {
			resumed, lapsed := idemserver.Resumed(ctx)
			seen = append(seen, fmt.Sprintf("%d:%v/%v", attempt, resumed, lapsed))
			switch attempt {
			case 1:
				return false // 502: the claim is released
			case 2:
				panic(http.ErrAbortHandler) // a crash: the claim is kept until it lapses
			}
			return true
		}}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, h)
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusBadGateway {
			t.Fatalf("first: %+v", got)
		}
		func() {
			defer func() { recover() }()
			do(t, srv, "POST", "/charges", "k", "a")
		}()
		e.clock.Advance(idemserver.DefaultLockTimeout)
		if got := do(t, srv, "POST", "/charges", "k", "a"); got.status != http.StatusCreated {
			t.Fatalf("third: %+v", got)
		}
		if want := "[1:false/false 2:true/false 3:true/true]"; fmt.Sprint(seen) != want {
			t.Errorf("Resumed per attempt %v, want %s", seen, want)
		}
		var atomicResumed, atomicLapsed bool
		do(t, e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			atomicResumed, atomicLapsed = idemserver.Resumed(r.Context())
		})), "POST", "/a", "k2", "x")
		if r, l := idemserver.Resumed(context.Background()); r || l || atomicResumed || atomicLapsed {
			t.Errorf("outside a phased route: %v/%v, atomic %v/%v; want false", r, l, atomicResumed, atomicLapsed)
		}
	})
}
