package faultsuite

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/testserver"
)

// TestClientAgainstReferenceServer is the integration test of the idem
// client against the reference server, in process: 1,000 operations from
// 16 workers of one client with a journal, while the server itself fails
// 20% of the mutating requests, spread over its seven faults (errors
// before commit, hang-ups and 502s after commit, the three crash points,
// delays), and its payment gateway fails or loses the answer of 10% of the
// captures. Every operation must end done with exactly one effect, by the
// server's GET /stats and by its database.
func TestClientAgainstReferenceServer(t *testing.T) {
	seed := seedOf(t)
	faults := testserver.UniformFaults(0.2, uint64(seed))
	faults.Gateway = testserver.GatewayFaults{Failure: 0.05, LostResponse: 0.05}
	db := filepath.Join(t.TempDir(), "server.db")
	srv := testserver.Start(t, testserver.Config{Path: db, Faults: faults, LockTimeout: time.Second})
	w := Workload{BaseURL: srv.URL, ClientID: "integration", Ops: 1000}
	prepareInventory(t, w.BaseURL, w.ClientID)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	j := openJournal(t)
	checker := NewChecker(w.IDs())
	c := newClient(t, j, checker)
	requireNoErrors(t, runWorkload(ctx, c, w, 16, checker))

	tr := NewTransport()
	defer tr.CloseIdleConnections()
	st, err := FetchStats(ctx, &http.Client{Transport: tr}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server faults: %v", st.Faults)
	for _, kind := range []string{"error_before_commit", "hang_up_after_commit", "bad_gateway_after_commit",
		"crash_before_commit", "crash_after_commit", "crash_after_gateway", "delay", "gateway_failure", "gateway_lost_response"} {
		if st.Faults[kind] == 0 {
			t.Errorf("the server never injected %s", kind)
		}
	}
	if st.Effects.Charges+st.Effects.Reservations != int64(w.Ops) {
		t.Errorf("GET /stats: %d charges and %d reservations for %d operations",
			st.Effects.Charges, st.Effects.Reservations, w.Ops)
	}
	report(t, checker, "integration", serverView(t, srv.URL, db, w, true, nil))
	requireJournalDone(t, j, w)
}
