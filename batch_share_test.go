package idem_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// TestABatchTakesOtherWorkFirst is F7.2, F7.3 and F7.4: an operation
// another Do holds when the batch reaches it is set aside, the rest run
// first (with one worker, a batch that waited for it would never reach
// them), and it comes back at the end, waited for within the context;
// that Do completed it meanwhile, so it is counted as done and Recorded.
func TestABatchTakesOtherWorkFirst(t *testing.T) {
	{
		t.Run("RunBatch", func(t *testing.T) {
			b := newBatchServer(t)
			j := openJournal(t, filepath.Join(t.TempDir(), "batch.journal"))
			c := newClient(t, fast(idem.Config{Journal: j}))
			// A batch that waited for op-0 would end with this context.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// Another Do holds op-0 and has begun it.
			held, err := j.Claim(ctx, "op-0")
			if err != nil {
				t.Fatal(err)
			}
			url := b.srv.URL + "/charges/op-0"
			op := journal.Operation{ID: "op-0", Key: "11111111-1111-4111-8111-111111111111", KeyTTL: 24 * time.Hour, State: journal.StatePending,
				Method: "POST", URL: url, Fingerprint: journal.FingerprintOf("POST", url, []byte("op-0"))}
			if err := held.Begin(ctx, op); err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				order []string
			)
			progress := func(r idem.BatchResult, s idem.BatchSummary) {
				mu.Lock()
				order = append(order, r.ID)
				mu.Unlock()
				if s.Total() == 4 { // every other operation ended: the holder finishes
					op.State, op.Status, op.Completed = journal.StateDone, 201, time.Now()
					if err := held.Complete(ctx, op); err != nil {
						t.Error(err)
					}
					held.Release()
				}
			}
			opts := idem.BatchOptions{Concurrency: 1, Progress: progress}
			var sum idem.BatchSummary
			sum, err = c.RunBatch(ctx, b.ops(ids(5)...), opts)
			if err != nil || sum != (idem.BatchSummary{Done: 5, Recorded: 1}) {
				t.Fatalf("summary %+v, %v; want 5 done, 1 of them recorded", sum, err)
			}
			if want := []string{"op-1", "op-2", "op-3", "op-4", "op-0"}; !slices.Equal(order, want) {
				t.Fatalf("operations ended in the order %v, want %v", order, want)
			}
			if n := len(b.keys["op-0"]); n != 0 {
				t.Fatalf("op-0, completed by its holder, was sent %d times by the batch", n)
			}
		})
	}
}

// waitingJournal tells, on waiting, that a Claim (the waiting kind) has
// started.
type waitingJournal struct {
	journal.Journal
	waiting chan string
}

func (j waitingJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	j.waiting <- id
	return j.Journal.Claim(ctx, id)
}

// TestABatchWaitsForAHeldOperationWithinItsContext is F7.3: an operation
// still held when the rest is done is waited for, and only within the
// batch's context; when it ends, the operation is Skipped, not lost: its
// holder still has it.
func TestABatchWaitsForAHeldOperationWithinItsContext(t *testing.T) {
	b := newBatchServer(t)
	fj := openJournal(t, filepath.Join(t.TempDir(), "batch.journal"))
	j := waitingJournal{fj, make(chan string, 1)}
	c := newClient(t, fast(idem.Config{Journal: j}))
	held, err := fj.Claim(context.Background(), "op-0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if id := <-j.waiting; id != "op-0" {
			t.Errorf("the batch waited for %s, want op-0", id)
		}
		cancel()
	}()
	var ended []string
	progress := func(r idem.BatchResult, s idem.BatchSummary) { ended = append(ended, r.ID) }
	sum, err := c.RunBatch(ctx, b.ops(ids(3)...), idem.BatchOptions{Concurrency: 1, Progress: progress})
	if !errors.Is(err, context.Canceled) || sum != (idem.BatchSummary{Done: 2, Skipped: 1}) {
		t.Fatalf("summary %+v, %v; want 2 done, 1 skipped, context.Canceled", sum, err)
	}
	if want := []string{"op-1", "op-2", "op-0"}; !slices.Equal(ended, want) {
		t.Fatalf("operations ended in the order %v, want %v (op-0 waited for last)", ended, want)
	}
}

// unreachableJournal is a journal whose database does not answer in time:
// every claim fails with journal.ErrUnavailable wrapping the statement's
// context.DeadlineExceeded.
type unreachableJournal struct{ journal.Journal }

var errUnreachable = fmt.Errorf("%w: %w", journal.ErrUnavailable, context.DeadlineExceeded)

func (unreachableJournal) Claim(context.Context, string) (journal.Claim, error) {
	return nil, errUnreachable
}

func (unreachableJournal) TryClaim(context.Context, string) (journal.Claim, error) {
	return nil, errUnreachable
}

// TestAnUnavailableJournalIsNotSkipped: a journal that times out while the
// batch's context is fine fails its operations once the batch stops
// waiting for it (at once here, MaxJournalOutage negative); Skipped is
// only for an ended context.
func TestAnUnavailableJournalIsNotSkipped(t *testing.T) {
	b := newBatchServer(t)
	j := unreachableJournal{openJournal(t, filepath.Join(t.TempDir(), "batch.journal"))}
	c := newClient(t, fast(idem.Config{Journal: j}))
	sum, err := c.RunBatch(context.Background(), b.ops(ids(4)...), idem.BatchOptions{Concurrency: 2, MaxJournalOutage: -1})
	if err != nil || sum != (idem.BatchSummary{Failed: 4}) {
		t.Fatalf("summary %+v, %v; want 4 failed, none skipped", sum, err)
	}
	if len(b.keys) != 0 {
		t.Fatalf("the server got %d operations from a batch whose journal was down", len(b.keys))
	}
}
