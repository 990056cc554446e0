package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver/chaos"
)

// seedOf returns the run's seed and logs it first, so that a failure can
// be replayed. Every scenario starts with it, and -short skips the
// scenarios here (see skipScenario).
func seedOf(t *testing.T) int64 {
	t.Helper()
	skipScenario(t)
	seed, err := SeedFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (replay with %s=%d)", seed, EnvSeed, seed)
	return seed
}

// skipScenario skips t under -short: a scenario runs a workload against
// servers, proxies or child processes, for seconds to minutes, and the
// short run is a contributor's quick loop. The suite's own parts (the
// checker, the wire, the events, the disk faults, the power cut) still
// run. Whatever starts a scenario's servers or processes calls it too.
func skipScenario(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a fault scenario; -short skips the fault suite's scenarios")
	}
}

// rngOf returns a generator for seed, distinct per purpose.
func rngOf(seed int64, purpose uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), purpose))
}

// sizeOf returns the size in the environment variable name, or def.
func sizeOf(t *testing.T, name string, def int) int {
	t.Helper()
	n, err := SizeFromEnv(name, def)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startServer starts the reference server's binary on a database in a
// fresh directory, and kills it when the test ends if it still runs.
// listenProxy starts the fault proxy in front of upstream, faulting rate of
// the mutations with every kind of fault, drawn from seed, and recording
// what it forwards on a Wire; it is closed when the test ends.
func listenProxy(t *testing.T, upstream string, seed int64, rate float64) (*chaos.Server, *Wire) {
	t.Helper()
	return listenBalancer(t, []string{upstream}, seed, rate)
}

// listenBalancer is listenProxy in front of several upstreams, replicas of
// the server, which it takes in turn.
func listenBalancer(t *testing.T, upstreams []string, seed int64, rate float64) (*chaos.Server, *Wire) {
	t.Helper()
	targets := make([]*url.URL, len(upstreams))
	for i, upstream := range upstreams {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		targets[i] = u
	}
	wire := NewWire()
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	proxy, err := chaos.Listen(chaos.Config{Upstreams: targets, Seed: seed, Rate: rate, Transport: wire.Transport(tr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Close()
		tr.CloseIdleConnections()
	})
	return proxy, wire
}

func startServer(t *testing.T, args ...string) *ServerProcess {
	t.Helper()
	return startServerBinary(t, serverBinary(t), args...)
}

// startServerBinary is startServer with the server's binary at binary.
func startServerBinary(t *testing.T, binary string, args ...string) *ServerProcess {
	t.Helper()
	skipScenario(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartServer(ctx, binary, filepath.Join(dir, "server.db"), filepath.Join(dir, "server.log"),
		append([]string{"-log-level", "warn"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping the server: %v", err)
		}
		if t.Failed() {
			t.Logf("server log: %s", s.LogPath)
		}
	})
	return s
}

// clientConfig is the client of the scenarios: short attempt timeouts and
// waits so that stalls and outages cost seconds, not minutes, and the
// default retry budget, which throttles retries under heavy faults by
// design (a worker re-runs an operation that ended unknown). A nil j means
// no journal: the client keeps its keys in memory.
func clientConfig(j journal.Journal, hc *http.Client) idem.Config {
	return idem.Config{
		Journal:        j,
		HTTPClient:     hc,
		AttemptTimeout: 2 * time.Second,
		MaxAttempts:    6,
		MaxElapsed:     20 * time.Second,
		InitialWait:    5 * time.Millisecond,
		MaxWait:        250 * time.Millisecond,
	}
}

// newClient returns an instrumented client reporting to rec, and a
// function that closes its idle connections.
func newClient(t *testing.T, j *filejournal.Journal, rec Recorder) *idem.Client {
	t.Helper()
	tr := NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	cfg := clientConfig(j, &http.Client{Transport: tr})
	Instrument(&cfg, rec)
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quietLog discards the journal's records (failures the tests inject,
// torn tails they cause).
var quietLog = slog.New(slog.DiscardHandler)

// openJournal opens a journal in a fresh directory and closes it when the
// test ends.
func openJournal(t *testing.T) *filejournal.Journal {
	t.Helper()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "client.journal"), filejournal.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// maxRuns bounds the Do calls a worker makes for one operation.
const maxRuns = 2000

// runOperation runs operation i until it is done, re-running it under the
// same operation ID (and so the same key) each time it ends unknown, as a
// real caller would; it waits a little longer before each re-run. It
// returns the error of the last Do when the operation ends otherwise.
func runOperation(ctx context.Context, c *idem.Client, w Workload, i int, rec Recorder) error {
	id := OperationID(i)
	for run := 0; ; run++ {
		req, err := w.Request(ctx, i)
		if err != nil {
			return err
		}
		resp, err := c.Do(id, req)
		res := ResultOf(err)
		rec.Outcome(id, res)
		if err == nil {
			rec.Final(id, resp.StatusCode, idem.AlreadyApplied(resp))
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil && !errors.Is(err, idem.ErrBodyNotRecorded) {
				return fmt.Errorf("%s: reading the response: %w", id, err)
			}
			return nil
		}
		if res != ResultUnknown || run >= maxRuns {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %w)", id, ctx.Err(), err)
		case <-time.After(time.Duration(min(run+1, 25)) * 10 * time.Millisecond):
		}
	}
}

// runWorkload runs every operation of w with the given number of workers
// and returns the errors of the operations that did not end done.
func runWorkload(ctx context.Context, c *idem.Client, w Workload, workers int, rec Recorder) []error {
	return runEach(w.Ops, workers, func(i int) error { return runOperation(ctx, c, w, i, rec) })
}

// runEach runs op for 0..n-1 with the given number of workers and returns
// the errors it returned.
func runEach(n, workers int, op func(i int) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := op(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// requireNoErrors fails the test with the first few errors.
func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if i == 5 {
			t.Errorf("... and %d more", len(errs)-5)
			break
		}
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

// serverView reads what the server at url, on the database file db,
// holds: effects per operation and reserved stock from its database, the
// rest from GET /stats and GET /inventory. replays is false when the server
// was killed during the run (its counters started over).
func serverView(t *testing.T, url, db string, w Workload, replays bool, wire *Wire) ServerView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	st, err := FetchStats(ctx, hc, url)
	if err != nil {
		t.Fatal(err)
	}
	stock, err := FetchStock(ctx, hc, url)
	if err != nil {
		t.Fatal(err)
	}
	effects, err := EffectsInDatabase(ctx, db, w.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := ReservedInDatabase(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	v := ServerView{
		Effects: effects, Replays: -1, Charges: st.Effects.Charges, Captures: st.GatewayCaptures,
		StockTaken: InitialStock - stock, Reserved: reserved,
	}
	if replays {
		v.Replays = st.Replays
	}
	if wire != nil {
		wv := wire.View()
		v.Wire = &wv
		if wv.Requests == 0 {
			t.Error("the wire saw no keyed request: the run did not go through the proxy")
		}
	}
	if st.DuplicateReferences != 0 {
		t.Errorf("the server counts %d references with more than one effect", st.DuplicateReferences)
	}
	if st.InFlight != 0 {
		t.Errorf("the server holds %d keys in flight after the run", st.InFlight)
	}
	if want := w.StockTaken(effects); reserved != want {
		t.Errorf("the reservations hold %d of the stock; the operations with an effect take %d", reserved, want)
	}
	return v
}

// report checks the run, logs its line and fails the test if the promise
// was broken.
func report(t *testing.T, c *Checker, name string, v ServerView) Report {
	t.Helper()
	r := c.Check(name, v)
	t.Log(r)
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	return r
}

// requireJournalDone checks that the journal holds every operation of w
// as done.
func requireJournalDone(t *testing.T, j journal.Journal, w Workload) {
	t.Helper()
	for _, id := range w.IDs() {
		op, ok := lookup(j, id)
		if !ok || op.State != journal.StateDone {
			t.Errorf("journal: operation %s is %v (found %v), want done", id, op.State, ok)
			return
		}
	}
}
