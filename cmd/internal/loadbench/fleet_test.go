package loadbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
)

// The fleet benchmark in miniature: one process, then two, share a batch;
// each operation is sent by exactly one process of the fleet, so what the
// processes sent adds up to the batch. No figure is asserted.
func TestRunFleetSharesOneBatch(t *testing.T) {
	pg := pgtest.Own(t)
	const ops = 12
	r, err := RunFleet(context.Background(), FleetConfig{Sizes: []int{1, 2}, Ops: ops, Concurrency: 2,
		Latency: 20 * time.Millisecond, Runs: 1, PostgresDSN: pg.DSN(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(r.Rows))
	}
	for i, row := range r.Rows {
		sum := 0
		for _, n := range row.Sent {
			sum += n
		}
		if row.Processes != i+1 || len(row.Sent) != i+1 || sum != ops || row.OpsPerSec <= 0 || len(row.Elapsed) != 1 {
			t.Errorf("row %d: %+v; want %d processes whose sends add up to %d", i, row, i+1, ops)
		}
	}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "One batch of 12 operations shared by a fleet") {
		t.Errorf("table:\n%s", out.String())
	}
}

// The fleet benchmark's kill: the process SIGKILLed mid-batch and
// restarted at once finishes the batch, and the reference server applied
// each operation once, in the calm run and in the killed one. No figure
// is asserted.
func TestRunFleetKillsAndRestarts(t *testing.T) {
	pg := pgtest.Own(t)
	const ops = 12
	r, err := RunFleet(context.Background(), FleetConfig{Sizes: []int{1}, Ops: ops, Concurrency: 4,
		Latency: 100 * time.Millisecond, Runs: 1, PostgresDSN: pg.DSN(), Dir: t.TempDir(), KillAfter: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 2 || r.Rows[0].Killed || !r.Rows[1].Killed {
		t.Fatalf("rows %+v, want a calm one and a killed one", r.Rows)
	}
	for _, row := range r.Rows {
		if len(row.Applied) != 1 || row.Applied[0] != ops || len(row.Elapsed) != 1 {
			t.Errorf("row %+v: want the server to have applied each of %d operations once", row, ops)
		}
	}
	var out bytes.Buffer
	if err := r.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 killed") {
		t.Errorf("table:\n%s", out.String())
	}
}

// -fleet selects the fleet benchmark, with its own flags; bad values are
// usage errors.
func TestFleetFlags(t *testing.T) {
	o, err := parseArgs([]string{"-fleet", "1,2,3", "-fleet-ops", "50", "-fleet-concurrency", "4", "-fleet-latency", "10ms", "-runs", "5"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := FleetConfig{Sizes: []int{1, 2, 3}, Ops: 50, Concurrency: 4, Latency: 10 * time.Millisecond, Runs: 5}
	if o.fleet.Ops != want.Ops || o.fleet.Concurrency != want.Concurrency || o.fleet.Latency != want.Latency ||
		o.fleet.Runs != want.Runs || len(o.fleet.Sizes) != 3 || o.fleet.Sizes[2] != 3 {
		t.Errorf("fleet config %+v, want %+v", o.fleet, want)
	}
	for _, args := range [][]string{{"-fleet", "0"}, {"-fleet", "1", "-fleet-ops", "0"}, {"-fleet", "1", "-fleet-latency", "-1s"}} {
		if _, err := parseArgs(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q parsed, want a usage error", args)
		}
	}
}
