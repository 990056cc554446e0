package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// memoryClock is a settable clock for the memory journal's tests.
type memoryClock struct{ t time.Time }

func (c *memoryClock) now() time.Time { return c.t }

func memoryBegin(t *testing.T, j *memoryJournal, id string, created time.Time) journal.Operation {
	t.Helper()
	c, err := j.Claim(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	op := journal.Operation{ID: id, Key: "key-" + id, Method: http.MethodPost, URL: "https://api.example/x", Created: created, KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	return op
}

func memoryComplete(t *testing.T, j *memoryJournal, op journal.Operation, completed time.Time) {
	t.Helper()
	c, err := j.Claim(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	op.State, op.Status, op.Completed = journal.StateDone, 201, completed
	if err := c.Complete(context.Background(), op); err != nil {
		t.Fatal(err)
	}
}

// C15.5: a completed operation, kept whole or as a digest, is forgotten
// KeyTTL after the end of the time slice (an eighth of KeyTTL) it
// completed in, and not a nanosecond before; a pending operation is never
// forgotten, however old.
func TestMemoryJournalForgetsACompletedOperationKeyTTLAfterItsSlice(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	const ttl = 8 * time.Hour // slices of an hour, starting on the hour
	j := newMemoryJournalFor(ttl, clock.now, defaultMaxOperations)
	start := clock.t
	clock.t = start.Add(30 * time.Minute)
	memoryComplete(t, j, memoryBegin(t, j, "digest", clock.t), clock.t)
	j.budget = 0 // the next completion drops the outcome of the one before
	memoryComplete(t, j, memoryBegin(t, j, "kept", clock.t), clock.t)
	j.budget = memoryOutcomeBudget
	memoryBegin(t, j, "pending", start)
	if got := []int{j.pending, j.store.live, j.digests.n}; !slices.Equal(got, []int{1, 1, 1}) {
		t.Fatalf("%v pending, kept whole, digests; want [1 1 1]", got)
	}

	// The slice ends at start+1h: everything completed in it is forgotten
	// at start+1h+KeyTTL.
	clock.t = start.Add(time.Hour + ttl - time.Nanosecond)
	if _, ok, err := j.Lookup(context.Background(), "kept"); !ok || err != nil {
		t.Fatalf("Lookup a nanosecond before: %v, %v; want the operation", ok, err)
	}
	if _, _, err := j.Lookup(context.Background(), "digest"); !errors.Is(err, journal.ErrOutcomeForgotten) {
		t.Fatalf("Lookup of a digest a nanosecond before: %v, want ErrOutcomeForgotten", err)
	}
	clock.t = clock.t.Add(time.Nanosecond)
	for _, id := range []string{"kept", "digest"} {
		if op, ok, err := j.Lookup(context.Background(), id); ok || err != nil {
			t.Fatalf("Lookup of %s KeyTTL after its slice: %+v, %v, %v; want nothing", id, op, ok, err)
		}
	}
	if op, ok, _ := j.Lookup(context.Background(), "pending"); !ok || op.State != journal.StatePending {
		t.Fatalf("the pending operation reads %+v, %v; want it kept", op, ok)
	}
	if got := []int{j.pending, j.store.live, j.digests.n, j.store.bytes, len(j.store.chunks)}; !slices.Equal(got, []int{1, 0, 0, 0, 0}) {
		t.Fatalf("%v pending, kept whole, digests, bytes, chunks; want [1 0 0 0 0]", got)
	}
	memoryBegin(t, j, "digest", clock.t) // a new operation now
}

func TestMemoryJournalKeepsItsOwnCopyOfAnOutcome(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	op := memoryBegin(t, j, "op", time.Now())
	c, _ := j.Claim(context.Background(), "op")
	header := http.Header{"Content-Type": {"application/json"}, "Empty": {}}
	body := []byte(`{"ok":true}`)
	op.State, op.Status, op.Header, op.Body = journal.StateDone, 201, header, body
	if err := c.Complete(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	c.Release()
	header.Set("Content-Type", "text/plain")
	body[0] = 'X'

	got, _, _ := j.Lookup(context.Background(), "op")
	// The empty field reads back as a file journal reads it: named, no values.
	if len(got.Header) != 2 || got.Header["Empty"] != nil || got.Header.Get("Content-Type") != "application/json" || string(got.Body) != `{"ok":true}` {
		t.Fatalf("read back header %v and body %q, want the ones completed", got.Header, got.Body)
	}
	got.Header.Set("Content-Type", "changed")
	got.Body[0] = 'Y'
	again, _, _ := j.Lookup(context.Background(), "op")
	if again.Header.Get("Content-Type") != "application/json" || !bytes.Equal(again.Body, []byte(`{"ok":true}`)) {
		t.Fatalf("changing what Lookup returned changed the record: %v %q", again.Header, again.Body)
	}
	if got.Created.Location() != time.UTC || got.Created != got.Created.Round(0) {
		t.Fatalf("created %v is not in UTC without a monotonic reading", got.Created)
	}
}

func TestMemoryJournalRefusesWhatAFileJournalCannotHold(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	c, _ := j.Claim(context.Background(), "op")
	defer c.Release()
	big := journal.Operation{ID: "op", Key: "k", Method: http.MethodPost, URL: strings.Repeat("u", memoryMaxRecord), KeyTTL: time.Hour}
	if err := c.Begin(context.Background(), big); !errors.Is(err, journal.ErrInvalidOperation) {
		t.Fatalf("Begin of an intent over the record limit: %v, want ErrInvalidOperation", err)
	}
	op := journal.Operation{ID: "op", Key: "k", Method: http.MethodPost, URL: "https://api.example/x", KeyTTL: time.Hour}
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Body = journal.StateDone, make([]byte, memoryMaxRecord)
	if err := c.Complete(context.Background(), op); !errors.Is(err, journal.ErrInvalidOperation) {
		t.Fatalf("Complete of an outcome over the record limit: %v, want ErrInvalidOperation", err)
	}
	op.Body, op.Key = nil, "another"
	if err := c.Complete(context.Background(), op); !errors.Is(err, journal.ErrInvalidOperation) {
		t.Fatalf("Complete under another key: %v, want ErrInvalidOperation", err)
	}
	if got, _, _ := j.Lookup(context.Background(), "op"); got.State != journal.StatePending {
		t.Fatalf("state %s after refused outcomes, want pending", got.State)
	}
}

// waitForAWaitingClaim returns once a second claim of id waits for the
// one that holds it.
func waitForAWaitingClaim(j *memoryJournal, id string) {
	for {
		j.mu.Lock()
		waiting := j.ops[id].free != nil
		j.mu.Unlock()
		if waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMemoryJournalClaimAfterAReleaseWithoutBegin(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	held, _ := j.Claim(context.Background(), "op")
	got := make(chan error, 1)
	go func() {
		c, err := j.Claim(context.Background(), "op")
		if err == nil {
			if _, ok := c.Operation(); ok {
				err = errors.New("the waiting claim found an operation no one began")
			}
			c.Release()
		}
		got <- err
	}()
	waitForAWaitingClaim(j, "op")
	held.Release()
	held.Release() // a second Release does nothing
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if len(j.ops) != 0 {
		t.Fatalf("%d entries left after every claim was released without Begin, want 0", len(j.ops))
	}
}

func TestMemoryJournalClaimWithAnEndedContext(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := j.Claim(ctx, "op"); !errors.Is(err, context.Canceled) || c != nil {
		t.Fatalf("Claim with an ended context: %v, %v; want context.Canceled", c, err)
	}
}

// C15.8: an operation claimed and not yet begun is in no listing
// while its claim is held: the entry that holds the claim is not an
// intent.
func TestMemoryJournalListsNoClaimWithoutAnIntent(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	c, err := j.Claim(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	for _, which := range []journal.Listing{journal.ListAll, journal.ListPending, journal.ListExpired, journal.ListCompleted} {
		ops, err := j.List(context.Background(), which)
		if err != nil || len(ops) != 0 {
			t.Fatalf("List(%s) while a claim without Begin is held: %v, %v; want nothing", which, ops, err)
		}
	}
}

// TestMemoryJournalListsEachOperationOnceAndOnlyBegunOnes: a claim of an
// ID that holds nothing lists nothing, a claim holding a completed
// operation lists it once (from the store, not also from the claim's
// entry), and each pending one is listed by its own key lifetime (C6.7):
// expired by its hour, pending within its day.
func TestMemoryJournalListsEachOperationOnceAndOnlyBegunOnes(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	j := newMemoryJournalFor(24*time.Hour, clock.now, defaultMaxOperations)
	created := clock.t
	memoryBegin(t, j, "daily", created)
	c, err := j.Claim(context.Background(), "hourly")
	if err != nil {
		t.Fatal(err)
	}
	hourly := journal.Operation{ID: "hourly", Key: "key-hourly", Method: http.MethodPost, URL: "https://api.example/x", Created: created, KeyTTL: time.Hour}
	if err := c.Begin(context.Background(), hourly); err != nil {
		t.Fatal(err)
	}
	c.Release()
	memoryComplete(t, j, memoryBegin(t, j, "done", created), created)
	empty, err := j.Claim(context.Background(), "claimed-only")
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Release()
	held, err := j.Claim(context.Background(), "done")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	clock.t = created.Add(2 * time.Hour)
	for which, want := range map[journal.Listing][]string{
		journal.ListAll:       {"daily", "done", "hourly"},
		journal.ListCompleted: {"done"},
		journal.ListPending:   {"daily"},
		journal.ListExpired:   {"hourly"},
	} {
		ops, err := j.List(context.Background(), which)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, op := range ops {
			got = append(got, op.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%s) = %q, want %q, each once, and no ID only claimed", which, got, want)
		}
	}
}
