package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/testserver"
)

// The model-based test: random sequences of Do (through a network that
// loses requests and answers), crashes of the client (its journal dropped
// without Close, the file left as a killed process or a power cut leaves
// it), clean reopens, compactions and clock advances, against a model of
// what the reference server must hold:
//
//   - every operation has at most one effect;
//   - an operation the client reported done has exactly one;
//   - an operation's key never changes while the journal holds it, and
//     every attempt carries it;
//   - a pending operation whose key is older than KeyTTL is refused with
//     ErrKeyExpired, and nothing is sent;
//   - a completed operation is answered from the journal, and nothing is
//     sent, however long ago it completed and however often the journal
//     was compacted since.
//
// One reference server, in process, serves every run of the property; each
// run has its own client ID (so its own key space) and its own journal
// directory. One fake clock drives the client, the journal and the server,
// and only moves forward.

// modelTTL is the server's retention and the client's KeyTTL.
const modelTTL = time.Hour

// modelOps are the operation IDs a run draws from: few, so that actions
// meet the same operations again and again.
var modelOps = []string{"m0", "m1", "m2", "m3"}

func TestModel(t *testing.T) {
	w := newModelWorld(t)
	rapid.Check(t, w.property)
}

// FuzzModel runs the same property from fuzzed bytes (go test -fuzz
// FuzzModel); under go test it runs a few seeds, each long enough for a
// sequence of a few dozen actions.
func FuzzModel(f *testing.F) {
	w := newModelWorld(f)
	for s := range uint64(4) {
		seed := make([]byte, 8<<10)
		r := rand.New(rand.NewPCG(s, 0x1de4))
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		f.Add(seed)
	}
	f.Fuzz(rapid.MakeFuzz(w.property))
}

// modelWorld is what the runs of the property share: the clock, the
// server and a transport to it.
type modelWorld struct {
	clock *modelClock
	srv   *testserver.Instance
	tr    *http.Transport
	runs  atomic.Int64
}

func newModelWorld(tb testing.TB) *modelWorld {
	tb.Helper()
	clock := &modelClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv := testserver.Start(tb, testserver.Config{
		Now: clock.Now, Retention: modelTTL,
		SweepInterval: time.Hour, // in real time: the model sweeps when it moves the clock
	})
	tr := &http.Transport{}
	tb.Cleanup(tr.CloseIdleConnections)
	return &modelWorld{clock: clock, srv: srv, tr: tr}
}

// modelClock is a clock that moves only when told.
type modelClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *modelClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *modelClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fate is what the network does to one attempt.
type fate int

const (
	deliver    fate = iota // the request reaches the server, the answer the client
	loseAnswer             // the request reaches the server, the answer is lost
	loseBoth               // the request is lost before the server
)

// modelNetwork is the client's transport: each attempt follows the next
// fate drawn for the current Do (deliver once they run out), and the key
// of every attempt is recorded.
type modelNetwork struct {
	base  http.RoundTripper
	mu    sync.Mutex
	fates []fate
	keys  []string // the keys the attempts of the current Do carried
}

func (n *modelNetwork) start(fates []fate) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fates, n.keys = fates, nil
}

func (n *modelNetwork) attempts() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.keys)
}

func (n *modelNetwork) RoundTrip(req *http.Request) (*http.Response, error) {
	n.mu.Lock()
	n.keys = append(n.keys, req.Header.Get("Idempotency-Key"))
	f := deliver
	if len(n.fates) > 0 {
		f, n.fates = n.fates[0], n.fates[1:]
	}
	n.mu.Unlock()
	switch f {
	case loseBoth:
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("model network: request lost")
	case loseAnswer:
		resp, err := n.base.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, errors.New("model network: answer lost")
	}
	return n.base.RoundTrip(req)
}

// syncedFile remembers how much of the journal file the last successful
// fsync covered, so that a power cut can be modelled: what was written
// after it may be lost.
type syncedFile struct {
	idem.File
	size *atomic.Int64
}

func (f syncedFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.size.Store(fi.Size())
	return nil
}

// modelOp is what the model knows of one operation.
type modelOp struct {
	key       string     // "" until a Do journaled it
	state     idem.State // 0 until then
	created   time.Time
	completed time.Time
}

func (o *modelOp) expired(now time.Time) bool {
	return o.state == idem.Pending && now.Sub(o.created) >= modelTTL
}

// machine is one run of the property: one client process after another on
// one journal, against the shared server.
type machine struct {
	w        *modelWorld
	clientID string
	dir      string
	gen      int // the journal file's generation: a crash copies it to the next
	synced   atomic.Int64
	net      *modelNetwork
	j        *idem.Journal
	c        *idem.Client
	ops      map[string]*modelOp
}

func (w *modelWorld) property(t *rapid.T) {
	dir, err := os.MkdirTemp("", "idem-model-")
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{
		w: w, clientID: fmt.Sprintf("model-%d", w.runs.Add(1)), dir: dir,
		net: &modelNetwork{base: w.tr}, ops: map[string]*modelOp{},
	}
	for _, id := range modelOps {
		m.ops[id] = &modelOp{}
	}
	defer func() {
		if m.j != nil {
			m.j.Close()
		}
		os.RemoveAll(dir)
	}()
	m.open(t)
	t.Repeat(map[string]func(*rapid.T){
		"":        m.check,
		"do":      m.do,
		"crash":   m.crash,
		"reopen":  m.reopen,
		"compact": m.compact,
		"advance": m.advance,
	})
}

func (m *machine) path() string { return filepath.Join(m.dir, fmt.Sprintf("journal.%d", m.gen)) }

// open opens the journal of the current generation and a client on it: a
// new process.
func (m *machine) open(t *rapid.T) {
	t.Helper()
	j, err := idem.OpenJournalWithOptions(m.path(), idem.JournalOptions{
		KeyTTL: modelTTL, Now: m.w.clock.Now, Logger: slog.New(slog.DiscardHandler),
		WrapFile: func(f idem.File) idem.File {
			if fi, err := f.Stat(); err == nil {
				m.synced.Store(fi.Size())
			}
			return syncedFile{File: f, size: &m.synced}
		},
	})
	if err != nil {
		t.Fatalf("opening the journal: %v", err)
	}
	c, err := idem.New(idem.Config{
		Journal: j, HTTPClient: &http.Client{Transport: m.net},
		MaxAttempts: 3, InitialWait: time.Microsecond, MaxWait: time.Microsecond,
		KeyTTL: modelTTL, Now: m.w.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.j, m.c = j, c
}

func (m *machine) request(t *rapid.T, id string) *http.Request {
	body := fmt.Sprintf(`{"customer":"cus-%s","amount":%d,"currency":"usd","reference":%q}`, id, 100+len(id), id)
	req, err := http.NewRequest(http.MethodPost, m.w.srv.URL+"/charges", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-ID", m.clientID)
	return req
}

// do runs one Do of a drawn operation through drawn network fates.
func (m *machine) do(t *rapid.T) {
	id := rapid.SampledFrom(modelOps).Draw(t, "op")
	fates := rapid.SliceOfN(rapid.SampledFrom([]fate{deliver, loseAnswer, loseBoth}), 0, 3).Draw(t, "fates")
	o := m.ops[id]
	now := m.w.clock.Now()
	m.net.start(fates)
	resp, err := m.c.Do(id, m.request(t, id))
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	sent := m.net.attempts()

	switch {
	case o.expired(now):
		if !errors.Is(err, idem.ErrKeyExpired) || len(sent) > 0 {
			t.Fatalf("Do of %s, pending with a key %s old: %v after %d attempts; want ErrKeyExpired and nothing sent",
				id, now.Sub(o.created), err, len(sent))
		}
		return
	case o.state == idem.Done:
		if err != nil || len(sent) > 0 || !idem.Recorded(resp) {
			t.Fatalf("Do of %s, done: %v after %d attempts; want the recorded answer and nothing sent", id, err, len(sent))
		}
		return
	}
	if len(sent) == 0 {
		t.Fatalf("Do of %s (%v) sent nothing and returned %v", id, o.state, err)
	}
	jo, ok := m.j.Lookup(id)
	if !ok {
		t.Fatalf("Do of %s sent %d attempts, and the journal does not hold it", id, len(sent))
	}
	if o.key != "" && jo.Key != o.key {
		t.Fatalf("the key of %s changed from %s to %s", id, o.key, jo.Key)
	}
	for _, k := range sent {
		if k != jo.Key {
			t.Fatalf("an attempt of %s carried key %s, not its journaled key %s", id, k, jo.Key)
		}
	}
	switch {
	case err == nil:
		if jo.State != idem.Done {
			t.Fatalf("Do of %s returned done and the journal holds it as %v", id, jo.State)
		}
	case errors.Is(err, idem.ErrUnknown):
		if jo.State != idem.Pending {
			t.Fatalf("Do of %s ended unknown and the journal holds it as %v", id, jo.State)
		}
	default:
		t.Fatalf("Do of %s: %v", id, err)
	}
	o.key, o.state, o.created, o.completed = jo.Key, jo.State, jo.Created, jo.Completed
}

// crash drops the client without closing its journal. The file is left as
// a killed process leaves it (everything written) or, one time in two, as
// a power cut may (anything written after the last fsync may be cut off,
// at any byte). The next process opens a copy of it, since the dropped
// Journal still holds the lock of its file in this process.
func (m *machine) crash(t *rapid.T) {
	data, err := os.ReadFile(m.path())
	if err != nil {
		t.Fatal(err)
	}
	powerCut := rapid.Bool().Draw(t, "power cut")
	if synced := m.synced.Load(); powerCut && synced < int64(len(data)) {
		data = data[:rapid.Int64Range(synced, int64(len(data))).Draw(t, "bytes kept")]
	}
	old := m.j
	m.gen++
	if err := os.WriteFile(m.path(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	old.Close() // only to release the file; the new process reads the copy
	m.open(t)
	for _, id := range modelOps {
		o := m.ops[id]
		if o.key == "" {
			continue
		}
		jo, ok := m.j.Lookup(id)
		switch {
		case !ok:
			t.Fatalf("after a crash (power cut %v) the journal lost %s, whose intent was synced", powerCut, id)
		case jo.Key != o.key:
			t.Fatalf("after a crash the key of %s changed from %s to %s", id, o.key, jo.Key)
		case jo.State == idem.Pending && o.state == idem.Done && !powerCut:
			t.Fatalf("after a process crash the journal lost the completion of %s, which was written", id)
		case jo.State == idem.Done && o.state != idem.Done:
			t.Fatalf("after a crash the journal holds %s as done; it was %v", id, o.state)
		}
		o.state = jo.State // a power cut may have lost a completion: the next Do replays
	}
}

// reopen closes the journal and opens it again: a clean restart.
func (m *machine) reopen(t *rapid.T) {
	if err := m.j.Close(); err != nil {
		t.Fatalf("closing the journal: %v", err)
	}
	m.open(t)
}

// compact compacts the journal: it must keep every operation, pending
// ones whole and completed ones at least as a summary (their ID, key and
// state), however old, so that no ID is ever sent again under a new key.
func (m *machine) compact(t *rapid.T) {
	if err := m.j.Compact(); err != nil {
		t.Fatalf("compacting: %v", err)
	}
	for _, id := range modelOps {
		o := m.ops[id]
		if o.key == "" {
			continue
		}
		if jo, ok := m.j.Lookup(id); !ok || jo.Key != o.key || jo.State != o.state {
			t.Fatalf("after compaction the journal holds %s as %v with key %s (found %v); want %v with key %s",
				id, jo.State, jo.Key, ok, o.state, o.key)
		}
	}
}

// advance moves the clock and lets the server sweep its expired keys.
func (m *machine) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Minute, 20 * time.Minute, modelTTL - time.Minute, modelTTL, 3 * modelTTL}).Draw(t, "advance")
	m.w.clock.Advance(d)
	if _, err := m.w.srv.Server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// check holds after every action: what the server holds and what the
// journal lists agree with the model.
func (m *machine) check(t *rapid.T) {
	effects := m.effects(t)
	now := m.w.clock.Now()
	for _, id := range modelOps {
		o, n := m.ops[id], effects[id]
		switch {
		case n > 1:
			t.Fatalf("%s took effect %d times", id, n)
		case o.state == idem.Done && n != 1:
			t.Fatalf("%s is done and has %d effects", id, n)
		}
		if o.key == "" {
			continue
		}
		jo, ok := m.j.Lookup(id)
		if !ok || jo.Key != o.key || jo.State != o.state {
			t.Fatalf("the journal holds %s as %v with key %s (found %v); the model as %v with key %s",
				id, jo.State, jo.Key, ok, o.state, o.key)
		}
	}
	var wantExpired, wantPending []string
	for _, id := range modelOps {
		if o := m.ops[id]; o.state == idem.Pending {
			if o.expired(now) {
				wantExpired = append(wantExpired, id)
			} else {
				wantPending = append(wantPending, id)
			}
		}
	}
	if got := opIDs(m.j.Expired()); !slices.Equal(got, wantExpired) {
		t.Fatalf("Expired() lists %v, want %v", got, wantExpired)
	}
	if got := opIDs(m.j.Pending()); !slices.Equal(got, wantPending) {
		t.Fatalf("Pending() lists %v, want %v", got, wantPending)
	}
}

// effects counts the charges of this run's client per reference.
func (m *machine) effects(t *rapid.T) map[string]int {
	req, err := http.NewRequest(http.MethodGet, m.w.srv.URL+"/charges", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Client-ID", m.clientID)
	resp, err := m.w.srv.Client().Do(req)
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

// opIDs returns the sorted IDs of ops.
func opIDs(ops []idem.Operation) []string {
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	slices.Sort(ids)
	return ids
}
