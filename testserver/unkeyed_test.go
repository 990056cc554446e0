package testserver

import (
	"net/http"
	"testing"
)

// Config.DisableIdempotency: the benchmark baseline serves reservations
// without keys, applies a repeated request again, and leaves charges keyed.
func TestDisableIdempotencyServesReservationsWithoutKeys(t *testing.T) {
	in := start(t, Config{DisableIdempotency: true})
	stock(t, in, "sku-1", 10)

	for range 2 {
		rep := send(t, in, req{method: "POST", path: "/reservations", body: `{"item_id":"sku-1","quantity":2,"reference":"r1"}`})
		wantStatus(t, rep, http.StatusCreated)
		if rep.header.Get(HeaderReplayed) != "" {
			t.Fatalf("%s: %q on an unkeyed answer", HeaderReplayed, rep.header.Get(HeaderReplayed))
		}
	}
	// A key that is sent is stored on the reservation; its repeat is not
	// answered from a key row (there is none) but refused by the UNIQUE
	// constraint.
	wantStatus(t, send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: `{"item_id":"sku-1","quantity":1}`}), http.StatusCreated)
	wantProblem(t, send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: `{"item_id":"sku-1","quantity":1}`}),
		http.StatusInternalServerError, ProblemInternal)

	wantProblem(t, send(t, in, req{method: "POST", path: "/charges", body: `{"customer":"c1","amount":100,"currency":"usd"}`}),
		http.StatusBadRequest, ProblemMissingKey)

	st := stats(t, in)
	if st.Effects.Reservations != 3 || st.Replays != 0 || st.Keys != 0 || st.DuplicateReferences != 1 {
		t.Fatalf("stats %+v: want 3 reservations, no replay, no key stored (the stock update is unkeyed too), reference r1 applied twice", st)
	}
	if got := available(t, in, "sku-1"); got != 10-2-2-1 {
		t.Fatalf("available %d, want %d", got, 10-2-2-1)
	}
}

// The default server still refuses an unkeyed reservation.
func TestIdempotencyLayerIsOnByDefault(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 10)
	wantProblem(t, send(t, in, req{method: "POST", path: "/reservations", body: `{"item_id":"sku-1","quantity":1}`}),
		http.StatusBadRequest, ProblemMissingKey)
}
