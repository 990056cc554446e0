package faultsuite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// Sizes of TestFleetCrash.
const (
	// EnvFleetOps is the number of operations of TestFleetCrash's batch.
	EnvFleetOps = "IDEM_FLEET_OPS"
	// EnvFleetKills is how many times TestFleetCrash SIGKILLs a worker;
	// every fifth kill also stops PostgreSQL (pg_ctl stop -m immediate)
	// and starts it again.
	EnvFleetKills = "IDEM_FLEET_KILLS"

	DefaultFleetOps   = 3000
	DefaultFleetKills = 15
)

// fleetLease is the workers' LeaseTTL: a killed worker's operations wait
// this long before another worker takes them over.
const fleetLease = time.Second

// fleetWorkers is the number of machines of the fleet.
const fleetWorkers = 3

// TestFleetCrash is F1 to F6 under fire: three worker processes, each a
// machine of a fleet, run one batch (Client.RunBatch) against the
// reference server through the chaos proxy, sharing one PostgreSQL
// journal. Workers are SIGKILLed at random and restarted; every fifth kill
// PostgreSQL is stopped with pg_ctl stop -m immediate and restarted. Every
// operation must end with exactly one effect, under one key, as the
// server's database shows, and a killed worker's operations must be taken
// over by the others once its liveness or its leases lapse.
func TestFleetCrash(t *testing.T) {
	seed := seedOf(t)
	fleetCrash(t, fleetCrashRun{
		seed: seed, ops: sizeOf(t, EnvFleetOps, DefaultFleetOps), kills: sizeOf(t, EnvFleetKills, DefaultFleetKills),
		serverArgs: []string{"-faults", "0.1", "-crash", "abort", "-lock-timeout", "1s", "-seed", strconv.FormatInt(seed, 10)},
		proxyRate:  0.05,
	})
}

// fleetCrashRun sizes a run of fleetCrash.
type fleetCrashRun struct {
	seed       int64
	ops, kills int      // the batch's operations; worker SIGKILLs, every fifth with a PostgreSQL restart
	serverArgs []string // the reference server's flags
	plain      bool     // the server built without the race detector (plainServerBinary)
	proxyRate  float64  // the chaos proxy's fault rate
}

// fleetCrash runs one batch on fleetWorkers worker processes sharing a
// PostgreSQL journal, against the reference server behind the chaos
// proxy, SIGKILLing workers and restarting PostgreSQL as run says, and
// checks that every operation ended with exactly one effect under one key
// and that a killed worker's operations were taken over by the others.
func fleetCrash(t *testing.T, run fleetCrashRun) {
	ops, kills := run.ops, run.kills
	pg := pgtest.Own(t)
	binary := serverBinary(t)
	if run.plain {
		binary = plainServerBinary(t)
	}
	srv := startServerBinary(t, binary, run.serverArgs...)
	w := Workload{BaseURL: srv.URL, ClientID: "fleet", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, run.seed, run.proxyRate)
	w.BaseURL = proxy.URL
	cfg := batchChildConfig{
		PostgresDSN: pg.DSN(), LeaseTTL: fleetLease, URL: w.BaseURL, ClientID: w.ClientID,
		Ops: ops, Concurrency: 8, Rounds: 400,
	}
	checker := NewChecker(w.IDs())
	takeovers := newTakeovers()
	rng := rngOf(run.seed, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	workers := make([]*batchProcess, fleetWorkers)
	for i := range workers {
		workers[i] = startBatch(t, cfg, takeovers.recorder(checker, i))
	}
	restarts := 0
	for k := 1; k <= kills; k++ {
		// The kills are spread over the batch by how much of it is done,
		// whichever worker did it: the fleet is faster than any one of
		// its workers, and must not finish before the last kill.
		if err := takeovers.waitDone(ctx, k*ops/(kills+2)+rng.IntN(ops/(2*(kills+2))+1)); err != nil {
			t.Fatal(err)
		}
		// A kill hits a worker at work: one that has ended an operation
		// since it started, rather than one still opening its journal.
		i := rng.IntN(fleetWorkers)
		if running, err := workers[i].waitOutcomes(ctx, 1); err != nil || !running {
			t.Fatalf("worker %d ended (%v, %v) before kill %d: %s", i, workers[i].err, err, k, workers[i].stderr.String())
		}
		pid := workers[i].cmd.Process.Pid
		workers[i].kill()
		leased, err := leasedBy(ctx, pg.DSN(), pid)
		if err != nil {
			t.Fatalf("reading the leases of killed worker %d: %v", i, err)
		}
		takeovers.killed(i, leased)
		wire.ClientKilled()
		if k%5 == 0 {
			if err := pg.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			if err := pg.Start(ctx); err != nil {
				t.Fatal(err)
			}
			restarts++
		}
		workers[i] = startBatch(t, cfg, takeovers.recorder(checker, i))
	}
	for i, b := range workers {
		if err := b.wait(ctx); err != nil {
			lines, _ := b.outputLines()
			t.Fatalf("worker %d's last run ended with %v: %q\n%s", i, err, lines, b.stderr.String())
		}
	}
	r := report(t, checker, "fleet", serverView(t, srv.URL, srv.DB, w, true, wire))
	if r.ClientCrashes == 0 {
		t.Error("no operation was found pending after a kill: the kills missed the work")
	}
	if restarts < kills/5 {
		t.Fatalf("%d PostgreSQL restarts, want %d", restarts, kills/5)
	}
	t.Logf("%d worker kills, %d PostgreSQL restarts; %s", kills, restarts, takeovers)
	if takeovers.count() == 0 {
		t.Error("no operation of a killed worker was taken over by another: the kills missed the leases")
	}
	j, err := pgjournal.Open(ctx, pg.DSN(), pgjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	requireJournalDone(t, j, w)
}

// TestBatchAcrossProcesses runs one batch on three processes at once,
// sharing a PostgreSQL journal, with no faults: every operation is applied
// once, and each process's progress accounts for every operation, those
// that finished on another process included (as recorded outcomes).
func TestBatchAcrossProcesses(t *testing.T) {
	const ops = 600
	dsn := pgtest.Own(t).DSN()
	srv := startServer(t, "-seed", "1")
	w := Workload{BaseURL: srv.URL, ClientID: "across", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, 1, 0)
	w.BaseURL = proxy.URL
	cfg := batchChildConfig{PostgresDSN: dsn, LeaseTTL: fleetLease, URL: w.BaseURL, ClientID: w.ClientID,
		Ops: ops, Concurrency: 8, Rounds: 10}
	checker := NewChecker(w.IDs())
	seen := make([]*opSet, fleetWorkers)
	workers := make([]*batchProcess, fleetWorkers)
	for i := range workers {
		seen[i] = &opSet{Recorder: checker, ids: map[string]bool{}}
		workers[i] = startBatch(t, cfg, seen[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	elsewhere := 0
	for i, b := range workers {
		if err := b.wait(ctx); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, b.stderr.String())
		}
		if n := seen[i].len(); n != ops {
			t.Errorf("process %d's progress accounted for %d operations, want all %d", i, n, ops)
		}
		elsewhere += seen[i].outcomes() - b.progress.count() // recorded lines are outcomes, not progress
	}
	r := report(t, checker, "across", serverView(t, srv.URL, srv.DB, w, true, wire))
	if r.Duplicates != 0 || r.Lost != 0 {
		t.Fatal("duplicates or lost operations")
	}
	if elsewhere <= 0 {
		t.Fatalf("no process counted an operation finished elsewhere (%d)", elsewhere)
	}
	t.Logf("%d operations counted by a process as finished on another", elsewhere)
}

// opSet is a Recorder that collects the operations whose outcome a process
// reported, its own or recorded elsewhere.
type opSet struct {
	Recorder
	mu  sync.Mutex
	ids map[string]bool
	n   int // outcomes reported
}

func (s *opSet) Outcome(op string, r Result) {
	s.Recorder.Outcome(op, r)
	s.mu.Lock()
	s.ids[op] = true
	s.n++
	s.mu.Unlock()
}

func (s *opSet) outcomes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *opSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// takeovers measures lease takeover: from a worker's kill to the first
// attempt, by another worker, of an operation the killed one was sending.
type takeovers struct {
	mu       sync.Mutex
	sending  map[string]int       // op -> the worker whose attempt was last, until an outcome
	orphaned map[string]time.Time // op -> when its sender was killed
	took     []time.Duration
	done     map[string]bool // operations some worker reported done
	changed  chan struct{}   // closed and replaced when done grows
}

func newTakeovers() *takeovers {
	return &takeovers{sending: map[string]int{}, orphaned: map[string]time.Time{},
		done: map[string]bool{}, changed: make(chan struct{})}
}

// waitDone waits until n operations are done, on any worker.
func (t *takeovers) waitDone(ctx context.Context, n int) error {
	for {
		t.mu.Lock()
		got, changed := len(t.done), t.changed
		t.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d operations done (%d are): %w", n, got, ctx.Err())
		}
	}
}

// recorder returns worker i's recorder, passing events on to rec.
func (t *takeovers) recorder(rec Recorder, i int) Recorder { return takeoverRecorder{rec, t, i} }

// killed notes that worker i was killed now, holding the leases of
// leased: the operations it was sending, as the journal says (an attempt
// is reported only once decided, so the events alone miss the first
// attempts in flight), and as its events said.
func (t *takeovers) killed(i int, leased []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for _, op := range leased {
		t.orphaned[op] = now
	}
	for op, w := range t.sending {
		if w == i {
			t.orphaned[op] = now
			delete(t.sending, op)
		}
	}
}

// leasedBy returns the pending operations whose live lease in the journal
// at dsn belongs to the process pid (by the default owner name,
// host/pid/suffix).
func leasedBy(ctx context.Context, dsn string, pid int) ([]string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT op_id FROM idem_operations
		WHERE state = 1 AND lease_until > clock_timestamp() AND lease_owner LIKE $1`, "%/"+strconv.Itoa(pid)+"/%")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (t *takeovers) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.took)
}

func (t *takeovers) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return "no takeovers"
	}
	s := slices.Clone(t.took)
	slices.Sort(s)
	return fmt.Sprintf("%d operations taken over after a kill: median %s, max %s (LeaseTTL %s)",
		len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), fleetLease)
}

type takeoverRecorder struct {
	Recorder
	t *takeovers
	i int
}

func (r takeoverRecorder) Attempt(op, key string) {
	r.Recorder.Attempt(op, key)
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if at, ok := r.t.orphaned[op]; ok {
		r.t.took = append(r.t.took, time.Since(at))
		delete(r.t.orphaned, op)
	}
	r.t.sending[op] = r.i
}

func (r takeoverRecorder) Outcome(op string, res Result) {
	r.Recorder.Outcome(op, res)
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.t.sending[op] == r.i {
		delete(r.t.sending, op)
	}
	if res == ResultDone && !r.t.done[op] {
		r.t.done[op] = true
		close(r.t.changed)
		r.t.changed = make(chan struct{})
	}
}
