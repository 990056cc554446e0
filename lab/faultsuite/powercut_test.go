package faultsuite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/filefaults"
	"github.com/idemkit/idem/journal"
)

// TestCutPowerLeavesTheTornTailItReports checks the power cut of
// TestClientPowerCut on journals whose last records no fsync covered:
// whatever it draws, an open of what it leaves cuts exactly the torn tail
// it reports (PowerCut.Torn), and keeps every record an fsync covered;
// with garble set it always leaves one. Each draw is one seed, so every
// way of cutting is met (cut, torn inside a record, garbled from inside a
// record with random bytes or zeros, junk after the last record).
func TestCutPowerLeavesTheTornTailItReports(t *testing.T) {
	ways := map[string]int{}
	for seed := range 120 {
		garble := seed%3 == 0
		unsynced := seed % 4 // completions written after the last fsync; with none, a garbling cut appends junk
		dir := t.TempDir()
		path, logPath := filepath.Join(dir, "j"), filepath.Join(dir, "sync.log")
		sl, err := OpenSyncLog(logPath)
		if err != nil {
			t.Fatal(err)
		}
		j, err := filejournal.Open(path, filefaults.WrapFiles(filejournal.Options{Logger: quietLog}, sl.Wrap))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const ops = 6
		claims := make([]journal.Claim, ops)
		begun := make([]journal.Operation, ops)
		for i := range ops {
			c, err := j.Claim(ctx, OperationID(i))
			if err != nil {
				t.Fatal(err)
			}
			begun[i] = journal.Operation{ID: OperationID(i), Key: fmt.Sprintf("key-%d", i), KeyTTL: 24 * time.Hour, State: journal.StatePending,
				Method: "POST", URL: "http://example.test/" + strings.Repeat("x", (seed+i)*7%50)}
			if err := c.Begin(ctx, begun[i]); err != nil { // fsync'd
				t.Fatal(err)
			}
			claims[i] = c
		}
		for i, c := range claims {
			if i >= ops-unsynced {
				op := begun[i]
				op.State, op.Status = journal.StateDone, 201
				if err := c.Complete(ctx, op); err != nil { // written, no fsync since
					t.Fatal(err)
				}
			}
			c.Release()
		}
		pc, err := CutPower(path, logPath, rngOf(int64(seed), 2), garble)
		if err != nil {
			t.Fatal(err)
		}
		ways[pc.How]++
		if garble && pc.Torn == 0 {
			t.Errorf("seed %d: a garbling cut (%+v) left no torn tail", seed, pc)
		}
		// What the cut left, opened as the next run would; read-only, so
		// that the writer still holding the file is not disturbed.
		r, err := filejournal.Open(path, filejournal.Options{ReadOnly: true, Logger: quietLog})
		if err != nil {
			t.Fatalf("seed %d: after the cut %+v the journal does not open: %v", seed, pc, err)
		}
		if got := r.Stats().Truncated; got != pc.Torn {
			t.Errorf("seed %d: after the cut %+v the open cuts %d torn bytes, want %d", seed, pc, got, pc.Torn)
		}
		if pending := list(r, journal.ListAll); len(pending) != ops {
			t.Errorf("seed %d: after the cut %+v the journal holds %d operations, want the %d whose intents were fsync'd", seed, pc, len(pending), ops)
		}
		r.Close()
		j.Close()
		sl.Close()
	}
	t.Logf("cuts: %v", ways)
	for _, how := range []string{"cut", "torn", "garbled"} {
		if ways[how] == 0 {
			t.Errorf("no seed made a %q cut: %v", how, ways)
		}
	}
}
