package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/filejournal"
)

// TestClientCrash runs the workload as a batch job in a child process
// (filejournal.Open and Client.RunBatch), against a server that faults 10%
// of its requests, and SIGKILLs the child at random moments: after a
// random number of outcomes, or a random few milliseconds after it starts
// (while it opens its journal, or sends its first resumed operations). The
// job compacts its journal every 50 outcomes, so some kills land in a
// compaction. Each restart resumes from the journal; the last one runs to
// the end. The journal must open every time, and every operation must end
// done with exactly one effect, under one key across all the processes,
// as the requests that reached the server show. Meanwhile the test opens
// the journal read-only, again and again, as a person inspecting the
// running job would; every open must succeed.
func TestClientCrash(t *testing.T) {
	runClientCrash(t, false)
}

// TestClientPowerCut is TestClientCrash with a power cut after every kill:
// the journal loses every byte no fsync covered, and keeps a torn or
// garbled part of them (see CutPower), so that what the client sent must
// have been durable first (C2) and a torn tail must be cut on open (J2).
// A cut tears or garbles the tail inside a record it chooses, so it knows
// how many bytes the next open must cut (PowerCut.Torn), and every open
// must report cutting exactly that many. The first cut garbles the tail,
// and the run after a cut that left a torn tail is killed only once it
// has reported outcomes: it has opened the journal, cutting the tail, and
// appended after the cut, which the next open reads. Every run therefore
// proves J2 on a torn tail, whatever moments the other kills land at.
func TestClientPowerCut(t *testing.T) {
	runClientCrash(t, true)
}

func runClientCrash(t *testing.T, powerCuts bool) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvCrashOps, DefaultCrashOps)
	kills := sizeOf(t, EnvClientKills, DefaultClientKills)
	srv := startServer(t, "-faults", "0.1", "-crash", "abort", "-lock-timeout", "1s", "-seed", strconv.FormatInt(seed, 10))
	w := Workload{BaseURL: srv.URL, ClientID: "client-crash", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, seed, 0) // no faults: a witness of what reaches the server
	w.BaseURL = proxy.URL

	dir := t.TempDir()
	cfg := batchChildConfig{
		Journal: filepath.Join(dir, "batch.journal"), URL: w.BaseURL, ClientID: w.ClientID,
		Ops: ops, Concurrency: 8, CompactEvery: 50, Rounds: 200,
	}
	name := "client-crash"
	if powerCuts {
		cfg.SyncLog, name = filepath.Join(dir, "sync.log"), "power-cut"
	}
	checker := NewChecker(w.IDs())
	rng := rngOf(seed, 2)
	created := false // whether a run has reported the journal open
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	inspections := 0
	var lost, tears, tornOnOpen int64
	var cut *PowerCut // the last power cut
	maxOutcomes := ops / (kills + 2)
	for k := 1; k <= kills; k++ {
		b := startBatch(t, cfg, checker)
		in := inspect(cfg.Journal)
		var running bool
		var err error
		if powerCuts && (tears == 0 || cut.Torn > 0) {
			// The journal must exist for the first cut to tear it, and
			// a torn tail must meet a writer's open: kill only once the
			// run has opened the journal and journaled since.
			running, err = b.waitOutcomes(ctx, 1+rng.IntN(max(maxOutcomes, 1)))
		} else {
			running, err = killPoint(ctx, b, rng, maxOutcomes)
		}
		opens, ierr := in.end()
		inspections += opens
		if ierr != nil {
			t.Fatalf("opening the journal read-only while the batch ran: %v", ierr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !running {
			t.Fatalf("the batch ended (%v) before kill %d: %s", b.err, k, b.stderr.String())
		}
		b.kill()
		wire.ClientKilled()
		if msg := b.journalError(); msg != "" {
			t.Fatalf("after %d kills the journal did not open: %s", k-1, msg)
		}
		requireTornTailCut(t, b, cut, k)
		tornOnOpen += b.truncatedOnOpen()
		created = created || b.opened()
		if powerCuts {
			// Until one has left a torn tail, every cut garbles the
			// tail it finds; then the rng chooses how each tail fares.
			pc, err := CutPower(cfg.Journal, cfg.SyncLog, rng, tears == 0)
			if err != nil {
				t.Fatal(err)
			}
			lost, cut = lost+pc.Lost, &pc
			if pc.Torn > 0 {
				tears++
			}
		}
		requireJournalOpens(t, cfg.Journal, k, created)
	}
	b := startBatch(t, cfg, checker)
	if err := b.wait(ctx); err != nil {
		lines, _ := b.outputLines()
		t.Fatalf("the last run ended with %v: %q\n%s", err, lines, b.stderr.String())
	}
	if !b.opened() {
		t.Fatal("the last run did not report its journal open")
	}
	requireTornTailCut(t, b, cut, kills+1)
	tornOnOpen += b.truncatedOnOpen()
	t.Logf("%d read-only opens of the journal while the batch ran", inspections)
	r := report(t, checker, name, serverView(t, srv.URL, srv.DB, w, true, wire))
	if r.ClientCrashes == 0 {
		t.Error("no operation was found pending after a kill: the kills missed the work")
	}
	if powerCuts {
		t.Logf("power cuts took %d unsynced bytes; %d left a torn tail; opens cut %d torn bytes", lost, tears, tornOnOpen)
		if tears == 0 {
			t.Error("no power cut left a torn tail: the first cut must")
		}
	}
	j, err := filejournal.Open(cfg.Journal, filejournal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	requireJournalDone(t, j, w)
}

// killPoint waits for the moment to kill a batch child: a random few
// milliseconds after it starts (one time in four), or otherwise after a
// random number of outcomes, at most maxOutcomes. It reports whether the
// child still runs.
func killPoint(ctx context.Context, b *batchProcess, rng *rand.Rand, maxOutcomes int) (bool, error) {
	if rng.IntN(4) == 0 {
		select {
		case <-time.After(time.Duration(rng.IntN(40_000)) * time.Microsecond):
			return true, nil
		case <-b.exited:
			return false, nil
		}
	}
	return b.waitOutcomes(ctx, 1+rng.IntN(max(maxOutcomes, 1)))
}

// requireTornTailCut checks that run, the first run after the power cut
// cut (nil before any), cut on open exactly the torn tail the power cut
// left (J2): every byte after the last whole record, and no other. A run
// killed before it reported the journal open is let off, unless the cut
// left a torn tail: such a run is killed only after its open.
func requireTornTailCut(t *testing.T, run *batchProcess, cut *PowerCut, k int) {
	t.Helper()
	if cut == nil {
		return
	}
	if !run.opened() {
		if cut.Torn > 0 {
			t.Fatalf("run %d, after a power cut left a %d-byte torn tail, did not report its journal open", k, cut.Torn)
		}
		return
	}
	if got := run.truncatedOnOpen(); got != cut.Torn {
		t.Errorf("run %d opened the journal after a power cut (%s) left a %d-byte torn tail, and cut %d bytes as one; want exactly %d", k, cut.How, cut.Torn, got, cut.Torn)
	}
}

// requireJournalOpens opens the journal read-only, as a person inspecting
// it would: it must open whatever instant the writer was killed at. Until
// a run has reported the journal open, the file may not exist yet (the
// kill came before it was created).
func requireJournalOpens(t *testing.T, path string, kills int, created bool) {
	t.Helper()
	j, err := filejournal.Open(path, filejournal.Options{ReadOnly: true})
	if !created && errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatalf("after %d kills the journal does not open: %v", kills, err)
	}
	j.Close()
}

// prepareInventory stocks the reservations' item.
func prepareInventory(t *testing.T, url, clientID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	if err := PrepareInventory(ctx, &http.Client{Transport: tr}, url, clientID); err != nil {
		t.Fatal(fmt.Errorf("preparing the inventory: %w", err))
	}
}
