package idem_test

// C15: a Client without a journal remembers its operations in this process
// only, in bounded memory, and never sends one it forgot under a new key.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// settableClock is a clock a test moves by hand.
type settableClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *settableClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// C15.3: once a Client without a journal has dropped an operation's
// outcome to make room, a Do of it is refused with ErrOutcomeForgotten and
// nothing is sent, through Do, Do with a Resend option, StandardClient and
// RunBatch.
func TestAForgottenOperationIsRefusedAndNothingSent(t *testing.T) {
	s := newScript(t, status(201, `{"id":"r_1"}`))
	c := newClient(t, fast(idem.Config{}))
	idem.SetOutcomeBudget(c, 0) // each completion drops the outcomes before it
	for _, id := range []string{"first", "second"} {
		resp, err := c.Do(id, post(t, context.Background(), s.srv.URL, id))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resend := idem.WithCallOptions(context.Background(), idem.CallOptions{Resend: func(journal.Operation) bool { return true }})
	forgotten := func(how string, err error) {
		t.Helper()
		if !errors.Is(err, journal.ErrOutcomeForgotten) || !strings.Contains(err.Error(), "without a journal") {
			t.Fatalf("%s: %v, want ErrOutcomeForgotten saying a Client without a journal forgets", how, err)
		}
	}
	_, err := c.Do("first", post(t, context.Background(), s.srv.URL, "first"))
	forgotten("Do", err)
	_, err = c.Do("first", post(t, resend, s.srv.URL, "first"))
	forgotten("Do with Resend", err)
	_, err = c.StandardClient().Do(post(t, idem.WithOperation(context.Background(), "first"), s.srv.URL, "first"))
	forgotten("StandardClient", err)
	summary, err := c.RunBatch(context.Background(), []idem.BatchOp{{ID: "first", Request: func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("first"))
	}}}, idem.BatchOptions{Progress: func(r idem.BatchResult, _ idem.BatchSummary) { forgotten("RunBatch", r.Err) }})
	if err != nil || summary.Failed != 1 {
		t.Fatalf("RunBatch: %+v, %v; want one failed operation", summary, err)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("the server saw %d attempts, want 2: a forgotten operation was sent again", n)
	}
}

// C15.4: a Client without a journal that remembers MaxOperations
// operations (here one kept whole and one a digest) refuses a new one
// with ErrTooManyOperations and sends nothing, and still answers those it
// remembers; once KeyTTL has passed since they completed (and the end of
// their eighth of it), it forgets them and takes new operations again.
func TestTooManyOperationsAreRefusedUntilKeyTTLPasses(t *testing.T) {
	s := newScript(t, status(201, "created"))
	clock := &settableClock{t: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	c := newClientAt(t, fast(idem.Config{MaxOperations: 2, Dialect: idem.Dialect{Retention: 8 * time.Hour}}), clock.now)
	idem.SetOutcomeBudget(c, 0)
	do := func(id string) (*http.Response, error) {
		return c.Do(id, post(t, context.Background(), s.srv.URL, id))
	}
	for _, id := range []string{"a", "b"} {
		resp, err := do(id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	_, err := do("c")
	if !errors.Is(err, idem.ErrTooManyOperations) || !strings.Contains(err.Error(), "at most 2 operations") {
		t.Fatalf("a third operation: %v, want ErrTooManyOperations naming the bound", err)
	}
	resp, err := do("b") // remembered whole: answered
	if err != nil || !idem.Recorded(resp) {
		t.Fatalf("the operation kept whole: %v, want its recorded outcome", err)
	}
	resp.Body.Close()
	if _, err := do("a"); !errors.Is(err, journal.ErrOutcomeForgotten) {
		t.Fatalf("the operation kept as a digest: %v, want ErrOutcomeForgotten", err)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("the server saw %d attempts, want 2", n)
	}

	// They completed in the slice [3:00, 4:00): forgotten at 12:00.
	clock.add(9*time.Hour - time.Nanosecond)
	if _, err := do("c"); !errors.Is(err, idem.ErrTooManyOperations) {
		t.Fatalf("a nanosecond before they are forgotten: %v, want ErrTooManyOperations", err)
	}
	clock.add(time.Nanosecond)
	for _, id := range []string{"c", "a"} {
		resp, err := do(id)
		if err != nil {
			t.Fatalf("%s once KeyTTL passed: %v", id, err)
		}
		resp.Body.Close()
	}
	seen := s.attempts()
	if len(seen) != 4 || seen[3].Key == seen[0].Key {
		t.Fatalf("the server saw %d attempts, want 4, the last a's under a new key: %+v", len(seen), seen)
	}
}

// C15.1, C15.2: however small the bounds, a pending operation, its outcome
// unknown, is never dropped: the next Do resends it under its key; and the
// latest completed outcome is answered without a request.
func TestPendingOperationsAreNeverDroppedAndRecentOutcomesReplay(t *testing.T) {
	s := newScript(t, status(503, "busy"), status(201, "created"))
	c := newClient(t, fast(idem.Config{MaxAttempts: 1, MaxOperations: 3}))
	idem.SetOutcomeBudget(c, 0)
	if _, err := c.Do("unknown", post(t, context.Background(), s.srv.URL, "unknown")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("the first operation: %v, want ErrUnknown", err)
	}
	for _, id := range []string{"a", "b"} {
		resp, err := c.Do(id, post(t, context.Background(), s.srv.URL, id))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := c.Do("c", post(t, context.Background(), s.srv.URL, "c")); !errors.Is(err, idem.ErrTooManyOperations) {
		t.Fatalf("a fourth operation: %v, want ErrTooManyOperations: the pending one counts", err)
	}
	resp, err := c.Do("b", post(t, context.Background(), s.srv.URL, "b"))
	if err != nil || !idem.Recorded(resp) || readAll(t, resp) != "created" {
		t.Fatalf("the latest completed operation: %v, want its recorded outcome", err)
	}
	resp, err = c.Do("unknown", post(t, context.Background(), s.srv.URL, "unknown"))
	if err != nil {
		t.Fatalf("the pending operation: %v, want it resent", err)
	}
	resp.Body.Close()
	seen := s.attempts()
	if len(seen) != 4 || seen[3].Key != seen[0].Key || string(seen[3].Body) != "unknown" {
		t.Fatalf("the server saw %+v; want 4 attempts, the last the pending operation's under its first key", seen)
	}
}

// C15.6: concurrent Do of a few IDs through a Client without a journal
// that keeps one outcome at most: each ID is sent once, and every other
// Do of it is answered from memory or refused as forgotten, never sent
// again.
func TestConcurrentOperationsWithinTheBoundsAreSentOnce(t *testing.T) {
	var mu sync.Mutex
	sent := map[string]int{}
	s := newScript(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	c := newClient(t, fast(idem.Config{}))
	idem.SetOutcomeBudget(c, 300) // one small outcome at most
	const ids, callers, rounds = 10, 8, 20
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range rounds {
				id := fmt.Sprint("op-", (g+i)%ids)
				resp, err := c.Do(id, post(t, context.Background(), s.srv.URL+"/"+id, id))
				switch {
				case err == nil:
					resp.Body.Close()
				case !errors.Is(err, journal.ErrOutcomeForgotten):
					t.Errorf("Do(%s): %v, want an answer or ErrOutcomeForgotten", id, err)
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != ids {
		t.Errorf("%d operations sent, want %d", len(sent), ids)
	}
	for path, n := range sent {
		if n != 1 {
			t.Errorf("%s was sent %d times, want once", path, n)
		}
	}
}
