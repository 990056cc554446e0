package model_test

import (
	"bytes"
	"context"
	"encoding/binary"
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
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/filefaults"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver"
)

// The model-based test: random sequences of Do (through a network that
// loses requests and answers, one call at a time or several at once),
// crashes of the client (its journal dropped without Close, the file left
// as a killed process or a power cut leaves it), clean reopens, a byte of
// the file damaged between two processes, a failed fsync, compactions and
// clock advances, against a model of what the reference server must hold:
//
//   - every operation has at most one effect;
//   - an operation a Do reported done has exactly one;
//   - an operation's key never changes while the journal holds it, every
//     attempt carries it, and the server never sees an operation under a
//     second key, nor under a key the journal did not hold durably;
//   - Do calls of one operation at once run one after the other: two
//     attempts with one key are never in flight at the same moment, the
//     server never answers that a key is in flight, and once one call has
//     the outcome the others answer it from the journal (C11);
//   - a pending operation whose key could be KeyTTL old before an attempt
//     ends (KeyTTL less AttemptTimeout old, to the nanosecond) is refused
//     with ErrKeyExpired, and nothing is sent (C6);
//   - a completed operation is answered from the journal, and nothing is
//     sent, however long ago it completed and however often the journal
//     was compacted since;
//   - a byte damaged inside a record that is not the file's last makes the
//     next open fail with ErrCorrupt at that record, and the file is left
//     as it was (J3);
//   - a Begin whose fsync fails returns the failure and nothing is sent for
//     its operation; the journal then refuses every append with that
//     failure and fsyncs no more (J6).
//
// One reference server, in process, serves every run of the property; each
// run has its own client ID (so its own key space) and its own journal
// directory. One fake clock drives the client, the journal and the server,
// and only moves forward.

// modelTTL is the server's retention and the client's KeyTTL.
const modelTTL = time.Hour

// modelAttemptTimeout is the client's AttemptTimeout: no attempt starts
// with a key older than modelTTL less this.
const modelAttemptTimeout = 10 * time.Second

// modelOps are the operation IDs a run draws from: few, so that actions
// meet the same operations again and again.
var modelOps = []string{"m0", "m1", "m2", "m3"}

// list and lookup read a journal that cannot fail to be read.
var (
	list   = journalhelp.MustList
	lookup = journalhelp.MustLookup
)

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

// modelCall is one Do call of an action: its operation, the fates of its
// attempts (deliver once they run out), what it sent and how it ended.
type modelCall struct {
	id    string
	fates []fate
	mates []*modelCall // the other calls of the same operation made at once

	waiting  chan struct{} // closed once the call waits on its context
	waitOnce sync.Once
	ended    chan struct{} // closed when Do has returned

	sent     []string // the keys its attempts carried
	err      error
	recorded bool // Do answered from the journal (idem.Recorded)
}

func newModelCall(id string, fates []fate) *modelCall {
	return &modelCall{id: id, fates: fates, waiting: make(chan struct{}), ended: make(chan struct{})}
}

func (c *modelCall) wait() { c.waitOnce.Do(func() { close(c.waiting) }) }

// callKey is the context key of a call.
type callKey struct{}

// callContext is the context of a call's request. It tells the call when
// Do first asks for its Done channel: Do waits for a concurrent call of the
// same operation within its context, so it asks before it blocks there.
type callContext struct {
	context.Context
	call *modelCall
}

func (c callContext) Done() <-chan struct{} {
	c.call.wait()
	return c.Context.Done()
}

func (c callContext) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	return c.Context.Value(key)
}

// modelNetwork is the client's transport: each attempt follows the next
// fate of its call. It records the keys each operation was sent under and
// the keys it saw twice in flight at once, or that the server said were
// in flight. An attempt is held until every other call of its operation
// made at once waits on its context or has ended: a call that sends
// without waiting for the other then sends while this one is in flight.
type modelNetwork struct {
	base http.RoundTripper

	mu        sync.Mutex
	keys      map[string][]string // per operation, the keys its attempts carried
	inFlight  map[string]int      // per key, its attempts in the network
	twice     []string            // keys seen twice in flight at once
	conflicts []string            // keys the server answered 409 for
}

func newModelNetwork(base http.RoundTripper) *modelNetwork {
	return &modelNetwork{base: base, keys: map[string][]string{}, inFlight: map[string]int{}}
}

// sentUnder returns the keys operation id was sent under.
func (n *modelNetwork) sentUnder(id string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.keys[id])
}

func (n *modelNetwork) RoundTrip(req *http.Request) (*http.Response, error) {
	c := req.Context().Value(callKey{}).(*modelCall)
	c.wait() // a call that sends waits for nothing else
	key := req.Header.Get("Idempotency-Key")
	n.mu.Lock()
	c.sent = append(c.sent, key)
	if !slices.Contains(n.keys[c.id], key) {
		n.keys[c.id] = append(n.keys[c.id], key)
	}
	if n.inFlight[key]++; n.inFlight[key] > 1 {
		n.twice = append(n.twice, key)
	}
	f := deliver
	if len(c.fates) > 0 {
		f, c.fates = c.fates[0], c.fates[1:]
	}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.inFlight[key]--
		n.mu.Unlock()
	}()
	for _, mate := range c.mates {
		select {
		case <-mate.waiting:
		case <-mate.ended:
		}
	}

	if f == loseBoth {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("model network: request lost")
	}
	resp, err := n.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusConflict {
		n.mu.Lock()
		n.conflicts = append(n.conflicts, key)
		n.mu.Unlock()
	}
	if err == nil && f == loseAnswer {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("model network: answer lost")
	}
	return resp, err
}

// modelOp is what the model knows of one operation.
type modelOp struct {
	key     string        // "" until the journal holds it durably
	state   journal.State // as the journal holds it; 0 until then
	created time.Time
	applied bool // a Do returned the server's final answer
	// unsynced: a Begin of it failed its fsync in this process; its intent
	// may be in the file all the same.
	unsynced bool
}

// refused reports whether a Do of o at now must be refused: its key could
// turn modelTTL old before an attempt sent now ends.
func (o *modelOp) refused(now time.Time) bool {
	return o.state == journal.StatePending && now.Sub(o.created) >= modelTTL-modelAttemptTimeout
}

// expired reports whether the journal lists o as expired at now.
func (o *modelOp) expired(now time.Time) bool {
	return o.state == journal.StatePending && now.Sub(o.created) >= modelTTL
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
	j        *filejournal.Journal
	c        *idem.Client
	fault    *filefaults.SyncFault // the current process's
	latched  bool                  // the current process's journal failed an fsync
	ops      map[string]*modelOp
}

func (w *modelWorld) property(t *rapid.T) {
	dir, err := os.MkdirTemp("", "idem-model-")
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{
		w: w, clientID: fmt.Sprintf("model-%d", w.runs.Add(1)), dir: dir,
		net: newModelNetwork(w.tr), ops: map[string]*modelOp{},
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
		"":          m.check,
		"do":        m.do,
		"together":  m.together,
		"crash":     m.crash,
		"reopen":    m.reopen,
		"corrupt":   m.corrupt,
		"fsyncfail": m.fsyncFail,
		"compact":   m.compact,
		"advance":   m.advance,
		"edge":      m.edge,
	})
}

func (m *machine) path() string { return filepath.Join(m.dir, fmt.Sprintf("journal.%d", m.gen)) }

// open opens the journal of the current generation and a client on it: a
// new process.
func (m *machine) open(t *rapid.T) {
	t.Helper()
	fault := &filefaults.SyncFault{}
	j, err := filejournal.Open(m.path(), filefaults.WrapFiles(filejournal.Options{
		Now: m.w.clock.Now, Logger: slog.New(slog.DiscardHandler),
	}, func(f fileengine.File) fileengine.File {
		if fi, err := f.Stat(); err == nil {
			m.synced.Store(fi.Size())
		}
		return filefaults.SyncedFile{File: f, Size: &m.synced, Fault: fault}
	}))
	if err != nil {
		t.Fatalf("opening the journal: %v", err)
	}
	c, err := idem.New(idem.Config{
		Journal: j, HTTPClient: &http.Client{Transport: m.net},
		MaxAttempts: 3, InitialWait: time.Microsecond, MaxWait: time.Microsecond,
		AttemptTimeout: modelAttemptTimeout, Dialect: idem.Dialect{Retention: modelTTL},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.j, m.c, m.fault, m.latched = j, c, fault, false
}

// close closes the journal: a process that ends cleanly. A latched journal
// returns its failure.
func (m *machine) close(t *rapid.T) {
	err := m.j.Close()
	switch {
	case m.latched && !errors.Is(err, filefaults.ErrFsync):
		t.Fatalf("closing a journal whose fsync failed: %v; want that failure", err)
	case !m.latched && err != nil:
		t.Fatalf("closing the journal: %v", err)
	}
}

// restarted checks the journal a new process opened against the model. A
// completion may be lost only if lossy (a power cut). An intent whose fsync
// failed may be there or not; if it is, its key is the operation's from
// now on.
func (m *machine) restarted(t *rapid.T, how string, lossy bool) {
	for _, id := range modelOps {
		o := m.ops[id]
		jo, ok := lookup(m.j, id)
		if o.key == "" {
			switch {
			case !ok:
			case !o.unsynced || jo.State != journal.StatePending:
				t.Fatalf("after a %s the journal holds %s as %v with key %s; no Begin of it succeeded", how, id, jo.State, jo.Key)
			case len(m.net.sentUnder(id)) > 0:
				t.Fatalf("after a %s the journal holds the intent of %s whose fsync failed, and it was sent under %v",
					how, id, m.net.sentUnder(id))
			default:
				o.key, o.state, o.created = jo.Key, jo.State, jo.Created
			}
			o.unsynced = false
			continue
		}
		switch {
		case !ok:
			t.Fatalf("after a %s the journal lost %s, whose intent was synced", how, id)
		case jo.Key != o.key:
			t.Fatalf("after a %s the key of %s changed from %s to %s", how, id, o.key, jo.Key)
		case jo.State == journal.StatePending && o.state == journal.StateDone && !lossy:
			t.Fatalf("after a %s the journal lost the completion of %s, which was written", how, id)
		case jo.State == journal.StateDone && o.state != journal.StateDone:
			t.Fatalf("after a %s the journal holds %s as done; it was %v", how, id, o.state)
		}
		o.state = jo.State // a power cut may have lost a completion: the next Do replays
	}
}

func (m *machine) request(t *rapid.T, c *modelCall) *http.Request {
	body := fmt.Sprintf(`{"customer":"cus-%s","amount":%d,"currency":"usd","reference":%q}`, c.id, 100+len(c.id), c.id)
	req, err := http.NewRequestWithContext(callContext{context.Background(), c},
		http.MethodPost, m.w.srv.URL+"/charges", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-ID", m.clientID)
	return req
}

// drawFates draws what the network does to a call's attempts.
func drawFates(t *rapid.T, label string) []fate {
	return rapid.SliceOfN(rapid.SampledFrom([]fate{deliver, loseAnswer, loseBoth}), 0, 3).Draw(t, label)
}

// run makes the calls at once, each in a goroutine of its own, and returns
// when every one has ended.
func (m *machine) run(t *rapid.T, calls []*modelCall) {
	reqs := make([]*http.Request, len(calls))
	for i, c := range calls {
		for _, d := range calls {
			if d != c && d.id == c.id {
				c.mates = append(c.mates, d)
			}
		}
		reqs[i] = m.request(t, c)
	}
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			defer close(c.ended)
			resp, err := m.c.Do(c.id, reqs[i])
			if err == nil {
				c.recorded = idem.Recorded(resp)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			c.err = err
		})
	}
	wg.Wait()
}

// call makes the calls at once and checks each operation's calls against
// the model.
func (m *machine) call(t *rapid.T, calls []*modelCall) {
	now, latched := m.w.clock.Now(), m.latched
	m.run(t, calls)
	byOp := map[string][]*modelCall{}
	for _, c := range calls {
		byOp[c.id] = append(byOp[c.id], c)
	}
	for _, id := range modelOps {
		if cs := byOp[id]; len(cs) > 0 {
			m.settle(t, id, cs, now, latched)
		}
	}
}

// settle checks the calls of one operation, made at once at now, against
// the model's state from before them, and moves the model on. The calls ran
// one after the other in some order: some ended unknown, then at most one
// got the final answer, and the rest were answered from the journal. A
// latched journal cannot record the answer, so there every call sends.
func (m *machine) settle(t *rapid.T, id string, calls []*modelCall, now time.Time, latched bool) {
	o := m.ops[id]
	for _, c := range calls {
		switch {
		case o.refused(now):
			if !errors.Is(c.err, idem.ErrKeyExpired) || len(c.sent) > 0 {
				t.Fatalf("Do of %s, pending with a key %s old: %v after %d attempts; want ErrKeyExpired and nothing sent",
					id, now.Sub(o.created), c.err, len(c.sent))
			}
		case o.state == journal.StateDone:
			if c.err != nil || len(c.sent) > 0 || !c.recorded {
				t.Fatalf("Do of %s, done: %v after %d attempts; want the recorded answer and nothing sent", id, c.err, len(c.sent))
			}
		case o.state == 0 && latched:
			if !errors.Is(c.err, filefaults.ErrFsync) || len(c.sent) > 0 {
				t.Fatalf("Do of %s, not journaled, on a journal whose fsync failed: %v after %d attempts; want that failure and nothing sent",
					id, c.err, len(c.sent))
			}
		}
	}
	if o.refused(now) || o.state == journal.StateDone || o.state == 0 && latched {
		return
	}

	jo, ok := lookup(m.j, id)
	if !ok {
		t.Fatalf("%d Do calls of %s ended, and the journal does not hold it", len(calls), id)
	}
	if o.key != "" && jo.Key != o.key {
		t.Fatalf("the key of %s changed from %s to %s", id, o.key, jo.Key)
	}
	var fresh, answered int
	for _, c := range calls {
		for _, k := range c.sent {
			if k != jo.Key {
				t.Fatalf("an attempt of %s carried key %s, not its journaled key %s", id, k, jo.Key)
			}
		}
		switch {
		case c.err == nil && len(c.sent) == 0:
			if !c.recorded {
				t.Fatalf("Do of %s returned a response and sent nothing, not from the journal", id)
			}
			answered++
		case len(c.sent) == 0:
			t.Fatalf("Do of %s (%v) sent nothing and returned %v", id, o.state, c.err)
		case c.err == nil:
			fresh++
		case !errors.Is(c.err, idem.ErrUnknown):
			t.Fatalf("Do of %s: %v", id, c.err)
		}
	}
	switch {
	case latched && (answered > 0 || jo.State != journal.StatePending):
		t.Fatalf("on a journal whose fsync failed, %d Do calls of %s were answered from it, and it holds %s as %v",
			answered, id, id, jo.State)
	case latched:
	case fresh > 1:
		t.Fatalf("%d Do calls of %s at once got the server's final answer; one must, the others answer from the journal", fresh, id)
	case answered > 0 && fresh == 0:
		t.Fatalf("%d Do calls of %s were answered from the journal, and none got the answer", answered, id)
	case fresh == 1 && jo.State != journal.StateDone, fresh == 0 && jo.State != journal.StatePending:
		t.Fatalf("of the Do calls of %s, %d returned done, and the journal holds it as %v", id, fresh, jo.State)
	}
	o.key, o.state, o.created = jo.Key, jo.State, jo.Created
	o.applied = o.applied || fresh > 0
}

// do runs one Do of a drawn operation through drawn network fates.
func (m *machine) do(t *rapid.T) {
	id := rapid.SampledFrom(modelOps).Draw(t, "op")
	m.call(t, []*modelCall{newModelCall(id, drawFates(t, "fates"))})
}

// together runs Do calls at once: two or three of one operation, and up to
// two of others drawn at random (the same one again, or different ones).
func (m *machine) together(t *rapid.T) {
	id := rapid.SampledFrom(modelOps).Draw(t, "op")
	ids := slices.Repeat([]string{id}, rapid.IntRange(2, 3).Draw(t, "calls"))
	ids = append(ids, rapid.SliceOfN(rapid.SampledFrom(modelOps), 0, 2).Draw(t, "more ops")...)
	var calls []*modelCall
	for i, id := range ids {
		calls = append(calls, newModelCall(id, drawFates(t, fmt.Sprintf("fates %d", i))))
	}
	m.call(t, calls)
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
	m.restarted(t, fmt.Sprintf("crash (power cut %v)", powerCut), powerCut)
}

// reopen closes the journal and opens it again: a clean restart.
func (m *machine) reopen(t *rapid.T) {
	m.close(t)
	m.open(t)
	m.restarted(t, "clean restart", false)
}

// corrupt ends the process cleanly and flips bits of one byte inside a
// record that is not the file's last. Opening the file must fail with a
// *CorruptError at that record and leave the file as it was (J3): a cut
// there would drop operations. The file is then put back, and a new
// process opens it.
func (m *machine) corrupt(t *rapid.T) {
	data, err := os.ReadFile(m.path())
	if err != nil {
		t.Fatal(err)
	}
	if len(modelRecords(t, data)) < 2 {
		t.Skip("fewer than two records")
	}
	m.close(t)
	if data, err = os.ReadFile(m.path()); err != nil {
		t.Fatal(err)
	}
	recs := modelRecords(t, data)
	i := rapid.IntRange(0, len(recs)-2).Draw(t, "record")
	at := rapid.Int64Range(recs[i], recs[i+1]-1).Draw(t, "byte")
	bad := slices.Clone(data)
	bad[at] ^= rapid.ByteRange(1, 255).Draw(t, "flip")
	if err := os.WriteFile(m.path(), bad, 0o600); err != nil {
		t.Fatal(err)
	}

	j, err := filejournal.Open(m.path(), filejournal.Options{
		Now: m.w.clock.Now, Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		n := len(list(j, journal.ListAll))
		j.Close()
		t.Fatalf("the journal opened with byte %d of record %d of %d (at %d) damaged, holding %d operations",
			at, i, len(recs), recs[i], n)
	}
	var ce *filejournal.CorruptError
	if !errors.Is(err, journal.ErrCorrupt) || !errors.As(err, &ce) || ce.Offset != recs[i] {
		t.Fatalf("opening the journal with byte %d of the record at %d damaged: %v; want ErrCorrupt at %d", at, recs[i], err, recs[i])
	}
	if after, err := os.ReadFile(m.path()); err != nil || !bytes.Equal(after, bad) {
		t.Fatalf("opening the damaged journal changed it (%v): %d bytes, were %d", err, len(after), len(bad))
	}

	if err := os.WriteFile(m.path(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	m.open(t)
	m.restarted(t, "restart from the undamaged file", false)
}

// modelRecords returns the offsets of the records of a whole journal file:
// a 16-byte file header, then records of a 16-byte frame around a payload
// whose length the first 4 bytes give, each padded to a multiple of 8.
func modelRecords(t *rapid.T, data []byte) []int64 {
	var offs []int64
	for off := int64(16); off < int64(len(data)); {
		if off+4 > int64(len(data)) {
			t.Fatalf("the journal file ends inside a record header at %d", off)
		}
		offs = append(offs, off)
		off += (16 + int64(binary.LittleEndian.Uint32(data[off:])) + 7) &^ 7
	}
	return offs
}

// fsyncFail makes the journal's next fsync fail and runs a Do of an
// operation the journal does not hold: its Begin meets the failure, so the
// Do must return it and send nothing, and the journal latches (J6).
func (m *machine) fsyncFail(t *rapid.T) {
	var fresh []string
	for _, id := range modelOps {
		if m.ops[id].state == 0 {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) == 0 || m.latched {
		t.Skip("no operation to begin, or the journal has failed already")
	}
	c := newModelCall(rapid.SampledFrom(fresh).Draw(t, "op"), drawFates(t, "fates"))
	m.fault.Armed.Store(true)
	m.run(t, []*modelCall{c})
	if m.fault.Armed.Swap(false) {
		t.Fatalf("Do of %s, not journaled, made no fsync", c.id)
	}
	if !errors.Is(c.err, filefaults.ErrFsync) || len(c.sent) > 0 {
		t.Fatalf("Do of %s whose intent's fsync failed: %v after %d attempts; want that failure and nothing sent",
			c.id, c.err, len(c.sent))
	}
	m.latched = true
	m.ops[c.id].unsynced = true
}

// compact compacts the journal: it must keep every operation, pending
// ones whole and completed ones at least as a summary (their ID, key and
// state), however old, so that no ID is ever sent again under a new key.
// A latched journal refuses.
func (m *machine) compact(t *rapid.T) {
	err := m.j.Compact()
	switch {
	case m.latched:
		if !errors.Is(err, filefaults.ErrFsync) {
			t.Fatalf("compacting a journal whose fsync failed: %v; want that failure", err)
		}
		return
	case err != nil:
		t.Fatalf("compacting: %v", err)
	}
	for _, id := range modelOps {
		o := m.ops[id]
		if o.key == "" {
			continue
		}
		if jo, ok := lookup(m.j, id); !ok || jo.Key != o.key || jo.State != o.state {
			t.Fatalf("after compaction the journal holds %s as %v with key %s (found %v); want %v with key %s",
				id, jo.State, jo.Key, ok, o.state, o.key)
		}
	}
}

// advance moves the clock and lets the server sweep its expired keys.
func (m *machine) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Minute, 20 * time.Minute, modelTTL - time.Minute, modelTTL, 3 * modelTTL}).Draw(t, "advance")
	m.moveClock(t, d)
}

// edge moves the clock to a nanosecond before, at, or a nanosecond after
// the moment a pending operation's key turns modelTTL less
// modelAttemptTimeout old (the last moment an attempt may start) or
// modelTTL old (the journal lists it expired), and runs a Do of it.
func (m *machine) edge(t *rapid.T) {
	var pending []string
	for _, id := range modelOps {
		if m.ops[id].state == journal.StatePending {
			pending = append(pending, id)
		}
	}
	if len(pending) == 0 {
		t.Skip("no pending operation")
	}
	id := rapid.SampledFrom(pending).Draw(t, "op")
	age := rapid.SampledFrom([]time.Duration{modelTTL - modelAttemptTimeout, modelTTL}).Draw(t, "age") +
		rapid.SampledFrom([]time.Duration{-time.Nanosecond, 0, time.Nanosecond}).Draw(t, "by")
	d := m.ops[id].created.Add(age).Sub(m.w.clock.Now())
	if d <= 0 {
		t.Skip("the key is older")
	}
	m.moveClock(t, d)
	m.call(t, []*modelCall{newModelCall(id, drawFates(t, "fates"))})
}

func (m *machine) moveClock(t *rapid.T, d time.Duration) {
	m.w.clock.Advance(d)
	if _, err := m.w.srv.Server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// check holds after every action: what the server holds, what it was sent
// and what the journal lists agree with the model.
func (m *machine) check(t *rapid.T) {
	effects := m.effects(t)
	now := m.w.clock.Now()
	for _, id := range modelOps {
		o, n, keys := m.ops[id], effects[id], m.net.sentUnder(id)
		switch {
		case n > 1:
			t.Fatalf("%s took effect %d times", id, n)
		case (o.applied || o.state == journal.StateDone) && n != 1:
			t.Fatalf("%s got its final answer and has %d effects", id, n)
		case len(keys) > 1:
			t.Fatalf("%s was sent under %d keys: %v", id, len(keys), keys)
		case len(keys) == 1 && keys[0] != o.key:
			t.Fatalf("%s was sent under key %s; the journal holds it durably under %q", id, keys[0], o.key)
		}
		jo, ok := lookup(m.j, id)
		if o.key == "" {
			if ok {
				t.Fatalf("the journal holds %s as %v with key %s; no Begin of it succeeded", id, jo.State, jo.Key)
			}
			continue
		}
		if !ok || jo.Key != o.key || jo.State != o.state {
			t.Fatalf("the journal holds %s as %v with key %s (found %v); the model as %v with key %s",
				id, jo.State, jo.Key, ok, o.state, o.key)
		}
	}
	m.net.mu.Lock()
	twice, conflicts := m.net.twice, m.net.conflicts
	m.net.mu.Unlock()
	switch {
	case len(twice) > 0:
		t.Fatalf("two attempts with key %s were in flight at once", twice[0])
	case len(conflicts) > 0:
		t.Fatalf("the server answered 409 for key %s: another request with it was in flight", conflicts[0])
	}
	if m.latched {
		m.checkLatched(t)
	}

	var wantExpired, wantPending []string
	for _, id := range modelOps {
		if o := m.ops[id]; o.state == journal.StatePending {
			if o.expired(now) {
				wantExpired = append(wantExpired, id)
			} else {
				wantPending = append(wantPending, id)
			}
		}
	}
	if got := opIDs(list(m.j, journal.ListExpired)); !slices.Equal(got, wantExpired) {
		t.Fatalf("Expired() lists %v, want %v", got, wantExpired)
	}
	if got := opIDs(list(m.j, journal.ListPending)); !slices.Equal(got, wantPending) {
		t.Fatalf("Pending() lists %v, want %v", got, wantPending)
	}
}

// checkLatched checks a journal whose fsync failed: every append fails
// with that failure, and no fsync was tried since (J6).
func (m *machine) checkLatched(t *rapid.T) {
	err := journalhelp.Begin(m.j, journal.Operation{ID: "probe", Key: "probe-key"})
	if !errors.Is(err, filefaults.ErrFsync) {
		t.Fatalf("Begin on a journal whose fsync failed: %v; want that failure", err)
	}
	if err := m.j.Sync(); !errors.Is(err, filefaults.ErrFsync) {
		t.Fatalf("Sync on a journal whose fsync failed: %v; want that failure", err)
	}
	if n := m.fault.After.Load(); n > 0 {
		t.Fatalf("the journal tried %d fsyncs after one failed", n)
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
func opIDs(ops []journal.Operation) []string {
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	slices.Sort(ids)
	return ids
}
