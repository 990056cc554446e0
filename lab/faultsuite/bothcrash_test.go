package faultsuite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/filejournal"
)

// TestClientAndServerCrash runs the workload as a batch job in a child
// process against the server's binary, and SIGKILLs them alternately in
// one run: the client at random moments, the server at its crash points
// and at random moments (see TestClientCrash and TestServerCrash). The
// last kill is the server's, which then starts without faults, and the
// client's last run goes to the end. Every operation must end done with
// exactly one effect, under one key, and one capture per charge.
func TestClientAndServerCrash(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvCrashOps, DefaultCrashOps)
	kills := sizeOf(t, EnvBothKills, DefaultBothKills)
	k := newServerKiller(t, seed, ops/(kills+2))
	w := Workload{BaseURL: k.srv.URL, ClientID: "both-crash", Ops: ops}
	prepareInventory(t, w.BaseURL, w.ClientID)
	proxy, wire := listenProxy(t, k.srv.URL, seed, 0) // no faults: a witness of what reaches the server
	w.BaseURL = proxy.URL
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := k.arm(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := batchChildConfig{
		Journal: filepath.Join(t.TempDir(), "batch.journal"), URL: w.BaseURL, ClientID: w.ClientID,
		Ops: ops, Concurrency: 8, CompactEvery: 50, Rounds: 200,
	}
	checker := NewChecker(w.IDs())
	rng := rngOf(seed, 4)
	clientKills := 0
	created := false // whether a run has reported the journal open
	b := startBatch(t, cfg, checker)
	for n := 1; n <= kills; n++ {
		// Alternate so that the last kill is the server's.
		if (kills-n)%2 == 1 {
			running, err := killPoint(ctx, b, rng, ops/(kills+2))
			if err != nil {
				t.Fatal(err)
			}
			if !running {
				t.Fatalf("the batch ended (%v) before kill %d: %s", b.err, n, b.stderr.String())
			}
			b.kill()
			wire.ClientKilled()
			clientKills++
			if msg := b.journalError(); msg != "" {
				t.Fatalf("after kill %d the journal did not open: %s", n, msg)
			}
			created = created || b.opened()
			requireJournalOpens(t, cfg.Journal, n, created)
			b = startBatch(t, cfg, checker)
			continue
		}
		ok, err := k.kill(ctx, b.progress, b.exited, n == kills)
		if err != nil {
			t.Fatalf("kill %d: %v", n, err)
		}
		if !ok {
			t.Fatalf("the batch ended (%v) before kill %d: %s", b.err, n, b.stderr.String())
		}
	}
	if err := b.wait(ctx); err != nil {
		lines, _ := b.outputLines()
		t.Fatalf("the last run ended with %v: %q\n%s", err, lines, b.stderr.String())
	}
	t.Logf("client kills: %d; server kills by point: %v", clientKills, k.byPoint)
	report(t, checker, "both-crash", serverView(t, k.srv.URL, k.srv.DB, w, false, wire))
	j, err := filejournal.Open(cfg.Journal, filejournal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	requireJournalDone(t, j, w)
}
