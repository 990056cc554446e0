package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memoryClock is a settable clock for the memory journal's tests.
type memoryClock struct{ t time.Time }

func (c *memoryClock) now() time.Time { return c.t }

func memoryBegin(t *testing.T, j *memoryJournal, id string, created time.Time) Operation {
	t.Helper()
	c, err := j.Claim(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	op := Operation{ID: id, Key: "key-" + id, Method: http.MethodPost, URL: "https://api.example/x", Created: created, State: StatePending}
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	return op
}

func memoryComplete(t *testing.T, j *memoryJournal, op Operation, completed time.Time) {
	t.Helper()
	c, err := j.Claim(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	op.State, op.Status, op.Completed = StateDone, 201, completed
	if err := c.Complete(context.Background(), op); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryJournalForgetsCompletedOperationsKeyTTLOldWhenItHasGrown(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	const ttl = time.Hour
	j := newMemoryJournalFor(ttl, clock.now)
	start := clock.t
	old := memoryBegin(t, j, "old-done", start)
	memoryComplete(t, j, old, start)
	young := memoryBegin(t, j, "young-done", start)
	memoryComplete(t, j, young, start.Add(30*time.Minute))
	memoryBegin(t, j, "old-pending", start)

	clock.t = start.Add(ttl + time.Minute)
	// Below memorySweepMin operations nothing is dropped.
	if _, ok, _ := j.Lookup(context.Background(), "old-done"); !ok {
		t.Fatal("an operation was forgotten before the journal grew")
	}
	for i := j.size(); i < memorySweepMin; i++ {
		memoryBegin(t, j, "filler-"+strconv.Itoa(i), clock.t)
	}
	if _, ok, _ := j.Lookup(context.Background(), "old-done"); ok {
		t.Fatal("a completed operation KeyTTL old is still held after the journal grew")
	}
	for _, id := range []string{"young-done", "old-pending"} {
		if _, ok, _ := j.Lookup(context.Background(), id); !ok {
			t.Fatalf("%s was forgotten; only completed operations KeyTTL old are", id)
		}
	}
	if got, want := j.size(), memorySweepMin-1; got != want || j.sweepAt != 2*want {
		t.Fatalf("%d operations, next sweep at %d; want %d and %d", got, j.sweepAt, want, 2*want)
	}
}

func TestMemoryJournalKeepsItsOwnCopyOfAnOutcome(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil)
	op := memoryBegin(t, j, "op", time.Now())
	c, _ := j.Claim(context.Background(), "op")
	header := http.Header{"Content-Type": {"application/json"}, "Empty": {}}
	body := []byte(`{"ok":true}`)
	op.State, op.Status, op.Header, op.Body = StateDone, 201, header, body
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
	j := newMemoryJournalFor(time.Hour, nil)
	c, _ := j.Claim(context.Background(), "op")
	defer c.Release()
	big := Operation{ID: "op", Key: "k", Method: http.MethodPost, URL: strings.Repeat("u", memoryMaxRecord)}
	if err := c.Begin(context.Background(), big); !errors.Is(err, ErrInvalidOperation) {
		t.Fatalf("Begin of an intent over the record limit: %v, want ErrInvalidOperation", err)
	}
	op := Operation{ID: "op", Key: "k", Method: http.MethodPost, URL: "https://api.example/x"}
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Body = StateDone, make([]byte, memoryMaxRecord)
	if err := c.Complete(context.Background(), op); !errors.Is(err, ErrInvalidOperation) {
		t.Fatalf("Complete of an outcome over the record limit: %v, want ErrInvalidOperation", err)
	}
	op.Body, op.Key = nil, "another"
	if err := c.Complete(context.Background(), op); !errors.Is(err, ErrInvalidOperation) {
		t.Fatalf("Complete under another key: %v, want ErrInvalidOperation", err)
	}
	if got, _, _ := j.Lookup(context.Background(), "op"); got.State != StatePending {
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
	j := newMemoryJournalFor(time.Hour, nil)
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
	j := newMemoryJournalFor(time.Hour, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := j.Claim(ctx, "op"); !errors.Is(err, context.Canceled) || c != nil {
		t.Fatalf("Claim with an ended context: %v, %v; want context.Canceled", c, err)
	}
}
