package testserver

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// inTurn returns a hook whose i-th call stops at the i-th pause; calls
// past the last pause go through.
func inTurn(ps ...*pause) func(context.Context) {
	var n atomic.Int64
	return func(ctx context.Context) {
		if i := n.Add(1) - 1; i < int64(len(ps)) {
			ps[i].hook(ctx)
		}
	}
}

// keyState returns what the key row of (scope, key) holds of its lock,
// recovery point and answer, as one comparable line.
func keyState(t *testing.T, in *Instance, scope, key string) string {
	t.Helper()
	var (
		token, gwCharge  sql.NullString
		lockedAt, status sql.NullInt64
		point            string
		body             []byte
	)
	err := in.Server.db.queryRow(context.Background(), `
		SELECT lock_token, lease_until, `+recoveryPointSQL+`,
		       (SELECT `+castText(in.Server)+` FROM idempotency_keys_steps st WHERE st.key_id = k.id AND st.name = '`+downstreamStep+`'),
		       response_status, response_body
		FROM idempotency_keys k WHERE principal = ? AND idem_key = ?`, scope, key).
		Scan(&token, &lockedAt, &point, &gwCharge, &status, &body)
	if err != nil {
		t.Fatalf("reading the key row of %s %s: %v", scope, key, err)
	}
	return fmt.Sprintf("token %v lease_until %v point %s gateway charge %v status %v body %q",
		token, lockedAt, point, gwCharge, status, body)
}

// S5.4: a request whose stale lock was taken over wakes up in the gateway
// while the new holder is itself in the gateway call. The stale request
// captures (the first capture under the row's downstream key), then its
// recovery point is refused and its release of the lock is too: the row
// keeps the new holder's lock at the point started, and the stale request
// gets the 409 of a lost lock, not a replay. The new holder's capture then
// replays the first (one capture), and its answer is the one stored.
func TestAStaleChargeWakesWhileTheNewHolderIsInTheGateway(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		clock := newFakeClock()
		in := start(t, Config{Path: newDB(t), Now: clock.Now, LockTimeout: 5 * time.Second})
		stale, next := newPause(), newPause()
		in.Server.gateway.setBeforeCapture(inTurn(stale, next))
		r := req{method: "POST", path: "/charges", key: "c1", client: "alice", body: chargeBody}
		first := sendAsync(t, in, r)
		<-stale.started
		staleState := keyState(t, in, "client:alice", "c1")

		clock.Advance(5 * time.Second) // the first request's lock is stale
		second := sendAsync(t, in, r)
		<-next.started
		taken := keyState(t, in, "client:alice", "c1")
		if taken == staleState {
			t.Fatalf("the second request is in the gateway, but the row is still the first's: %s", taken)
		}

		close(stale.release)
		old := <-first
		wantProblem(t, old, http.StatusConflict, ProblemInFlight)
		if old.header.Get(HeaderReplayed) != "" {
			t.Fatalf("the stale request's 409 says %s: %q", HeaderReplayed, old.header.Get(HeaderReplayed))
		}
		if got := keyState(t, in, "client:alice", "c1"); got != taken {
			t.Fatalf("after the stale request woke the row is\n\t%s\nwant the new holder's, untouched:\n\t%s", got, taken)
		}

		close(next.release)
		won := <-second
		wantStatus(t, won, http.StatusCreated)
		if won.header.Get(HeaderReplayed) != "" {
			t.Fatal("the new holder's answer is a first answer, not a replay")
		}
		st := stats(t, in)
		if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.Conflicts != 1 || st.InFlight != 0 {
			t.Fatalf("stats %+v, want one capture, one charge, one takeover, one conflict, nothing in flight", st)
		}
		again := send(t, in, r)
		if again.status != http.StatusCreated || again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(won.body) {
			t.Fatalf("replay %d %s, want the new holder's answer %s", again.status, again.body, won.body)
		}
		checkConsistent(t, in.Server)
	})
}

// S5.4 in the last phase: the stale request wakes after recording the
// gateway call, while the new holder, which resumed from that point
// without calling the gateway, is about to commit the charge. The stale
// request's commit and its release are refused: no charge, no stored
// answer, the new holder's lock; then the new holder commits its own.
func TestAStaleChargeWakesWhileTheNewHolderCommits(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		clock := newFakeClock()
		in := start(t, Config{Path: newDB(t), Now: clock.Now, LockTimeout: 5 * time.Second})
		stale, next := newPause(), newPause()
		in.Server.setBeforeFinish(inTurn(stale, next))
		r := req{method: "POST", path: "/charges", key: "c1", client: "alice", body: chargeBody}
		first := sendAsync(t, in, r)
		<-stale.started // gateway_called is recorded

		clock.Advance(5 * time.Second)
		second := sendAsync(t, in, r)
		<-next.started
		taken := keyState(t, in, "client:alice", "c1")

		close(stale.release)
		old := <-first
		wantProblem(t, old, http.StatusConflict, ProblemInFlight)
		if got := keyState(t, in, "client:alice", "c1"); got != taken {
			t.Fatalf("after the stale request woke the row is\n\t%s\nwant the new holder's, untouched:\n\t%s", got, taken)
		}
		if st := stats(t, in); st.Effects.Charges != 0 {
			t.Fatalf("stats %+v: the stale request committed a charge", st)
		}

		close(next.release)
		won := <-second
		wantStatus(t, won, http.StatusCreated)
		st := stats(t, in)
		if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.InFlight != 0 {
			t.Fatalf("stats %+v, want one capture, one charge, one takeover, nothing in flight", st)
		}
		again := send(t, in, r)
		if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(won.body) {
			t.Fatalf("replay %s, want the new holder's answer %s", again.body, won.body)
		}
		checkConsistent(t, in.Server)
	})
}

// S2.2 and S6.3: two clients use one key value (one for their charges,
// one for their reservations); the sweeper forgets the one whose key
// expired, and only it. Its business rows lose the key, the other
// client's keep it; the other client's retry is still a replay, the first
// client's is a new request.
func TestTheSweeperTellsTwoClientsKeysApart(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		clock := newFakeClock()
		in := start(t, Config{Path: newDB(t), Now: clock.Now, Retention: 10 * time.Second, SweepInterval: time.Hour})
		stock(t, in, "sku-1", 10)
		reservation := `{"item_id":"sku-1","quantity":1}`
		post := func(client, path, body string) reply { // one key value per path, for both clients
			return send(t, in, req{method: "POST", path: path, key: "k" + path, client: client, body: body})
		}
		aliceCharge, aliceRes := post("alice", "/charges", chargeBody), post("alice", "/reservations", reservation)
		clock.Advance(6 * time.Second)
		bobCharge, bobRes := post("bob", "/charges", chargeBody), post("bob", "/reservations", reservation)
		for _, rep := range []reply{aliceCharge, aliceRes, bobCharge, bobRes} {
			wantStatus(t, rep, http.StatusCreated)
			if rep.header.Get(HeaderReplayed) != "" {
				t.Fatalf("a first answer replayed: %s", rep.body)
			}
		}
		clock.Advance(4 * time.Second) // alice's keys (and the stock's) are 10s old, bob's 4s

		if n, err := in.Server.Sweep(context.Background()); err != nil || n != 3 {
			t.Fatalf("Sweep = %d, %v; want alice's two keys and the stock's", n, err)
		}
		for _, table := range []string{"charges", "reservations"} {
			for _, c := range []struct {
				client string
				want   string
			}{{"client:alice", ""}, {"client:bob", "k/" + table}} {
				var key sql.NullString
				if err := in.Server.db.queryRow(context.Background(),
					`SELECT idempotency_key FROM `+table+` WHERE client_id = ?`, c.client).Scan(&key); err != nil {
					t.Fatal(err)
				}
				if key.String != c.want {
					t.Fatalf("%s of %s carry key %q after the sweep, want %q", table, c.client, key.String, c.want)
				}
			}
		}
		for _, c := range []struct {
			path, body string
			first      reply
		}{{"/charges", chargeBody, bobCharge}, {"/reservations", reservation, bobRes}} {
			again := post("bob", c.path, c.body)
			if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(c.first.body) {
				t.Fatalf("bob's retry of %s after the sweep: %d %s, want the replay of %s", c.path, again.status, again.body, c.first.body)
			}
		}
		for _, c := range []struct {
			path, body string
			first      reply
		}{{"/charges", chargeBody, aliceCharge}, {"/reservations", reservation, aliceRes}} {
			again := post("alice", c.path, c.body)
			if again.status != http.StatusCreated || again.header.Get(HeaderReplayed) != "" || string(again.body) == string(c.first.body) {
				t.Fatalf("alice's retry of %s after the sweep: %d %s, want a new request", c.path, again.status, again.body)
			}
		}
		if st := stats(t, in); st.Effects.Charges != 3 || st.Effects.Reservations != 3 || st.GatewayCaptures != 3 {
			t.Fatalf("stats %+v, want three charges, three reservations, three captures", st)
		}
		checkConsistent(t, in.Server)
	})
}
