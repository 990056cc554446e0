package idem

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// TestDoAllocations guards the allocations a Client adds to a request: a
// new operation without a journal, sent once over a transport that answers
// at once and read whole, against the same request sent by net/http. Raise
// the bound only for a reason a reader of the change can weigh.
func TestDoAllocations(t *testing.T) {
	hc := &http.Client{Transport: stubTransport{}}
	c, err := New(Config{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	ids := make([]string, runs+1) // AllocsPerRun runs the function once more to warm up
	for i := range ids {
		ids[i] = "op-" + strconv.Itoa(i)
	}
	newRequest := func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, "http://api.example.test/reservations", bytes.NewReader(stubBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	plain := testing.AllocsPerRun(runs, func() {
		if err := readAnswer(hc.Do(newRequest())); err != nil {
			t.Fatal(err)
		}
	})
	n := 0
	withIdem := testing.AllocsPerRun(runs, func() {
		if err := readAnswer(c.Do(ids[n], newRequest())); err != nil {
			t.Fatal(err)
		}
		n++
	})
	if added := withIdem - plain; added > maxDoAllocs {
		t.Fatalf("Do allocates %.0f times per request, net/http %.0f: %.0f more, want at most %d more", withIdem, plain, added, maxDoAllocs)
	}
	t.Logf("Do allocates %.0f times per request, net/http %.0f", withIdem, plain)
}
