//go:build unix

package pgjournal_test

// F11: the liveness of a journal, tested on processes (this test binary
// run again as a fleet's process, runChild) that are SIGKILLed, SIGSTOPped
// and SIGTERMed with their operations in flight.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// child is a running child process.
type child struct {
	cmd    *osexec.Cmd
	lines  chan string
	stderr *lockedBuffer
}

// lockedBuffer is a buffer safe to write from a process's pipe while a
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild starts a child process running cfg and waits until it has
// opened its journal. It is killed when t ends, if still running.
func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: osexec.Command(os.Args[0], "-test.run=^$"), lines: make(chan string, 4), stderr: &lockedBuffer{}}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	c.cmd.Stderr = c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Signal(syscall.SIGCONT)
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	select {
	case line := <-c.lines:
		if line != "ready" {
			t.Fatalf("the child process said %q first: %s", line, c.stderr)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the child process did not open its journal in a minute: %s", c.stderr)
	}
	return c
}

// signal sends sig to the child.
func (c *child) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// summary waits, up to limit, for the child to end its batch and exit,
// and returns the batch's summary.
func (c *child) summary(t *testing.T, limit time.Duration) idem.BatchSummary {
	t.Helper()
	var last string
	timeout := time.After(limit)
	for done := false; !done; {
		select {
		case line, ok := <-c.lines:
			if !ok {
				done = true
				break
			}
			last = line
		case <-timeout:
			t.Fatalf("the child process's batch did not end within %s: %s", limit, c.stderr)
		}
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("the child process: %v: %s", err, c.stderr)
	}
	var sum idem.BatchSummary
	if err := json.Unmarshal([]byte(last), &sum); err != nil {
		t.Fatalf("the child process's summary %q: %v: %s", last, err, c.stderr)
	}
	return sum
}

// fleetServer records the key of every request by machine and operation
// (the last element of its path). It answers machine hold's requests
// never: each stays in flight until its sender gives it up; the others'
// at once, 201.
type fleetServer struct {
	*httptest.Server
	hold string
	mu   sync.Mutex
	sent map[string]map[string][]string // machine, operation: keys, one per request
	held chan struct{}                  // one per request of hold that arrived
}

func newFleetServer(t *testing.T, hold string) *fleetServer {
	s := &fleetServer{hold: hold, sent: map[string]map[string][]string{}, held: make(chan struct{}, 1024)}
	quit := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		who := r.Header.Get("X-Machine")
		s.mu.Lock()
		if s.sent[who] == nil {
			s.sent[who] = map[string][]string{}
		}
		s.sent[who][path.Base(r.URL.Path)] = append(s.sent[who][path.Base(r.URL.Path)], r.Header.Get("Idempotency-Key"))
		s.mu.Unlock()
		if who == s.hold {
			s.held <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-quit:
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(quit) }) // before Close, which waits for the handlers
	return s
}

// waitHeld waits until n requests of the held machine are in flight.
func (s *fleetServer) waitHeld(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.held:
		case <-time.After(time.Minute):
			t.Fatalf("fewer than %d requests in flight after a minute", n)
		}
	}
}

// requests returns, for machine who, the keys of each operation's
// requests.
func (s *fleetServer) requests(who string) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for op, keys := range s.sent[who] {
		out[op] = slices.Clone(keys)
	}
	return out
}

// checkResumed fails t unless each of ids was sent once by a and once by
// b, under one key.
func (s *fleetServer) checkResumed(t *testing.T, ids []string, a, b string) {
	t.Helper()
	ra, rb := s.requests(a), s.requests(b)
	for _, id := range ids {
		if len(ra[id]) != 1 || len(rb[id]) != 1 || ra[id][0] != rb[id][0] {
			t.Errorf("operation %s: %s sent it under %q, %s under %q; want once each, under one key", id, a, ra[id], b, rb[id])
		}
	}
	if len(ra) != len(ids) || len(rb) != len(ids) {
		t.Errorf("%s sent %d operations and %s %d, want %d each", a, len(ra), b, len(rb), len(ids))
	}
}

// Sizes of the process tests: the operations in flight, and the
// liveness of the process that holds them. The lease is an hour: only
// the liveness can free them within the tests' time.
const (
	inFlight      = 16
	childLiveness = time.Second
	childLease    = time.Hour
)

// deployment is a database as the journals reach it, and directly, for
// the tests' own reads.
type deployment struct{ dsn, direct string }

// deployments returns a fresh database reached directly and one reached
// through pgbouncer in transaction mode (F9.1), by name.
func deployments(t *testing.T) map[string]deployment {
	direct, behind := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	return map[string]deployment{
		"direct":                {direct, direct},
		"pgbouncer transaction": {pgtest.NewBouncer(t, behind, "transaction").DSN(), behind},
	}
}

// TestAKilledProcessIsResumedWithinItsLiveness is F11.2: a process
// SIGKILLed with 16 operations in flight, their leases an hour long, is
// restarted at once as a new process, which resumes all 16 under their
// keys once the dead one's liveness lapsed: the restart finishes its
// batch, which it could not do before the leases' hour. Directly and
// through pgbouncer in transaction mode.
func TestAKilledProcessIsResumedWithinItsLiveness(t *testing.T) {
	for name, d := range deployments(t) {
		t.Run(name, func(t *testing.T) {
			dsn := d.dsn
			srv := newFleetServer(t, "a")
			ids := opIDs("killed", inFlight)
			cfg := childConfig{DSN: dsn, URL: srv.URL + "/charges", Owner: "a", Machine: "a",
				LeaseTTL: childLease, Liveness: childLiveness, IDs: ids, Concurrency: inFlight}
			a := startChild(t, cfg)
			srv.waitHeld(t, inFlight)
			a.signal(t, syscall.SIGKILL)
			killed := time.Now()
			a.cmd.Wait()
			cfg.Owner, cfg.Machine = "a-restarted", "b"
			b := startChild(t, cfg)
			sum := b.summary(t, 45*time.Second) // the leases: an hour
			took := time.Since(killed)
			if sum.Done != inFlight || sum.Recorded != 0 || sum.Total() != inFlight {
				t.Fatalf("the restarted process's batch: %+v; want all %d done, by itself", sum, inFlight)
			}
			srv.checkResumed(t, ids, "a", "b")
			t.Logf("%d operations in flight at a SIGKILL resumed by the restart %s after the kill (Liveness %s, LeaseTTL %s)",
				inFlight, took.Round(time.Millisecond), childLiveness, childLease)
		})
	}
}

// TestAStoppedProcessIsDeclaredDeadAndFencedOut is F11.3: a process
// SIGSTOPped with 16 operations in flight (leases of an hour) is declared
// dead once its liveness lapsed by the database's clock, and another
// machine resumes them all under their keys and records their outcomes.
// After SIGCONT the stopped process sends nothing (its claims were lost
// by its own clock before the others could take them) and writes nothing:
// every row stays as the other machine left it; its batch claims each
// operation again in the same pass (F13.4) and finds it done. Directly
// and through pgbouncer in transaction mode.
func TestAStoppedProcessIsDeclaredDeadAndFencedOut(t *testing.T) {
	for name, d := range deployments(t) {
		dsn, direct := d.dsn, d.direct
		t.Run(name, func(t *testing.T) {
			srv := newFleetServer(t, "a")
			ids := opIDs("stopped", inFlight)
			a := startChild(t, childConfig{DSN: dsn, URL: srv.URL + "/charges", Owner: "a", Machine: "a",
				LeaseTTL: childLease, Liveness: childLiveness, IDs: ids, Concurrency: inFlight})
			srv.waitHeld(t, inFlight)
			a.signal(t, syscall.SIGSTOP)
			stopped := time.Now()

			b := openJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: childLease})
			cb, err := idem.New(idem.Config{Journal: b, MaxAttempts: 1, Logger: quiet,
				HTTPClient: &http.Client{Transport: machineTransport{"b"}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second) // the leases: an hour
			defer cancel()
			sum, err := cb.RunBatch(ctx, batchOps(srv.URL+"/charges", ids), idem.BatchOptions{Concurrency: inFlight})
			took := time.Since(stopped)
			if err != nil || sum.Done != inFlight || sum.Recorded != 0 {
				t.Fatalf("b's batch while a is stopped: %+v, %v; want all %d done by b", sum, err, inFlight)
			}
			if dead := lifeDead(t, direct, "a"); !dead {
				t.Fatal("a's liveness is not declared dead after b took its operations")
			}
			before := make([]leaseRow, len(ids))
			for i, id := range ids {
				before[i] = readLease(t, direct, id)
				if before[i].owner != nil || before[i].state != int16(journal.StateDone) || before[i].fence != 2 {
					t.Fatalf("operation %s after b's batch: %s; want done by b at fence 2, no lease", id, before[i])
				}
			}
			aSent := srv.requests("a")

			a.signal(t, syscall.SIGCONT)
			asum := a.summary(t, time.Minute)
			if want := (idem.BatchSummary{Done: inFlight, Recorded: inFlight}); asum != want {
				t.Errorf("a's batch after SIGCONT: %+v; want its %d operations, their claims lost, answered from the journal as b finished them (F13.4)",
					asum, inFlight)
			}
			for i, id := range ids {
				wantLease(t, direct, id, "a's SIGCONT", before[i])
			}
			if after := srv.requests("a"); fmt.Sprint(after) != fmt.Sprint(aSent) {
				t.Errorf("a sent after SIGCONT: before %v, after %v", aSent, after)
			}
			srv.checkResumed(t, ids, "a", "b")
			t.Logf("%d operations of a SIGSTOPped process resumed elsewhere %s after the stop (Liveness %s, LeaseTTL %s)",
				inFlight, took.Round(time.Millisecond), childLiveness, childLease)
		})
	}
}

// TestASIGTERMedBatchHandsItsLeasesBack is F11.4 under RunBatch: a
// process whose batch runs under a context that SIGTERM ends, and which
// closes its journal before it exits, is SIGTERMed with 16 operations in
// flight, their leases and its liveness an hour long. Another machine
// then takes each of them at once, pending under its key.
func TestASIGTERMedBatchHandsItsLeasesBack(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	srv := newFleetServer(t, "a")
	ids := opIDs("terminated", inFlight)
	a := startChild(t, childConfig{DSN: dsn, URL: srv.URL + "/charges", Owner: "a", Machine: "a",
		LeaseTTL: time.Hour, Liveness: time.Hour, IDs: ids, Concurrency: inFlight})
	srv.waitHeld(t, inFlight)
	a.signal(t, syscall.SIGTERM)
	if sum := a.summary(t, time.Minute); sum.Done != 0 || sum.Total() != inFlight {
		t.Fatalf("a's batch after SIGTERM: %+v; want none of %d done", sum, inFlight)
	}
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	sent := srv.requests("a")
	for _, id := range ids {
		c, err := b.TryClaim(context.Background(), id)
		if err != nil {
			t.Fatalf("a claim of %s after a's SIGTERM: %v; want it free at once", id, err)
		}
		op, ok := c.Operation()
		c.Release()
		if !ok || op.State != journal.StatePending || len(sent[id]) != 1 || op.Key != sent[id][0] {
			t.Fatalf("%s after a's SIGTERM: %+v (%v); want pending under the key a sent, %q", id, op, ok, sent[id])
		}
	}
}
