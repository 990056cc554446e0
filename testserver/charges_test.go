package testserver

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const chargeBody = `{"customer":"cus_1","amount":1200,"currency":"usd","reference":"invoice-42"}`

func TestPostCharge(t *testing.T) {
	in := start(t, Config{})
	rep := send(t, in, req{method: "POST", path: "/charges", key: "c1", client: "alice",
		body: `{"customer":"cus_1","amount":1200,"currency":"USD","reference":"invoice-42"}`})
	wantStatus(t, rep, http.StatusCreated)
	if rep.header.Get(HeaderReplayed) != "" {
		t.Fatal("a first answer must not say it is replayed")
	}
	c := decode[Charge](t, rep)
	if !strings.HasPrefix(c.ID, "ch_") || c.Customer != "cus_1" || c.Amount != 1200 || c.Currency != "usd" ||
		c.Reference != "invoice-42" || !strings.HasPrefix(c.GatewayChargeID, "gw_") || c.Status != ChargeSucceeded || c.CreatedAt == "" {
		t.Fatalf("charge %+v", c)
	}
	if loc(rep) != "/charges/"+c.ID {
		t.Fatalf("Location %q", loc(rep))
	}
	if in.Server.Gateway().Captures() != 1 {
		t.Fatalf("captures %d, want 1", in.Server.Gateway().Captures())
	}
	var point string
	if err := in.Server.db.read.QueryRow(`SELECT ` + recoveryPointSQL + ` FROM idempotency_keys k`).Scan(&point); err != nil || point != pointFinished {
		t.Fatalf("recovery point %q (%v), want finished", point, err)
	}
	checkConsistent(t, in.Server)
}

func TestGetCharges(t *testing.T) {
	in := start(t, Config{})
	post := func(key, client, customer, ref string) Charge {
		body := `{"customer":"` + customer + `","amount":100,"currency":"eur","reference":"` + ref + `"}`
		rep := send(t, in, req{method: "POST", path: "/charges", key: key, client: client, body: body})
		wantStatus(t, rep, 201)
		return decode[Charge](t, rep)
	}
	a1 := post("k1", "alice", "cus_a", "r1")
	a2 := post("k2", "alice", "cus_a", "r2")
	a3 := post("k3", "alice", "cus_b", "r1")
	post("k1", "bob", "cus_a", "r1") // same key, other client: its own charge

	list := func(client, query string) []string {
		rep := send(t, in, req{method: "GET", path: "/charges" + query, client: client})
		wantStatus(t, rep, 200)
		var ids []string
		for _, c := range decode[ChargeList](t, rep).Charges {
			ids = append(ids, c.ID)
		}
		return ids
	}
	tests := []struct {
		name   string
		client string
		query  string
		want   []string
	}{
		{"all of a client's", "alice", "", []string{a1.ID, a2.ID, a3.ID}},
		{"by customer", "alice", "?customer=cus_a", []string{a1.ID, a2.ID}},
		{"by reference", "alice", "?reference=r1", []string{a1.ID, a3.ID}},
		{"by both", "alice", "?customer=cus_b&reference=r1", []string{a3.ID}},
		{"none", "alice", "?customer=cus_z", nil},
		{"anonymous sees none", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := list(tt.client, tt.query); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("GET /charges%s = %v, want %v", tt.query, got, tt.want)
			}
		})
	}
	t.Run("one", func(t *testing.T) {
		rep := send(t, in, req{method: "GET", path: "/charges/" + a1.ID, client: "alice"})
		wantStatus(t, rep, 200)
		if got := decode[Charge](t, rep); got != a1 {
			t.Fatalf("GET = %+v, want %+v", got, a1)
		}
		wantProblem(t, send(t, in, req{method: "GET", path: "/charges/" + a1.ID, client: "bob"}), 404, ProblemNotFound)
		wantProblem(t, send(t, in, req{method: "GET", path: "/charges/ch_nope", client: "alice"}), 404, ProblemNotFound)
	})
	// S2: reads are scoped as keys are, and say so. An empty anonymous
	// read says why it may be empty, so it is not taken for "nothing
	// charged"; a client's read names its scope.
	t.Run("scope is said", func(t *testing.T) {
		anon := decode[ChargeList](t, send(t, in, req{method: "GET", path: "/charges?customer=cus_a"}))
		if anon.Scope != AnonymousClient || anon.Note != anonymousEmptyNote || len(anon.Charges) != 0 {
			t.Fatalf("anonymous read = %+v, want scope %q and the note", anon, AnonymousClient)
		}
		alice := decode[ChargeList](t, send(t, in, req{method: "GET", path: "/charges?customer=cus_z", client: "alice"}))
		if alice.Scope != "client:alice" || alice.Note != "" {
			t.Fatalf("alice's empty read = %+v, want scope client:alice and no note", alice)
		}
	})
	t.Run("bad query", func(t *testing.T) {
		wantProblem(t, send(t, in, req{method: "GET", path: "/charges?cust=x"}), 400, ProblemInvalidRequest)
		wantProblem(t, send(t, in, req{method: "GET", path: "/charges?customer=a&customer=b"}), 400, ProblemInvalidRequest)
	})
}

// pause is a hook that stops the first call made through it until
// released, and reports when that call has started; later calls pass.
type pause struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newPause() *pause {
	return &pause{started: make(chan struct{}), release: make(chan struct{})}
}

func (p *pause) hook(ctx context.Context) {
	first := false
	p.once.Do(func() { first = true })
	if !first {
		return
	}
	close(p.started)
	select {
	case <-p.release:
	case <-ctx.Done():
	}
}

// blockGateway makes the next capture wait until released.
func blockGateway(s *Server) *pause {
	p := newPause()
	s.gateway.setBeforeCapture(p.hook)
	return p
}

func TestChargeInFlightGets409WithRetryAfter(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, LockTimeout: 10 * time.Second})
	gw := blockGateway(in.Server)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-gw.started // the first request holds the key's lock

	tests := []struct {
		advance    time.Duration
		retryAfter string
	}{
		{0, "10"},
		{2500 * time.Millisecond, "8"}, // 7.5s left, rounded up
		{7 * time.Second, "1"},         // 0.5s left
	}
	for _, tt := range tests {
		clock.Advance(tt.advance)
		rep := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
		wantProblem(t, rep, http.StatusConflict, ProblemInFlight)
		if got := rep.header.Get("Retry-After"); got != tt.retryAfter {
			t.Fatalf("Retry-After %q, want %q", got, tt.retryAfter)
		}
	}
	// A different body under the key is a mismatch even while in flight.
	wantProblem(t, send(t, in, req{method: "POST", path: "/charges", key: "c1", body: `{"customer":"x","amount":1,"currency":"usd"}`}),
		422, ProblemKeyMismatch)

	close(gw.release)
	rep := <-first
	wantStatus(t, rep, 201)
	again := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	wantStatus(t, again, 201)
	if string(again.body) != string(rep.body) || again.header.Get(HeaderReplayed) != "true" {
		t.Fatalf("retry after finish: %s, want the replayed %s", again.body, rep.body)
	}
	st := stats(t, in)
	if st.Conflicts != 3 || st.Mismatches != 1 || st.Replays != 1 || st.Effects.Charges != 1 || st.GatewayCaptures != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A retry that finds the lock stale takes the request over; the old holder,
// when it wakes up, finds its lock gone and stops without a second effect.
func TestStaleLockIsTakenOver(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, LockTimeout: 5 * time.Second})
	gw := blockGateway(in.Server)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-gw.started

	clock.Advance(5 * time.Second)
	second := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	wantStatus(t, second, 201)
	if second.header.Get(HeaderReplayed) != "" {
		t.Fatal("the takeover's answer is a first answer, not a replay")
	}

	close(gw.release) // the old holder captures (a replay at the gateway), then finds its lock taken
	old := <-first
	wantProblem(t, old, http.StatusConflict, ProblemInFlight)

	st := stats(t, in)
	if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want one capture, one charge, one takeover, nothing in flight", st)
	}
	again := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	if again.status != 201 || string(again.body) != string(second.body) {
		t.Fatalf("replay %d %s, want %s", again.status, again.body, second.body)
	}
	checkConsistent(t, in.Server)
}

func TestChargeRecoversFromGatewayFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults GatewayFaults
	}{
		{"failure before capture", GatewayFaults{Failure: 1}},
		{"answer lost after capture", GatewayFaults{LostResponse: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := dbPath(t)
			in := start(t, Config{Path: path, Faults: Faults{Gateway: tt.faults}})
			rep := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
			wantProblem(t, rep, http.StatusBadGateway, ProblemGatewayFailed)
			st := stats(t, in)
			if st.InFlight != 0 || st.Effects.Charges != 0 {
				t.Fatalf("after the gateway failed: %+v; want the lock released and no charge", st)
			}
			downstream := downstreamKey(t, in, "c1")
			if err := in.Close(); err != nil {
				t.Fatal(err)
			}
			// The gateway recovers; the retry under the same key resumes at
			// once (the lock was released) and captures at most once.
			in = start(t, Config{Path: path})
			rep = send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
			wantStatus(t, rep, 201)
			if rep.header.Get(HeaderReplayed) != "" {
				t.Fatal("the first successful answer must not be marked replayed")
			}
			st = stats(t, in)
			if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 {
				t.Fatalf("stats %+v, want one capture and one charge", st)
			}
			if got := downstreamKey(t, in, "c1"); got != downstream {
				t.Fatalf("the resume passed downstream key %q, want the row's %q", got, downstream)
			}
			var captured string
			if err := in.Server.db.read.QueryRow(`SELECT key FROM gateway_captures`).Scan(&captured); err != nil || captured != downstream {
				t.Fatalf("captured under %q (%v), want %q", captured, err, downstream)
			}
			checkConsistent(t, in.Server)
		})
	}
}

// downstreamKey reads the downstream key stored in the anonymous client's
// row for key.
func downstreamKey(t testing.TB, in *Instance, key string) string {
	t.Helper()
	var k string
	if err := in.Server.db.read.QueryRow(`SELECT `+downstreamKeySQL+` FROM idempotency_keys k WHERE idem_key = ?`, key).Scan(&k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestConcurrentRequestsWithOneKeyHaveOneEffect(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		tests := []struct {
			name   string
			method string
			path   string
			body   string
			ok     int
		}{
			{"reservation", "POST", "/reservations", `{"item_id":"sku-1","quantity":2,"reference":"r"}`, 201},
			{"charge", "POST", "/charges", chargeBody, 201},
			{"stock", "PUT", "/inventory/sku-2", `{"available": 3}`, 200},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				in := start(t, Config{Path: newDB(t)})
				stock(t, in, "sku-1", 100)
				const n = 16
				var wg sync.WaitGroup
				replies := make([]reply, n)
				gate := make(chan struct{})
				for i := range n {
					wg.Go(func() {
						<-gate
						replies[i] = <-sendAsync(t, in, req{method: tt.method, path: tt.path, key: "same", client: "c", body: tt.body})
					})
				}
				close(gate)
				wg.Wait()
				firsts, replays, conflicts := 0, 0, 0
				var answer string
				for _, rep := range replies {
					switch {
					case rep.status == tt.ok && rep.header.Get(HeaderReplayed) == "true":
						replays++
						if answer != "" && string(rep.body) != answer {
							t.Fatalf("two different answers: %s and %s", answer, rep.body)
						}
						answer = string(rep.body)
					case rep.status == tt.ok:
						firsts++
					case rep.status == http.StatusConflict && rep.header.Get("Retry-After") != "":
						conflicts++
					default:
						t.Fatalf("unexpected reply %d %s", rep.status, rep.body)
					}
				}
				if firsts != 1 || firsts+replays+conflicts != n {
					t.Fatalf("%d first answers, %d replays, %d in-flight conflicts; want exactly one first answer", firsts, replays, conflicts)
				}
				st := stats(t, in)
				var keys int64
				if err := in.Server.db.read.QueryRow(`SELECT COUNT(*) FROM idempotency_keys WHERE principal = 'client:c' AND idem_key = 'same' AND response_body IS NOT NULL`).Scan(&keys); err != nil || keys != 1 {
					t.Fatalf("%d stored responses (%v), want 1", keys, err)
				}
				// sku-1 starts at 100 and loses one reservation of 2 at most;
				// sku-2 exists only if the stock request ran.
				wantSKU1, wantSKU2 := int64(100), int64(-1)
				switch tt.path {
				case "/reservations":
					wantSKU1 = 98
					if st.Effects.Reservations != 1 {
						t.Fatalf("stats %+v; want one reservation", st)
					}
				case "/charges":
					if st.Effects.Charges != 1 || st.GatewayCaptures != 1 {
						t.Fatalf("stats %+v; want one charge and one capture", st)
					}
				default:
					wantSKU2 = 3
				}
				if got := available(t, in, "sku-1"); got != wantSKU1 {
					t.Fatalf("sku-1 stock %d, want %d", got, wantSKU1)
				}
				if wantSKU2 < 0 {
					wantProblem(t, send(t, in, req{method: "GET", path: "/inventory/sku-2"}), http.StatusNotFound, ProblemUnknownItem)
				} else if got := available(t, in, "sku-2"); got != wantSKU2 {
					t.Fatalf("sku-2 stock %d, want %d", got, wantSKU2)
				}
				checkConsistent(t, in.Server)
			})
		}
	})
}

// A key row that disappears under a running charge (the server never
// deletes an unfinished row; a person or another program did) cannot be
// taken over by a retry: the retry would start afresh under a new
// downstream key and could capture the money again. The holder answers 500
// without inviting a retry and logs what is needed to reconcile.
func TestChargeWhoseKeyRowVanishedIsNotInvitedToRetry(t *testing.T) {
	var logs lockedBuffer
	in := start(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	gw := blockGateway(in.Server)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-gw.started
	if _, err := in.Server.db.write.Exec(`DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	close(gw.release)
	rep := <-first
	p := wantProblem(t, rep, http.StatusInternalServerError, ProblemKeyLost)
	if ra := rep.header.Get("Retry-After"); ra != "" || strings.Contains(strings.ToLower(p.Detail), "retry with") {
		t.Fatalf("Retry-After %q, detail %q: the answer must not invite a retry", ra, p.Detail)
	}
	if st := stats(t, in); st.GatewayCaptures != 1 || st.Effects.Charges != 0 || st.Conflicts != 0 {
		t.Fatalf("stats %+v, want the one capture, no charge and no in-flight conflict", st)
	}
	var gwCharge string
	if err := in.Server.db.read.QueryRow(`SELECT charge_id FROM gateway_captures`).Scan(&gwCharge); err != nil {
		t.Fatal(err)
	}
	log := logs.String()
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "key=c1") || !strings.Contains(log, "gateway_charge_id="+gwCharge) {
		t.Fatalf("log does not report the lost key with its gateway charge at level ERROR:\n%s", log)
	}
}

// A holder that loses its lock after recording the gateway call, before its
// last phase, stops with the documented 409: the retry that took over
// recorded the charge, and the holder must neither record it again nor fail
// with 500.
func TestLockLostBeforeTheLastPhaseGets409(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, LockTimeout: 5 * time.Second})
	holder := newPause()
	in.Server.setBeforeFinish(holder.hook)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-holder.started // gateway_called is recorded; the last phase has not begun

	clock.Advance(5 * time.Second)
	second := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	wantStatus(t, second, http.StatusCreated)
	if second.header.Get(HeaderReplayed) != "" {
		t.Fatal("the takeover's answer is a first answer, not a replay")
	}
	close(holder.release)
	wantProblem(t, <-first, http.StatusConflict, ProblemInFlight)

	st := stats(t, in)
	if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.Conflicts != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want one capture, one charge, one takeover, one conflict, nothing in flight", st)
	}
	again := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	if again.status != 201 || string(again.body) != string(second.body) {
		t.Fatalf("replay %d %s, want %s", again.status, again.body, second.body)
	}
	checkConsistent(t, in.Server)
}

// Recording the gateway call refreshes the lock: a holder that spent most
// of the lock timeout in the gateway is still live while it records the
// charge, and a retry then waits instead of taking it over.
func TestLockIsRefreshedAfterTheGatewayCall(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, LockTimeout: 10 * time.Second})
	in.Server.gateway.setBeforeCapture(func(context.Context) { clock.Advance(9 * time.Second) }) // a slow gateway
	holder := newPause()
	in.Server.setBeforeFinish(holder.hook)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-holder.started // gateway_called recorded 9s after the claim

	clock.Advance(2 * time.Second) // 11s after the claim, 2s after the gateway call
	rep := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	wantProblem(t, rep, http.StatusConflict, ProblemInFlight)
	if got := rep.header.Get("Retry-After"); got != "8" {
		t.Fatalf("Retry-After %q, want 8 (the lock runs 10s from the gateway call)", got)
	}
	close(holder.release)
	wantStatus(t, <-first, http.StatusCreated)
	st := stats(t, in)
	if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 0 || st.Conflicts != 1 {
		t.Fatalf("stats %+v, want one capture, one charge, no takeover, one conflict", st)
	}
	checkConsistent(t, in.Server)
}
