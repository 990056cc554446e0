package idem

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// C15.5: an operation held by a claim when its time is up is kept, and
// the next claim of its ID still waits for the holder; once released, it
// is forgotten, and its ID is new.
func TestMemoryJournalExpiryKeepsAHeldOutcome(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	const ttl = time.Hour
	j := newMemoryJournalFor(ttl, clock.now, defaultMaxOperations)
	start := clock.t
	memoryComplete(t, j, memoryBegin(t, j, "held", start), start)
	held, err := j.Claim(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	clock.t = start.Add(2 * ttl)
	if c, err := j.TryClaim(context.Background(), "held"); !errors.Is(err, journal.ErrClaimed) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("TryClaim of an ID held past its time: %v, want ErrClaimed", err)
	}
	if op, ok := held.Operation(); !ok || op.State != journal.StateDone {
		t.Fatalf("the holder reads %+v, %v past its time; want the outcome", op, ok)
	}
	held.Release()
	if op, ok, err := j.Lookup(context.Background(), "held"); ok || err != nil {
		t.Fatalf("Lookup after the release: %+v, %v, %v; want nothing", op, ok, err)
	}
	if len(j.ops) != 0 || j.remembered() != 0 || j.store.bytes != 0 {
		t.Fatalf("%d in the map, %d remembered, %d bytes after the release; want nothing", len(j.ops), j.remembered(), j.store.bytes)
	}
}

// A released claim reads what the journal holds for its ID, and its Begin
// is refused for an ID that has an intent: it never replaces the intent
// another Do journaled.
func TestMemoryJournalReleasedClaimNeverReplacesAnIntent(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	c, err := j.Claim(context.Background(), "op")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	first := memoryBegin(t, j, "op", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if op, ok := c.Operation(); !ok || op.Key != first.Key {
		t.Fatalf("the released claim reads %+v, %v; want the intent under %s", op, ok, first.Key)
	}
	other := journal.Operation{ID: "op", Key: "key-other", Method: http.MethodPost, URL: "https://api.example/x", KeyTTL: time.Hour}
	if err := c.Begin(context.Background(), other); !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("Begin under a released claim of a begun ID: %v, want ErrOperationExists", err)
	}
	if op, _, _ := j.Lookup(context.Background(), "op"); op.Key != first.Key {
		t.Fatalf("the journal holds key %s, want the first intent's %s", op.Key, first.Key)
	}
}

// The memory journal's bound on an intent counts its ID, key, method and
// URL together: one byte over is refused, the limit itself is taken.
func TestMemoryJournalBoundsAnIntentByAllItsParts(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	key := "01234567-89ab-4def-8123-456789abcdef"
	for _, tt := range []struct {
		id   string
		size int
		ok   bool
	}{{"over", memoryMaxRecord + 1, false}, {"at", memoryMaxRecord, true}} {
		c, err := j.Claim(context.Background(), tt.id)
		if err != nil {
			t.Fatal(err)
		}
		url := "https://api.example/" + strings.Repeat("u", tt.size-len(tt.id)-len(key)-len(http.MethodPost)-len("https://api.example/"))
		err = c.Begin(context.Background(), journal.Operation{ID: tt.id, Key: key, Method: http.MethodPost, URL: url, KeyTTL: time.Hour})
		c.Release()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, journal.ErrInvalidOperation) {
			t.Fatalf("Begin of an intent of %d bytes: %v, want accepted: %v", tt.size, err, tt.ok)
		}
	}
}

// The memory journal's bound on an outcome is its encoded header and body:
// one byte over is refused, the limit itself is taken.
func TestMemoryJournalBoundsAnOutcomeAtTheLimit(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	for _, tt := range []struct {
		id   string
		size int
		ok   bool
	}{{"over", memoryMaxRecord + 1, false}, {"at", memoryMaxRecord, true}} {
		op := memoryBegin(t, j, tt.id, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		c, err := j.Claim(context.Background(), tt.id)
		if err != nil {
			t.Fatal(err)
		}
		overhead := len(journalkit.EncodeHeaderBody(nil, make([]byte, tt.size))) - tt.size
		op.State, op.Status, op.Body = journal.StateDone, 201, make([]byte, tt.size-overhead)
		if n := len(journalkit.EncodeHeaderBody(nil, op.Body)); n != tt.size {
			t.Fatalf("the outcome encodes in %d bytes, want %d", n, tt.size)
		}
		err = c.Complete(context.Background(), op)
		c.Release()
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, journal.ErrInvalidOperation) {
			t.Fatalf("Complete of an outcome of %d bytes: %v, want accepted: %v", tt.size, err, tt.ok)
		}
	}
}

// ForgetCompleted drops only a completed operation under its own key: a
// completed one under another key and a pending one under its own are
// refused, and kept.
func TestMemoryJournalForgetCompletedNeedsBothTheOutcomeAndTheKey(t *testing.T) {
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	done := memoryBegin(t, j, "done", at)
	memoryComplete(t, j, done, at)
	pending := memoryBegin(t, j, "pending", at)
	for _, tt := range []struct{ id, key string }{{"done", "key-other"}, {"pending", pending.Key}} {
		if err := j.ForgetCompleted(context.Background(), tt.id, tt.key); !errors.Is(err, journal.ErrNoSuchOperation) {
			t.Fatalf("ForgetCompleted(%s, %s) = %v, want ErrNoSuchOperation", tt.id, tt.key, err)
		}
		if _, ok, _ := j.Lookup(context.Background(), tt.id); !ok {
			t.Fatalf("%s was dropped by a refused ForgetCompleted", tt.id)
		}
	}
	if err := j.ForgetCompleted(context.Background(), "done", done.Key); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := j.Lookup(context.Background(), "done"); ok {
		t.Fatal("ForgetCompleted under the operation's key kept it")
	}
}
