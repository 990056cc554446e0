package loadbench

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// A whole grid in miniature: every target and client, two runs of 20ms
// cells at one concurrency. Only the report's shape is checked: no figure
// is asserted.
func TestRunMeasuresEveryCell(t *testing.T) {
	dir := t.TempDir()
	var progress []int
	r, err := Run(context.Background(), Config{
		Duration: 20 * time.Millisecond, Warmup: 5 * time.Millisecond, Runs: 2, Concurrency: []int{3},
		Dir: dir, FsyncSamples: 3,
		Progress: func(done, total int, _ Cell) {
			if total != 2*(5+5+1) {
				t.Errorf("total %d cells, want 22", total)
			}
			progress = append(progress, done)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 23 || progress[0] != 0 || progress[22] != 22 {
		t.Errorf("progress %v, want 0 to 22", progress)
	}
	if len(r.Rows) != 11 {
		t.Fatalf("%d rows, want 11", len(r.Rows))
	}
	for _, row := range r.Rows {
		md := row.Median
		if len(row.Runs) != 2 || md.Ops == 0 || md.Errors != 0 || md.RequestsPerSec <= 0 || md.P50 <= 0 || md.P99 < md.P50 || row.Ratio <= 0 {
			t.Errorf("%s c=%d %s: %+v, ratio %v: want 2 runs, operations without errors, ordered latencies",
				row.Target, row.Concurrency, row.Client, md, row.Ratio)
		}
		if _, measured := processCPU(); measured && md.CPUPerOp <= 0 {
			t.Errorf("%s c=%d %s: CPU per operation %v, want it measured", row.Target, row.Concurrency, row.Client, md.CPUPerOp)
		}
		if md.GCShare < 0 || md.GCShare > 1 || md.LiveHeapBytes == 0 {
			t.Errorf("%s c=%d %s: collector's share %v, live heap %d: want a share in [0, 1] and a heap",
				row.Target, row.Concurrency, row.Client, md.GCShare, md.LiveHeapBytes)
		}
		journal := row.Client == ClientIdemJournal
		if (md.FsyncsPerOp > 0) != journal || (md.Recovery != nil) != journal {
			t.Errorf("%s c=%d %s: fsyncs/op %v, recovery %+v: want both exactly for idem+journal",
				row.Target, row.Concurrency, row.Client, md.FsyncsPerOp, md.Recovery)
		}
		if journal && (md.Recovery.Records < 2*md.Ops || md.Recovery.Operations < int(md.Ops)) {
			t.Errorf("%s c=%d: journal reopened with %+v, want an intent and a completion for each of %d operations",
				row.Target, row.Concurrency, md.Recovery, md.Ops)
		}
	}
	if len(r.Checks) != 5 {
		t.Errorf("%d targets checked, want 5: %+v", len(r.Checks), r.Checks)
	}
	if r.Machine.Fsync.P50 <= 0 || r.Machine.NumCPU < 1 {
		t.Errorf("machine %+v: want a measured fsync and the CPU count", r.Machine)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left %d files in %s, want none: %v", len(left), dir, left)
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Duration: time.Hour, Targets: []Target{TargetTrivial}, Clients: []Client{ClientNetHTTP},
		Concurrency: []int{1}, Dir: t.TempDir(), FsyncSamples: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}
