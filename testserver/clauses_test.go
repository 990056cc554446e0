package testserver

import (
	"net/http"
	"testing"
	"time"
)

// S4.4: only a stored answer replayed says Idempotent-Replayed. A first
// answer, the 409 of a key in flight, a 422 and a refused request carry no
// such header, so no client takes them for a stored answer.
func TestS4OnlyAReplayIsMarkedReplayed(t *testing.T) {
	in := start(t, Config{LockTimeout: time.Hour})
	gw := blockGateway(in.Server)
	r := req{method: "POST", path: "/charges", key: "c1", body: chargeBody}
	first := sendAsync(t, in, r)
	<-gw.started
	refused := []struct {
		name   string
		rep    reply
		status int
		typ    string
	}{
		{"in flight", send(t, in, r), http.StatusConflict, ProblemInFlight},
		{"another body", send(t, in, req{method: "POST", path: "/charges", key: "c1", body: `{"customer":"x","amount":1,"currency":"usd"}`}),
			http.StatusUnprocessableEntity, ProblemKeyMismatch},
		{"bad input", send(t, in, req{method: "POST", path: "/charges", key: "c1", body: `{`}), http.StatusBadRequest, ProblemInvalidRequest},
	}
	for _, tt := range refused {
		wantProblem(t, tt.rep, tt.status, tt.typ)
		if got, ok := tt.rep.header[HeaderReplayed]; ok {
			t.Fatalf("%s: %d with %s %q", tt.name, tt.status, HeaderReplayed, got)
		}
	}
	close(gw.release)
	rep := <-first
	wantStatus(t, rep, http.StatusCreated)
	if got, ok := rep.header[HeaderReplayed]; ok {
		t.Fatalf("the first answer carries %s %q", HeaderReplayed, got)
	}
	again := send(t, in, r)
	if got := again.header.Values(HeaderReplayed); len(got) != 1 || got[0] != "true" || string(again.body) != string(rep.body) {
		t.Fatalf("the replay: %s %q, body %s; want one %s: true and the first body", HeaderReplayed, got, again.body, HeaderReplayed)
	}
}

// S4.2 on every state of a key row: a request with another fingerprint is
// refused with 422 whether the key's first request is in flight, stale,
// stopped by a gateway failure (its lock released) or finished, and it
// never takes the row over.
func TestS4AnotherRequestIsRefusedWhateverTheRowsState(t *testing.T) {
	other := req{method: "POST", path: "/charges", key: "c1", body: `{"customer":"cus_1","amount":1300,"currency":"usd","reference":"invoice-42"}`}
	r := req{method: "POST", path: "/charges", key: "c1", body: chargeBody}
	refuse := func(t *testing.T, in *Instance, state string) {
		t.Helper()
		before := keyState(t, in, AnonymousClient, "c1")
		wantProblem(t, send(t, in, other), http.StatusUnprocessableEntity, ProblemKeyMismatch)
		if after := keyState(t, in, AnonymousClient, "c1"); after != before {
			t.Fatalf("%s: the refused request changed the row from\n\t%s\nto\n\t%s", state, before, after)
		}
	}
	t.Run("in flight, stale, finished", func(t *testing.T) {
		clock := newFakeClock()
		in := start(t, Config{Now: clock.Now, LockTimeout: 5 * time.Second})
		gw := blockGateway(in.Server)
		first := sendAsync(t, in, r)
		<-gw.started
		refuse(t, in, "in flight")
		clock.Advance(5 * time.Second)
		refuse(t, in, "stale")
		close(gw.release)
		wantStatus(t, <-first, http.StatusCreated)
		refuse(t, in, "finished")
		if st := stats(t, in); st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 0 {
			t.Fatalf("stats %+v, want one capture, one charge, no takeover", st)
		}
	})
	t.Run("released after a gateway failure", func(t *testing.T) {
		in := start(t, Config{Faults: Faults{Gateway: GatewayFaults{Failure: 1}}})
		wantProblem(t, send(t, in, r), http.StatusBadGateway, ProblemGatewayFailed)
		refuse(t, in, "released")
		if st := stats(t, in); st.Resumed != 0 {
			t.Fatalf("stats %+v: the other request took the row over", st)
		}
	})
}
