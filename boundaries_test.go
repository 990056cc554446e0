package idem_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// RunBatch summary: Total counts every outcome once (Done, Rejected,
// Unknown, Expired, Failed, Skipped) and not Recorded, a part of Done and
// Rejected.
func TestBatchSummaryTotalCountsEveryOutcome(t *testing.T) {
	s := idem.BatchSummary{Done: 1, Rejected: 2, Unknown: 4, Expired: 8, Failed: 16, Recorded: 32, Skipped: 64}
	if got, want := s.Total(), 1+2+4+8+16+64; got != want {
		t.Fatalf("%+v.Total() = %d, want %d", s, got, want)
	}
	for _, s := range []idem.BatchSummary{{Done: 1}, {Rejected: 1}, {Unknown: 1}, {Expired: 1}, {Failed: 1}, {Skipped: 1}} {
		if got := s.Total(); got != 1 {
			t.Errorf("%+v.Total() = %d, want 1", s, got)
		}
	}
}

// C6.1 in a batch: a pending operation whose key is KeyTTL old is counted
// Expired, once, nothing sent; RunBatch counts no operation Skipped when
// none was.
func TestRunBatchCountsAnExpiredOperationOnce(t *testing.T) {
	b := newBatchServer(t, "op-0")
	now := newTestClock()
	c := newClientAt(t, fast(idem.Config{Dialect: idem.Dialect{Retention: time.Hour}, MaxAttempts: 1}), now.Now)
	sum, err := c.RunBatch(context.Background(), b.ops(ids(3)...), idem.BatchOptions{Concurrency: 1})
	if err != nil || sum != (idem.BatchSummary{Done: 2, Unknown: 1}) {
		t.Fatalf("first run: %+v, %v; want 2 done, 1 unknown", sum, err)
	}
	b.mu.Lock()
	b.down = map[string]bool{}
	b.mu.Unlock()
	now.Advance(time.Hour)
	sum, err = c.RunBatch(context.Background(), b.ops(ids(3)...), idem.BatchOptions{Concurrency: 1})
	if err != nil || sum != (idem.BatchSummary{Done: 2, Expired: 1, Recorded: 2}) || sum.Total() != 3 {
		t.Fatalf("second run: %+v (total %d), %v; want 2 done (recorded), 1 expired, total 3", sum, sum.Total(), err)
	}
	if n := len(b.keys["op-0"]); n != 1 {
		t.Fatalf("op-0 was sent %d times, want once: not after its key expired", n)
	}
}

// beganElsewhereJournal is a shared journal on which another machine
// begins operation id between the batch's TryClaim and its Begin, once:
// that Begin returns the *HeldError TryClaim would have (Claim.Begin).
type beganElsewhereJournal struct {
	journal.Journal
	id string

	mu   sync.Mutex
	done bool
}

func (j *beganElsewhereJournal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	claim, err := j.Journal.TryClaim(ctx, id)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil || id != j.id || j.done {
		return claim, err
	}
	j.done = true
	return beganElsewhereClaim{claim}, nil
}

type beganElsewhereClaim struct{ journal.Claim }

func (beganElsewhereClaim) Begin(_ context.Context, op journal.Operation) error {
	return &journal.HeldError{ID: op.ID, Holder: "machine-b"}
}

// F7.2, F7.3: an operation another machine began after the batch's claim
// that does not wait (Begin under TryClaim returns a *HeldError with no
// Err) is set aside like one held at the claim, not failed: the rest runs
// first, and it runs at the end.
func TestABatchSetsAsideAnOperationBegunElsewhereAfterItsClaim(t *testing.T) {
	b := newBatchServer(t)
	j := &beganElsewhereJournal{Journal: openJournal(t, filepath.Join(t.TempDir(), "batch.journal")), id: "op-0"}
	c := newClient(t, fast(idem.Config{Journal: j}))
	var (
		mu    sync.Mutex
		ended []string
		errs  []error
	)
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		mu.Lock()
		ended = append(ended, r.ID)
		errs = append(errs, r.Err)
		mu.Unlock()
	}
	{
		ops := b.ops("op-0", "op-1", "op-2")
		j.id = ops[0].ID
		opts := idem.BatchOptions{Concurrency: 1, Progress: progress}
		var (
			sum idem.BatchSummary
			err error
		)
		sum, err = c.RunBatch(context.Background(), ops, opts)
		if err != nil || sum != (idem.BatchSummary{Done: 3}) {
			t.Fatalf("summary %+v, %v (results' errors %v); want 3 done", sum, err, errs)
		}
		if want := []string{ops[1].ID, ops[2].ID, ops[0].ID}; !slices.Equal(ended, want) {
			t.Fatalf("operations ended in the order %v, want %v (the one begun elsewhere set aside)", ended, want)
		}
		if n := len(b.keys[ops[0].ID]); n != 1 {
			t.Fatalf("%s was sent %d times, want once", ops[0].ID, n)
		}
	}
}

// RunBatch summary: an operation that ends with the batch's context, here
// while its request is built, is counted Skipped, once, as it ends and in
// the summary returned; nothing of it is sent.
func TestAnOperationEndedByTheBatchsContextIsSkipped(t *testing.T) {
	b := newBatchServer(t)
	c := newClient(t, fast(idem.Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ops := b.ops("op-0")
	ops = append(ops, idem.BatchOp{ID: "op-1", Request: func(ctx context.Context) (*http.Request, error) {
		cancel()
		return nil, ctx.Err()
	}})
	var last idem.BatchSummary
	progress := func(_ idem.BatchResult, s idem.BatchSummary) { last = s }
	sum, err := c.RunBatch(ctx, ops, idem.BatchOptions{Concurrency: 1, Progress: progress})
	want := idem.BatchSummary{Done: 1, Skipped: 1}
	if !errors.Is(err, context.Canceled) || sum != want || last != want {
		t.Fatalf("summary %+v (in Progress %+v), %v; want %+v, context.Canceled", sum, last, err, want)
	}
	if len(b.keys) != 1 || len(b.keys["op-1"]) != 0 {
		t.Fatalf("server saw %v, want op-0 only", b.keys)
	}
}

// C3.3: a recorded response whose body was over MaxRecordedBody announces
// no length (ContentLength -1), as its body cannot be read; one recorded
// whole announces its length.
func TestRecordedResponseLength(t *testing.T) {
	s := newScript(t, status(200, strings.Repeat("b", 5000)))
	c := newClient(t, fast(idem.Config{MaxRecordedBody: 1000}))
	for _, tc := range []struct {
		id     string
		body   string
		length int64
	}{
		{"big", strings.Repeat("b", 5000), -1},
		{"small", "ok", 2},
	} {
		if tc.id == "small" {
			s.mu.Lock()
			s.steps = []step{status(200, "ok")}
			s.mu.Unlock()
		}
		resp, err := c.Do(tc.id, post(t, context.Background(), s.srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != tc.body {
			t.Fatalf("%s: read %d bytes, want %d", tc.id, len(got), len(tc.body))
		}
		resp, err = c.Do(tc.id, post(t, context.Background(), s.srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !idem.Recorded(resp) || resp.StatusCode != 200 || resp.ContentLength != tc.length {
			t.Fatalf("%s: recorded response %d, ContentLength %d, recorded %v; want 200, %d, true",
				tc.id, resp.StatusCode, resp.ContentLength, idem.Recorded(resp), tc.length)
		}
	}
}

// Config validation: Jitter may be 1, the most there is (waits over
// [0, 2] times their nominal value), and any negative number but -Inf,
// which New refuses with ErrInvalidConfig.
func TestNewJitterBounds(t *testing.T) {
	for _, jitter := range []float64{1, 0.999, -1, -math.MaxFloat64} {
		if _, err := idem.New(idem.Config{Jitter: jitter}); err != nil {
			t.Errorf("New with Jitter %v: %v, want a Client", jitter, err)
		}
	}
	for _, jitter := range []float64{math.Inf(-1), math.Inf(1), math.Nextafter(1, 2), math.NaN()} {
		if _, err := idem.New(idem.Config{Jitter: jitter}); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("New with Jitter %v: %v, want ErrInvalidConfig", jitter, err)
		}
	}
}

// Config validation: KeyHeader may use every token character, '~' (the
// last one) and '!' (the first) included, and the key goes out under it;
// DEL and space are refused with ErrInvalidConfig.
func TestKeyHeaderTokenCharacters(t *testing.T) {
	var (
		mu  sync.Mutex
		got http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}))
	defer srv.Close()
	for _, name := range []string{"X-Key~", "!X-Key"} {
		c := newClient(t, fast(idem.Config{Dialect: idem.Dialect{KeyHeader: name}}))
		resp, err := c.Do("op-"+name, post(t, context.Background(), srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		key := got.Get(name)
		mu.Unlock()
		if !uuidV4.MatchString(key) {
			t.Fatalf("KeyHeader %q: the request carried %q there, want the key", name, key)
		}
	}
	for _, name := range []string{"X-Key\x7f", "X Key"} {
		if _, err := idem.New(idem.Config{Dialect: idem.Dialect{KeyHeader: name}}); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("New with Dialect.KeyHeader %q: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// Bad input: an operation ID of 4096 bytes, the longest a journal holds,
// is an operation like any other, through the default journal and a file
// journal, answered from the file journal after it is reopened; one of
// 4097 bytes is refused with ErrInvalidRequest and nothing is sent.
func TestAnOperationIDOfTheLongestLengthIsTaken(t *testing.T) {
	s := newScript(t)
	longest := strings.Repeat("i", 4096)
	path := filepath.Join(t.TempDir(), "ops.journal")
	j := openJournal(t, path)
	for _, cfg := range []idem.Config{{}, {Journal: j}} {
		c := newClient(t, fast(cfg))
		if _, err := c.Do(longest+"i", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("an ID of 4097 bytes: %v, want ErrInvalidRequest", err)
		}
		resp, err := c.Do(longest, post(t, context.Background(), s.srv.URL, "x"))
		if err != nil {
			t.Fatalf("an ID of 4096 bytes: %v", err)
		}
		resp.Body.Close()
	}
	j.Close()
	j = openJournal(t, path)
	defer j.Close()
	resp, err := newClient(t, fast(idem.Config{Journal: j})).Do(longest, post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !idem.Recorded(resp) || s.count() != 2 {
		t.Fatalf("after a reopen: recorded %v after %d attempts, want the recorded answer after 2", idem.Recorded(resp), s.count())
	}
}
