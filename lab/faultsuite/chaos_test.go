package faultsuite

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/testserver/chaos"
)

// TestChaos sends the workload through the fault proxy, which faults 30%
// of the attempts with every kind of fault it knows (resets, drops and
// 502s after the server committed, stalls, half bodies, 429 and 503), to
// the reference server. 32 workers re-run each operation that ends
// unknown, as a caller would. Every operation must end done with exactly
// one effect.
func TestChaos(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvChaosOps, DefaultChaosOps)
	srv := startServer(t)
	w := Workload{ClientID: "chaos", Ops: ops}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	prep := NewTransport()
	defer prep.CloseIdleConnections()
	if err := PrepareInventory(ctx, &http.Client{Transport: prep}, srv.URL, w.ClientID); err != nil {
		t.Fatal(err)
	}
	proxy, wire := listenProxy(t, srv.URL, seed, 0.3)
	w.BaseURL = proxy.URL

	j := openJournal(t)
	checker := NewChecker(w.IDs())
	c := newClient(t, j, checker)
	start := time.Now()
	errs := runWorkload(ctx, c, w, 32, checker)
	t.Logf("%d operations in %s", ops, time.Since(start).Round(time.Millisecond))
	requireNoErrors(t, errs)

	counts := proxy.Counts()
	t.Logf("proxy: %s", counts)
	for _, k := range chaos.AllKinds() {
		if counts.Faults[k] == 0 {
			t.Errorf("the proxy never injected %s", k)
		}
	}
	if share := float64(counts.Injected()) / float64(counts.Requests); share < 0.25 || share > 0.35 {
		t.Errorf("the proxy faulted %.1f%% of %d requests, want about 30%%", 100*share, counts.Requests)
	}
	report(t, checker, "chaos", serverView(t, srv.URL, srv.DB, w, true, wire))
	requireJournalDone(t, j, w)
}
