package idem_test

// F13: a batch rides through a journal outage.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// outageJournal is a journal whose database is out while down says so
// for the call ("list" or "claim"): the call fails with
// journal.ErrUnavailable, and refused counts it. The first claim of each
// ID in lose is lost when its channel closes.
type outageJournal struct {
	journal.Journal
	down    func(call string) bool
	refused atomic.Int64

	mu   sync.Mutex
	lose map[string]chan struct{} // nil once a claim took it
}

func newOutageJournal(t *testing.T, down func(call string) bool) *outageJournal {
	return &outageJournal{Journal: openJournal(t, filepath.Join(t.TempDir(), "batch.journal")), down: down}
}

func (j *outageJournal) refuse(call string) error {
	if j.down(call) {
		j.refused.Add(1)
		return errUnreachable
	}
	return nil
}

func (j *outageJournal) List(ctx context.Context, which journal.Listing) ([]journal.Operation, error) {
	if err := j.refuse("list"); err != nil {
		return nil, err
	}
	return j.Journal.List(ctx, which)
}

func (j *outageJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	if err := j.refuse("claim"); err != nil {
		return nil, err
	}
	c, err := j.Journal.Claim(ctx, id)
	return j.wrap(id, c), err
}

func (j *outageJournal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	if err := j.refuse("claim"); err != nil {
		return nil, err
	}
	c, err := j.Journal.TryClaim(ctx, id)
	return j.wrap(id, c), err
}

// wrap returns c, or, for the first claim of an ID in lose, c lost when
// the ID's channel closes.
func (j *outageJournal) wrap(id string, c journal.Claim) journal.Claim {
	j.mu.Lock()
	defer j.mu.Unlock()
	lost := j.lose[id]
	if c == nil || lost == nil {
		return c
	}
	j.lose[id] = nil
	return losingClaim{c, lost}
}

// losingClaim is a claim lost when its channel closes.
type losingClaim struct {
	journal.Claim
	lost chan struct{}
}

func (c losingClaim) Lost() <-chan struct{} { return c.lost }

// TestF13ABatchRidesThroughAJournalOutage is F13.1 and F13.2: a batch
// whose journal is out from its start (its listing too) waits for it,
// trying each operation again, and once the journal answers every
// operation is done in the same pass, sent once; none failed. A Do
// outside a batch fails at once with journal.ErrUnavailable.
func TestF13ABatchRidesThroughAJournalOutage(t *testing.T) {
	b := newBatchServer(t)
	var lists, claims atomic.Int64 // back after 2 listings and 16 claims
	j := newOutageJournal(t, func(call string) bool {
		if call == "list" {
			return lists.Add(1) <= 2
		}
		return claims.Add(1) <= 16
	})
	c := newClient(t, fast(idem.Config{Journal: j}))

	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/charges/alone", strings.NewReader("alone"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("alone", req); !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("Do while the journal is out: %v, want journal.ErrUnavailable at once", err)
	}
	var failed []idem.BatchResult
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		if r.Err != nil {
			failed = append(failed, r)
		}
	}
	sum, err := c.RunBatch(context.Background(), b.ops(ids(20)...), idem.BatchOptions{Concurrency: 4, Progress: progress})
	if err != nil || sum != (idem.BatchSummary{Done: 20}) {
		t.Fatalf("summary %+v, %v (failed %+v); want 20 done", sum, err, failed)
	}
	if n := j.refused.Load(); n != 18 {
		t.Fatalf("the journal refused %d calls, want 18", n)
	}
	for _, id := range ids(20) {
		if len(b.keys[id]) != 1 {
			t.Errorf("operation %s sent %d times", id, len(b.keys[id]))
		}
	}
}

// TestF13TheOutageIsBoundedForTheWholeBatch is F13.3: a journal out for
// longer than MaxJournalOutage fails the operations then, and the bound
// is the batch's, not each operation's: once it has passed, every
// operation still to run is tried once. A negative bound tries each
// once, as Do does; so is the listing of pending operations, which
// fails the batch with journal.ErrUnavailable.
func TestF13TheOutageIsBoundedForTheWholeBatch(t *testing.T) {
	b := newBatchServer(t)
	for _, bound := range []time.Duration{-1, time.Second} {
		j := newOutageJournal(t, func(call string) bool { return call == "claim" })
		c := newClient(t, fast(idem.Config{Journal: j}))
		sum, err := c.RunBatch(context.Background(), b.ops(ids(40)...), idem.BatchOptions{Concurrency: 2, MaxJournalOutage: bound})
		if err != nil || sum != (idem.BatchSummary{Failed: 40}) {
			t.Fatalf("bound %v: summary %+v, %v; want 40 failed", bound, sum, err)
		}
		// The pauses are at least 50, 75, 112, 168, 253 and 380ms (100ms
		// growing by half, jittered by half): within 1s each of the 2
		// workers tries again at most 5 times, and once more past it.
		n := j.refused.Load()
		if bound < 0 && n != 40 || bound > 0 && (n <= 40 || n > 40+2*6) {
			t.Fatalf("bound %v: the claims were refused %d times for 40 operations", bound, n)
		}

		j = newOutageJournal(t, func(string) bool { return true })
		c = newClient(t, fast(idem.Config{Journal: j}))
		sum, err = c.RunBatch(context.Background(), b.ops(ids(4)...), idem.BatchOptions{MaxJournalOutage: bound})
		if !errors.Is(err, journal.ErrUnavailable) || sum != (idem.BatchSummary{}) {
			t.Fatalf("bound %v, the listing refused: summary %+v, %v; want journal.ErrUnavailable", bound, sum, err)
		}
		if n := j.refused.Load(); bound < 0 && n != 1 || bound > 0 && (n < 2 || n > 1+6) {
			t.Fatalf("bound %v: the listing was refused %d times", bound, n)
		}
	}
	if len(b.keys) != 0 {
		t.Fatalf("the server got %d operations from batches whose journal was out", len(b.keys))
	}
}

// TestF13AClaimLostInAnOutageResumesUnderItsKey is F13.4: an operation
// whose claim is lost between two attempts ends unknown in a Do; in a
// batch it runs again in the same pass, under its key, and is done.
func TestF13AClaimLostInAnOutageResumesUnderItsKey(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	lost := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if len(keys) == 1 {
			close(lost) // the journal lost the claim during the attempt
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	j := newOutageJournal(t, func(string) bool { return false })
	j.lose = map[string]chan struct{}{"charge": lost}
	c := newClient(t, fast(idem.Config{Journal: j}))
	op := idem.BatchOp{ID: "charge", Request: func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	}}
	sum, err := c.RunBatch(context.Background(), []idem.BatchOp{op}, idem.BatchOptions{})
	if err != nil || sum != (idem.BatchSummary{Done: 1}) {
		t.Fatalf("summary %+v, %v; want the operation done in the same pass", sum, err)
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("attempts carried the keys %q, want two under one key", keys)
	}
}

// TestF13AContextEndingInAnOutageSkipsWhatWaited is F13.5: the batch's
// context ending while the journal is out ends the wait, and the
// operations that waited are Skipped, not Failed, their errors naming
// the outage: the next run sends them.
func TestF13AContextEndingInAnOutageSkipsWhatWaited(t *testing.T) {
	b := newBatchServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var j *outageJournal
	j = newOutageJournal(t, func(call string) bool {
		if j.refused.Load() == 6 {
			cancel()
		}
		return call == "claim"
	})
	c := newClient(t, fast(idem.Config{Journal: j}))
	var results []idem.BatchResult
	progress := func(r idem.BatchResult, _ idem.BatchSummary) { results = append(results, r) }
	sum, err := c.RunBatch(ctx, b.ops(ids(10)...), idem.BatchOptions{Concurrency: 2, Progress: progress})
	if !errors.Is(err, context.Canceled) || sum != (idem.BatchSummary{Skipped: 10}) {
		t.Fatalf("summary %+v, %v; want 10 skipped, context.Canceled", sum, err)
	}
	named := 0
	for _, r := range results {
		if !errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, journal.ErrUnavailable) {
			t.Errorf("%s: %v, want the context's end", r.ID, r.Err)
		}
		if strings.Contains(r.Err.Error(), "while the journal did not answer") {
			named++
		}
	}
	if named == 0 { // the one whose claim was refused as the context ended, at least
		t.Errorf("no result names the journal's outage (results %+v)", results)
	}
}
