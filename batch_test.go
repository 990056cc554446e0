package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

// batchServer answers POST /charges/<id>: 503 for the IDs in down, 201
// with the ID as body otherwise; it records the keys each ID came with.
type batchServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	down map[string]bool
	keys map[string][]string
}

func newBatchServer(t *testing.T, down ...string) *batchServer {
	b := &batchServer{down: map[string]bool{}, keys: map[string][]string{}}
	for _, id := range down {
		b.down[id] = true
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/charges/")
		b.mu.Lock()
		defer b.mu.Unlock()
		b.keys[id] = append(b.keys[id], r.Header.Get("Idempotency-Key"))
		if b.down[id] {
			w.WriteHeader(503)
			return
		}
		if id == "bad" {
			w.WriteHeader(400)
			fmt.Fprint(w, "no such customer")
			return
		}
		w.WriteHeader(201)
		fmt.Fprint(w, id)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *batchServer) ops(ids ...string) []idem.BatchOp {
	var ops []idem.BatchOp
	for _, id := range ids {
		ops = append(ops, idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/charges/"+id, strings.NewReader(id))
		}})
	}
	return ops
}

func ids(n int) []string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprint("op-", i))
	}
	return s
}

// A batch interrupted by failures resumes: completed operations are not
// sent again, pending ones go first, under their original keys.
func TestRunBatchResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "batch.journal")
	b := newBatchServer(t, "op-3", "op-7")
	all := append(ids(10), "bad")

	j := openJournal(t, path)
	c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
	var results []idem.BatchResult
	sum, err := c.RunBatch(context.Background(), b.ops(all...), idem.BatchOptions{Concurrency: 4,
		Progress: func(r idem.BatchResult, _ idem.BatchSummary) { results = append(results, r) }})
	if err != nil {
		t.Fatal(err)
	}
	want := idem.BatchSummary{Done: 8, Rejected: 1, Unknown: 2}
	if sum != want || len(results) != 11 {
		t.Fatalf("first run: %+v with %d results, want %+v", sum, len(results), want)
	}
	j.Close()

	b.mu.Lock()
	b.down = map[string]bool{}
	b.mu.Unlock()
	j = openJournal(t, path)
	defer j.Close()
	c = newClient(t, fast(idem.Config{Journal: j}))
	results = nil
	sum, err = c.RunBatch(context.Background(), b.ops(all...), idem.BatchOptions{Concurrency: 1,
		Progress: func(r idem.BatchResult, _ idem.BatchSummary) { results = append(results, r) }})
	if err != nil {
		t.Fatal(err)
	}
	want = idem.BatchSummary{Done: 10, Rejected: 1, Recorded: 9}
	if sum != want {
		t.Fatalf("second run: %+v, want %+v", sum, want)
	}
	if results[0].ID != "op-3" || results[1].ID != "op-7" || results[0].Recorded || string(results[0].Body) != "op-3" {
		t.Fatalf("second run began with %+v, %+v; want the pending op-3 and op-7 sent", results[0], results[1])
	}
	for _, r := range results[2:] {
		if !r.Recorded {
			t.Fatalf("%s was sent again", r.ID)
		}
	}
	if r := results[len(results)-1]; r.ID != "bad" || r.Outcome != idem.OutcomeRejected || r.Status != 400 || string(r.Body) != "no such customer" {
		t.Fatalf("recorded rejection: %+v", r)
	}
	for id, keys := range b.keys {
		want := 1
		if id == "op-3" || id == "op-7" {
			want = 2
		}
		if len(keys) != want || keys[0] != keys[len(keys)-1] {
			t.Fatalf("%s: keys %v, want %d attempt(s) under one key", id, keys, want)
		}
	}
}

// Cancelling a batch stops it cleanly: nothing starts after, and the rest
// runs on the next call.
func TestRunBatchCancel(t *testing.T) {
	b := newBatchServer(t)
	c := newClient(t, fast(idem.Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	sum, err := c.RunBatch(ctx, b.ops(ids(10)...), idem.BatchOptions{Concurrency: 1,
		Progress: func(r idem.BatchResult, s idem.BatchSummary) {
			if s.Done == 3 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || sum != (idem.BatchSummary{Done: 3, Skipped: 7}) {
		t.Fatalf("got %+v, %v; want 3 done, 7 skipped, context.Canceled", sum, err)
	}
	if n := len(b.keys); n != 3 {
		t.Fatalf("server saw %d operations, want 3", n)
	}
	sum, err = c.RunBatch(context.Background(), b.ops(ids(10)...), idem.BatchOptions{})
	if err != nil || sum != (idem.BatchSummary{Done: 10, Recorded: 3}) {
		t.Fatalf("rerun: %+v, %v", sum, err)
	}
}

// An invalid batch is refused before anything runs.
func TestRunBatchInvalid(t *testing.T) {
	b := newBatchServer(t)
	c := newClient(t, idem.Config{})
	for _, ops := range [][]idem.BatchOp{
		b.ops("a", "a"),
		b.ops(""),
		{{ID: "x"}},
	} {
		if _, err := c.RunBatch(context.Background(), ops, idem.BatchOptions{}); !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("err = %v, want ErrInvalidRequest", err)
		}
	}
	if len(b.keys) != 0 {
		t.Fatal("an invalid batch sent requests")
	}
}

// C5 in a batch: an operation the journal holds as completed, re-run with
// another request, is refused as Do refuses it (ErrMismatch, counted as
// Failed), not answered with the old outcome for new data; the same
// request is answered from the journal. A done and a rejected operation
// alike, nothing sent.
func TestRunBatchRefusesAChangedRequestForACompletedOperation(t *testing.T) {
	b := newBatchServer(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "batch.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j}))
	batch := func(body string) []idem.BatchOp {
		var ops []idem.BatchOp
		for _, id := range []string{"op-1", "bad"} {
			ops = append(ops, idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/charges/"+id, strings.NewReader(id+body))
			}})
		}
		return ops
	}
	run := func(body string) (idem.BatchSummary, map[string]idem.BatchResult) {
		results := map[string]idem.BatchResult{}
		sum, err := c.RunBatch(context.Background(), batch(body), idem.BatchOptions{Progress: func(r idem.BatchResult, _ idem.BatchSummary) {
			results[r.ID] = r
		}})
		if err != nil {
			t.Fatal(err)
		}
		return sum, results
	}
	if sum, _ := run(" amount=100"); sum != (idem.BatchSummary{Done: 1, Rejected: 1}) {
		t.Fatalf("first run: %+v, want one done and one rejected", sum)
	}
	sum, results := run(" amount=999")
	if sum != (idem.BatchSummary{Failed: 2}) {
		t.Fatalf("re-run with changed requests: %+v, want both failed", sum)
	}
	for _, id := range []string{"op-1", "bad"} {
		if r := results[id]; !errors.Is(r.Err, idem.ErrMismatch) || r.Outcome != 0 || r.Recorded || r.Body != nil {
			t.Errorf("%s: %+v, want ErrMismatch and no outcome", id, r)
		}
	}
	sum, results = run(" amount=100")
	if sum != (idem.BatchSummary{Done: 1, Rejected: 1, Recorded: 2}) {
		t.Fatalf("re-run with the same requests: %+v, want both answered from the journal", sum)
	}
	if r := results["op-1"]; r.Status != 201 || string(r.Body) != "op-1" || !r.Recorded || r.Err != nil {
		t.Errorf("op-1 answered from the journal: %+v, want 201 op-1", r)
	}
	if r := results["bad"]; r.Status != 400 || string(r.Body) != "no such customer" || !r.Recorded || !errors.Is(r.Err, idem.ErrRejected) {
		t.Errorf("bad answered from the journal: %+v, want the recorded 400", r)
	}
	if n := len(b.keys["op-1"]) + len(b.keys["bad"]); n != 2 {
		t.Fatalf("server saw %d requests, want 2: one each in the first run", n)
	}
}

// RunBatch summary: an operation that fails for a reason of its own while
// the batch's context ends (here its request cannot be built) is Failed,
// with its error, not Skipped: the next run would not fix it.
func TestAnOperationFailingAsTheBatchsContextEndsIsFailed(t *testing.T) {
	b := newBatchServer(t)
	c := newClient(t, fast(idem.Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	noCustomer := errors.New("no such customer in the export")
	ops := append(b.ops("op-0"), idem.BatchOp{ID: "op-1", Request: func(context.Context) (*http.Request, error) {
		cancel()
		return nil, noCustomer
	}})
	var results []idem.BatchResult
	progress := func(r idem.BatchResult, _ idem.BatchSummary) { results = append(results, r) }
	sum, err := c.RunBatch(ctx, ops, idem.BatchOptions{Concurrency: 1, Progress: progress})
	if want := (idem.BatchSummary{Done: 1, Failed: 1}); !errors.Is(err, context.Canceled) || sum != want {
		t.Fatalf("summary %+v, %v; want %+v, context.Canceled", sum, err, want)
	}
	if len(results) != 2 || results[1].ID != "op-1" || !errors.Is(results[1].Err, noCustomer) {
		t.Fatalf("results %+v; want op-1 last, with its own error", results)
	}
}
