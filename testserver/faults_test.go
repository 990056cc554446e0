package testserver

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// S8.2 (and S3.1, S5.2): each fault, injected into one request, leaves the
// database consistent, and the retry under the same key (after a restart, as
// after a real crash) ends with exactly one effect.
func TestS8EachFaultLeavesTheDatabaseConsistent(t *testing.T) {
	const lockTimeout = 10 * time.Second
	type outcome struct {
		status    int  // 0: the connection is dropped without an answer
		effect    bool // the effect is stored after the faulted request
		locked    bool // the key is left locked (a crash mid-charge)
		crashedAt string
	}
	tests := []struct {
		name      string
		endpoint  int // index into mutatingEndpoints
		faults    Faults
		first     outcome
		replay    bool  // the retry is answered from the stored key
		gwCalls   int64 // gateway calls over both runs
		faultKind string
	}{
		{"reservation/error before commit", 0, Faults{ErrorBeforeCommit: 1}, outcome{status: -1}, false, 0, "error_before_commit"},
		{"reservation/hang up after commit", 0, Faults{HangUpAfterCommit: 1}, outcome{effect: true}, true, 0, "hang_up_after_commit"},
		{"reservation/502 after commit", 0, Faults{BadGatewayAfterCommit: 1}, outcome{status: 502, effect: true}, true, 0, "bad_gateway_after_commit"},
		{"reservation/crash before commit", 0, Faults{CrashBeforeCommit: 1}, outcome{crashedAt: CrashPointBeforeCommit}, false, 0, "crash_before_commit"},
		{"reservation/crash after commit", 0, Faults{CrashAfterCommit: 1}, outcome{effect: true, crashedAt: CrashPointAfterCommit}, true, 0, "crash_after_commit"},
		{"reservation/delay", 0, Faults{DelayRate: 1, Delay: time.Millisecond}, outcome{status: 201, effect: true}, true, 0, "delay"},
		{"reservation/gateway crash point never reached", 0, Faults{CrashAfterGateway: 1}, outcome{status: 201, effect: true}, true, 0, ""},

		{"charge/error before commit", 1, Faults{ErrorBeforeCommit: 1}, outcome{status: -1}, false, 1, "error_before_commit"},
		{"charge/hang up after commit", 1, Faults{HangUpAfterCommit: 1}, outcome{effect: true}, true, 1, "hang_up_after_commit"},
		{"charge/502 after commit", 1, Faults{BadGatewayAfterCommit: 1}, outcome{status: 502, effect: true}, true, 1, "bad_gateway_after_commit"},
		{"charge/crash before commit", 1, Faults{CrashBeforeCommit: 1}, outcome{locked: true, crashedAt: CrashPointBeforeCommit}, false, 1, "crash_before_commit"},
		{"charge/crash after commit", 1, Faults{CrashAfterCommit: 1}, outcome{effect: true, crashedAt: CrashPointAfterCommit}, true, 1, "crash_after_commit"},
		{"charge/crash after gateway", 1, Faults{CrashAfterGateway: 1}, outcome{locked: true, crashedAt: CrashPointAfterGateway}, false, 2, "crash_after_gateway"},
		{"charge/delay", 1, Faults{DelayRate: 1, Delay: time.Millisecond}, outcome{status: 201, effect: true}, true, 1, "delay"},
		{"charge/gateway failure", 1, Faults{Gateway: GatewayFaults{Failure: 1}}, outcome{status: 502}, false, 2, "gateway_failure"},
		{"charge/gateway answer lost", 1, Faults{Gateway: GatewayFaults{LostResponse: 1}}, outcome{status: 502}, false, 2, "gateway_lost_response"},

		{"stock/error before commit", 2, Faults{ErrorBeforeCommit: 1}, outcome{status: -1}, false, 0, "error_before_commit"},
		{"stock/crash after commit", 2, Faults{CrashAfterCommit: 1}, outcome{effect: true, crashedAt: CrashPointAfterCommit}, true, 0, "crash_after_commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := mutatingEndpoints[tt.endpoint]
			path, clock := dbPath(t), newFakeClock()
			var gwCalls atomic.Int64
			countCalls := func(in *Instance) {
				in.Server.gateway.setBeforeCapture(func(context.Context) { gwCalls.Add(1) })
			}
			setup := start(t, Config{Path: path, Now: clock.Now})
			stock(t, setup, "sku-1", 5)
			if err := setup.Close(); err != nil {
				t.Fatal(err)
			}
			effects := func(in *Instance) int64 {
				st := stats(t, in)
				switch tt.endpoint {
				case 0:
					return st.Effects.Reservations
				case 1:
					return st.Effects.Charges
				}
				return st.Keys - 1 // the stock set by the key of the setup
			}

			var crashes []string
			var mu sync.Mutex
			faulty := start(t, Config{Path: path, Now: clock.Now, LockTimeout: lockTimeout, Faults: tt.faults,
				Crash: func(point string) { mu.Lock(); crashes = append(crashes, point); mu.Unlock() }})
			countCalls(faulty)
			r := req{method: ep.method, path: ep.path, key: "k", body: ep.body}
			first, err := try(t, faulty, r)
			switch {
			case tt.first.status == 0 && err == nil:
				t.Fatalf("got %d %s, want the connection dropped", first.status, first.body)
			case tt.first.status == -1:
				if first.status != 500 && first.status != 503 {
					t.Fatalf("got %d %s (%v), want 500 or 503", first.status, first.body, err)
				}
				wantProblem(t, first, first.status, ProblemInjectedFault)
			case tt.first.status > 0:
				if err != nil {
					t.Fatal(err)
				}
				wantStatus(t, first, tt.first.status)
			}
			// sku-1 starts at 5; a reservation takes 1 and the stock
			// endpoint sets 4, a charge leaves it alone.
			wantStock := func(effect bool) int64 {
				if effect && tt.endpoint != 1 {
					return 4
				}
				return 5
			}
			if got := effects(faulty) == 1; got != tt.first.effect {
				t.Fatalf("effect stored after the fault: %v, want %v", got, tt.first.effect)
			}
			if got := available(t, faulty, "sku-1"); got != wantStock(tt.first.effect) {
				t.Fatalf("stock %d after the fault, want %d", got, wantStock(tt.first.effect))
			}
			st := stats(t, faulty)
			if got := st.InFlight == 1; got != tt.first.locked {
				t.Fatalf("key left locked: %v, want %v", got, tt.first.locked)
			}
			if tt.faultKind != "" && st.Faults[tt.faultKind] != 1 {
				t.Fatalf("faults %v, want %s: 1", st.Faults, tt.faultKind)
			}
			mu.Lock()
			crashed := crashes
			mu.Unlock()
			if tt.first.crashedAt != "" && (len(crashed) != 1 || crashed[0] != tt.first.crashedAt) {
				t.Fatalf("crash hook called with %v, want [%s]", crashed, tt.first.crashedAt)
			}
			if err := faulty.Close(); err != nil {
				t.Fatal(err)
			}

			// The restarted server: same file, no faults.
			in := start(t, Config{Path: path, Now: clock.Now, LockTimeout: lockTimeout})
			countCalls(in)
			if tt.first.locked {
				// The crashed request's lock holds until it goes stale.
				wantProblem(t, send(t, in, r), http.StatusConflict, ProblemInFlight)
				clock.Advance(lockTimeout)
			}
			retry := send(t, in, r)
			wantStatus(t, retry, ep.ok)
			if got := retry.header.Get(HeaderReplayed) == "true"; got != tt.replay {
				t.Fatalf("retry replayed: %v, want %v", got, tt.replay)
			}
			if n := effects(in); n != 1 {
				t.Fatalf("%d effects after the retry, want 1", n)
			}
			st = stats(t, in)
			if st.GatewayCaptures != st.Effects.Charges || st.InFlight != 0 || gwCalls.Load() != tt.gwCalls {
				t.Fatalf("stats %+v, gateway calls %d; want captures = charges, nothing in flight, %d calls",
					st, gwCalls.Load(), tt.gwCalls)
			}
			if got := available(t, in, "sku-1"); got != wantStock(true) {
				t.Fatalf("stock %d after the retry, want %d", got, wantStock(true))
			}
			checkConsistent(t, in.Server)
		})
	}
}

// S8.1: the default server injects nothing.
func TestS8NoFaultsByDefault(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 1000)
	for i := range 100 {
		wantStatus(t, send(t, in, req{method: "POST", path: "/reservations", key: "k" + itoa(i), body: `{"item_id":"sku-1","quantity":1}`}), 201)
		wantStatus(t, send(t, in, req{method: "POST", path: "/charges", key: "c" + itoa(i), body: chargeBody}), 201)
	}
	if st := stats(t, in); len(st.Faults) != 0 || st.Effects.Reservations != 100 || st.Effects.Charges != 100 {
		t.Fatalf("stats %+v", st)
	}
}

// S8.4: a fault drawn for after the commit acts only on the answer the
// handler gave and the layer stored. An answer the layer gave in its place
// (a refusal, a replay, a rolled-back 5xx, a failure after the handler)
// goes out as it is, and the fault is not counted.
func TestS8AfterCommitFaultsActOnlyOnAStoredAnswer(t *testing.T) {
	in := start(t, Config{})
	for _, c := range []struct {
		name     string
		handled  int // what the handler answered, 0 if it did not run
		code     int // what the layer sends
		replayed bool
		want     int
	}{
		{"stored", http.StatusCreated, http.StatusCreated, false, http.StatusBadGateway},
		{"stored refusal", http.StatusConflict, http.StatusConflict, false, http.StatusBadGateway},
		{"the layer's own answer", 0, http.StatusConflict, false, http.StatusConflict},
		{"replay", 0, http.StatusCreated, true, http.StatusCreated},
		{"replay after the handler ran", http.StatusCreated, http.StatusCreated, true, http.StatusCreated},
		{"rolled back 500", http.StatusInternalServerError, http.StatusInternalServerError, false, http.StatusInternalServerError},
		{"rolled back 503", http.StatusServiceUnavailable, http.StatusServiceUnavailable, false, http.StatusServiceUnavailable},
		{"failed after the handler", http.StatusCreated, http.StatusServiceUnavailable, false, http.StatusServiceUnavailable},
	} {
		rec := httptest.NewRecorder()
		if c.replayed {
			rec.Header().Set(HeaderReplayed, "true")
		}
		before := stats(t, in).Faults[faultBadGatewayAfterCommit.String()]
		a := &afterCommit{ResponseWriter: rec, s: in.Server, wk: &work{handled: c.handled, fault: fault{kind: faultBadGatewayAfterCommit}}}
		a.WriteHeader(c.code)
		a.Write([]byte(`{"answer":true}`))
		fired := stats(t, in).Faults[faultBadGatewayAfterCommit.String()] - before
		if rec.Code != c.want {
			t.Errorf("%s: sent %d, want %d", c.name, rec.Code, c.want)
		}
		if wantFired := c.want == http.StatusBadGateway; (fired == 1) != wantFired || fired > 1 {
			t.Errorf("%s: the fault counted %d times, want it counted: %v", c.name, fired, wantFired)
		}
		if answer := strings.Contains(rec.Body.String(), `"answer"`); answer == (c.want == http.StatusBadGateway) {
			t.Errorf("%s: body %q", c.name, rec.Body.String())
		}
	}
}

func TestFaultDiceIsSeededAndHonoursRates(t *testing.T) {
	f := UniformFaults(0.2, 42)
	run := func() []fault {
		d := newFaultDice(f)
		out := make([]fault, 20000)
		for i := range out {
			out[i] = d.draw()
		}
		return out
	}
	a, b := run(), run()
	count := map[faultKind]int{}
	statuses := map[int]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs between two dice with one seed: %v, %v", i, a[i], b[i])
		}
		count[a[i].kind]++
		if a[i].kind == faultErrorBeforeCommit {
			statuses[a[i].status]++
		}
	}
	faulted := len(a) - count[noFault]
	if got := float64(faulted) / float64(len(a)); math.Abs(got-0.2) > 0.01 {
		t.Fatalf("fault rate %.3f, want 0.2", got)
	}
	for k := faultErrorBeforeCommit; k <= faultDelay; k++ {
		if got := float64(count[k]) / float64(len(a)); math.Abs(got-0.2/7) > 0.006 {
			t.Errorf("%s rate %.4f, want %.4f", k, got, 0.2/7)
		}
	}
	if statuses[500] == 0 || statuses[503] == 0 || statuses[500]+statuses[503] != count[faultErrorBeforeCommit] {
		t.Fatalf("error statuses %v", statuses)
	}
	other := newFaultDice(UniformFaults(0.2, 43))
	same := 0
	for i := range 1000 {
		if other.draw() == a[i] {
			same++
		}
	}
	if same == 1000 {
		t.Fatal("another seed drew the same faults")
	}
	if d := newFaultDice(Faults{}); d.on || d.draw() != (fault{}) {
		t.Fatal("zero Faults must never fire")
	}
}

func TestDelayEndsWhenTheServerCloses(t *testing.T) {
	in := start(t, Config{Faults: Faults{DelayRate: 1, Delay: time.Hour}})
	stock := sendAsync(t, in, req{method: "PUT", path: "/inventory/sku-1", key: "k", body: `{"available":1}`})
	waitFor(t, "the delay to start", func() bool { return stats(t, in).Faults["delay"] == 1 })
	done := make(chan error, 1)
	go func() { done <- in.Server.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for an hour-long delay")
	}
	rep := <-stock
	wantProblem(t, rep, http.StatusServiceUnavailable, ProblemUnavailable)
}
