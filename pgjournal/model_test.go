package pgjournal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
	"github.com/idemkit/idem/testserver"
)

// The model test of a fleet: random sequences of Do calls on three
// machines sharing one PostgreSQL journal (one call at a time, or two
// machines calling one operation at once), through a network that loses
// requests and answers, and machines that die in the middle of an attempt
// (their journal closed, its leases handed back, a new process started in
// their place), against the reference server:
//
//   - every operation has at most one effect, and exactly one once a Do
//     reported it done;
//   - an operation is sent under one key only, on every machine, and the
//     journal holds that key;
//   - two attempts of one operation are never in flight at once, and the
//     server never answers that a key is in flight (F3);
//   - a completed operation is answered from the journal, on any machine,
//     and nothing is sent (F2).

const modelMachines = 3

// modelLease is the machines' LeaseTTL and Liveness: so long that no
// renewal on a loaded machine misses it. A holder starved past its lease
// rightly stops while its attempt stays at the server (F3.5), and the
// next holder's attempt is answered 409; the model counts that 409 as a
// failure, so its leases end only by hand (a death's Close, lapse).
const modelLease = time.Minute

var modelOps = []string{"m0", "m1", "m2"}

func TestModel(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	srv := testserver.Start(t, testserver.Config{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	var runs atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		f := &fleet{dsn: dsn, srv: srv, tr: tr, run: runs.Add(1), keys: map[string][]string{},
			inFlight: map[string]int{}, done: map[string]bool{}}
		defer f.close()
		for i := range modelMachines {
			f.machines = append(f.machines, f.start(rt, i))
		}
		rt.Repeat(map[string]func(*rapid.T){
			"":         f.check,
			"do":       f.do,
			"together": f.together,
			"lapse":    f.lapse,
		})
	})
}

// fate is what the network does to one attempt.
type fate int

const (
	deliver    fate = iota // the request reaches the server, the answer the client
	loseAnswer             // the request reaches the server, the answer is lost
	loseBoth               // the request is lost before the server
	die                    // the request reaches the server, then the machine dies
)

type fleet struct {
	dsn      string
	srv      *testserver.Instance
	tr       *http.Transport
	run      int64
	machines []*machine

	mu        sync.Mutex
	keys      map[string][]string // per operation, the keys its attempts carried
	inFlight  map[string]int      // per key, attempts in the network
	twice     []string            // keys seen twice in flight at once
	conflicts []string            // keys the server answered 409 for
	done      map[string]bool     // a Do reported the operation done
}

// machine is one process of one machine: a journal and a client on it.
type machine struct {
	f     *fleet
	i     int
	j     *pgjournal.Journal
	c     *idem.Client
	dead  atomic.Bool
	fates []fate // of the call running on this machine
	sent  int    // attempts of that call
}

func (f *fleet) start(t *rapid.T, i int) *machine {
	m := &machine{f: f, i: i}
	j, err := pgjournal.Open(context.Background(), f.dsn, pgjournal.Options{
		Namespace: fmt.Sprint("model-", f.run), LeaseTTL: modelLease, Liveness: modelLease, Logger: quiet,
		Owner: fmt.Sprintf("machine-%d", i),
	})
	if err != nil {
		t.Fatal(err)
	}
	// An attempt the client gave up on stays at the server, and a retry
	// under its key would be answered 409: the attempts are bounded by
	// the lease, not by a time a loaded server may take.
	c, err := idem.New(idem.Config{Journal: j, HTTPClient: &http.Client{Transport: m},
		MaxAttempts: 3, InitialWait: time.Microsecond, MaxWait: time.Microsecond, AttemptTimeout: modelLease, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m.j, m.c = j, c
	return m
}

func (f *fleet) close() {
	for _, m := range f.machines {
		m.j.Close()
	}
}

// RoundTrip is the network of machine m: each attempt follows the next
// fate of the call running on it.
func (m *machine) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.dead.Load() {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("model: the machine is dead")
	}
	f := m.f
	op := req.Header.Get("X-Reference")
	key := req.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if !slices.Contains(f.keys[op], key) {
		f.keys[op] = append(f.keys[op], key)
	}
	if f.inFlight[key]++; f.inFlight[key] > 1 {
		f.twice = append(f.twice, key)
	}
	fa := deliver
	if len(m.fates) > 0 {
		fa, m.fates = m.fates[0], m.fates[1:]
	}
	m.sent++
	f.mu.Unlock()
	landed := false
	land := func() { // the attempt is no longer in the network
		if !landed {
			landed = true
			f.mu.Lock()
			f.inFlight[key]--
			f.mu.Unlock()
		}
	}
	defer land()
	if fa == loseBoth {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("model: request lost")
	}
	resp, err := f.tr.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusConflict {
		f.mu.Lock()
		f.conflicts = append(f.conflicts, key)
		f.mu.Unlock()
	}
	if err == nil && (fa == loseAnswer || fa == die) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if fa == die {
			// The process stops: its claims are lost, and Close
			// hands their leases back at once (F11.4). A death
			// without Close, whose leases wait for its liveness to
			// lapse, is life_test.go's SIGKILL. Its attempt ended
			// with the answer read: another machine may send as
			// soon as a lease is back, before Close returns.
			land()
			m.dead.Store(true)
			m.j.Close()
		}
		return nil, errors.New("model: answer lost")
	}
	return resp, err
}

// call is one Do on machine m.
func (m *machine) call(t *rapid.T, id string, fates []fate) (sent int, recorded bool, err error) {
	body := fmt.Sprintf(`{"customer":"cus-%s","amount":100,"currency":"usd","reference":%q}`, id, id)
	req, rerr := http.NewRequest(http.MethodPost, m.f.srv.URL+"/charges", bytes.NewReader([]byte(body)))
	if rerr != nil {
		t.Fatal(rerr)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-ID", fmt.Sprint("fleet-model-", m.f.run))
	req.Header.Set("X-Reference", id)
	m.fates, m.sent = fates, 0
	resp, err := m.c.Do(id, req)
	if err == nil {
		recorded = idem.Recorded(resp)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return m.sent, recorded, err
}

// isDone reports whether a Do reported id done.
func (f *fleet) isDone(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[id]
}

// settle checks one finished call against the model and moves it on;
// wasDone is whether the operation was done when the call began.
func (f *fleet) settle(t *rapid.T, m *machine, id string, wasDone bool, sent int, recorded bool, err error) {
	var oe *idem.OutcomeError
	switch {
	case err == nil:
		if wasDone && (!recorded || sent > 0) {
			t.Fatalf("machine %d: Do of done %s sent %d attempts (recorded %v); want an answer from the journal", m.i, id, sent, recorded)
		}
		f.mu.Lock()
		f.done[id] = true
		f.mu.Unlock()
	case errors.As(err, &oe) && oe.Outcome == idem.OutcomeUnknown:
		if wasDone {
			t.Fatalf("machine %d: Do of done %s ended unknown: %v", m.i, id, err)
		}
	case m.dead.Load() && (errors.Is(err, journal.ErrClosed) || errors.Is(err, journal.ErrUnavailable)):
	default:
		t.Fatalf("machine %d: Do of %s: %v", m.i, id, err)
	}
	if m.dead.Load() {
		f.machines[m.i] = f.start(t, m.i) // the process is started again
	}
}

func drawFates(t *rapid.T, label string) []fate {
	return rapid.SliceOfN(rapid.SampledFrom([]fate{deliver, loseAnswer, loseBoth, die}), 0, 3).Draw(t, label)
}

func (f *fleet) do(t *rapid.T) {
	m := f.machines[rapid.IntRange(0, modelMachines-1).Draw(t, "machine")]
	id := rapid.SampledFrom(modelOps).Draw(t, "op")
	wasDone := f.isDone(id)
	sent, recorded, err := m.call(t, id, drawFates(t, "fates"))
	f.settle(t, m, id, wasDone, sent, recorded, err)
}

// together has two machines call one operation at once.
func (f *fleet) together(t *rapid.T) {
	a := rapid.IntRange(0, modelMachines-1).Draw(t, "a")
	b := (a + rapid.IntRange(1, modelMachines-1).Draw(t, "b")) % modelMachines
	id := rapid.SampledFrom(modelOps).Draw(t, "op")
	ms := []*machine{f.machines[a], f.machines[b]}
	fates := [][]fate{drawFates(t, "fates-a"), drawFates(t, "fates-b")}
	type ended struct {
		sent     int
		recorded bool
		err      error
	}
	res := make([]ended, 2)
	wasDone := f.isDone(id)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			var e ended
			e.sent, e.recorded, e.err = m.call(t, id, fates[i])
			res[i] = e
		})
	}
	wg.Wait()
	for i, m := range ms {
		f.settle(t, m, id, wasDone, res[i].sent, res[i].recorded, res[i].err)
	}
}

// lapse lets the leases of dead machines' processes lapse at once, as
// LeaseTTL passing would.
func (f *fleet) lapse(t *rapid.T) {
	conn, err := pgxConnect(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE idem_operations SET lease_until = clock_timestamp()
		WHERE namespace = $1 AND lease_until IS NOT NULL`, fmt.Sprint("model-", f.run)); err != nil {
		t.Fatal(err)
	}
}

// check holds the invariants after every action.
func (f *fleet) check(t *rapid.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.twice) > 0 || len(f.conflicts) > 0 {
		t.Fatalf("keys in flight twice at once %q, answered 409 %q", f.twice, f.conflicts)
	}
	effects := f.effects(t)
	j := f.machines[0].j
	for _, id := range modelOps {
		if n := effects[id]; n > 1 || (f.done[id] && n != 1) {
			t.Fatalf("%s has %d effects (done %v)", id, n, f.done[id])
		}
		if len(f.keys[id]) > 1 {
			t.Fatalf("%s was sent under keys %q", id, f.keys[id])
		}
		op, ok, err := j.Lookup(context.Background(), id)
		switch {
		case err != nil:
			t.Fatal(err)
		case len(f.keys[id]) == 1 && (!ok || op.Key != f.keys[id][0]):
			t.Fatalf("%s was sent under %s, the journal holds %q (found %v)", id, f.keys[id][0], op.Key, ok)
		case f.done[id] && op.State != journal.StateDone:
			t.Fatalf("%s is done, the journal holds it %s", id, op.State)
		}
	}
}

// effects counts the run's charges per reference.
func (f *fleet) effects(t *rapid.T) map[string]int {
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/charges", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Client-ID", fmt.Sprint("fleet-model-", f.run))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list testserver.ChargeList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, c := range list.Charges {
		n[c.Reference]++
	}
	return n
}

func pgxConnect(dsn string) (*pgx.Conn, error) { return pgx.Connect(context.Background(), dsn) }
