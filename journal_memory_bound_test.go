package idem

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// memoryRemembers returns what j remembers: the IDs it keeps whole,
// pending or completed, sorted, and the number of digests.
func memoryRemembers(j *memoryJournal) ([]string, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var whole []string
	for id, e := range j.ops {
		if e.begun && !final(e.state) {
			whole = append(whole, id)
		}
	}
	for i := range j.store.recs {
		if r := &j.store.recs[i]; !r.gone {
			whole = append(whole, j.store.id(r))
		}
	}
	slices.Sort(whole)
	return whole, j.digests.n
}

// C15.2, C15.3: the completed operations kept whole fit in the budget,
// exactly: at the budget all are kept; a byte under it, the oldest is
// dropped to a digest, refused as forgotten.
func TestMemoryJournalKeepsOutcomesWithinTheBudgetExactly(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		under int
		whole []string
	}{{"at the budget", 0, []string{"a", "b"}}, {"a byte over", 1, []string{"b"}}} {
		t.Run(tt.name, func(t *testing.T) {
			j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
			memoryComplete(t, j, memoryBegin(t, j, "a", at), at)
			j.budget = 2*j.store.bytes - tt.under // b's record is the size of a's
			memoryComplete(t, j, memoryBegin(t, j, "b", at), at)
			whole, digests := memoryRemembers(j)
			if !slices.Equal(whole, tt.whole) || digests != 2-len(tt.whole) {
				t.Fatalf("kept whole %q and %d digests, want %q and %d", whole, digests, tt.whole, 2-len(tt.whole))
			}
			if _, _, err := j.Lookup(context.Background(), "a"); (err != nil) != (len(tt.whole) == 1) || err != nil && !errors.Is(err, journal.ErrOutcomeForgotten) {
				t.Fatalf("Lookup of a: %v", err)
			}
		})
	}
}

// C15.2, C11: a claim of a completed operation kept whole holds it as a
// claim of any other: a second claim waits. Its outcome may be dropped
// while claimed: the holder still reads it, and once it releases, the
// next claim is refused as forgotten.
func TestMemoryJournalClaimOfAnOperationKeptWhole(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	memoryComplete(t, j, memoryBegin(t, j, "a", at), at)
	held, err := j.Claim(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := j.TryClaim(context.Background(), "a"); !errors.Is(err, journal.ErrClaimed) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("a second claim of a completed operation: %v, want ErrClaimed", err)
	}
	j.budget = 0
	memoryComplete(t, j, memoryBegin(t, j, "b", at), at) // drops a's outcome
	if whole, digests := memoryRemembers(j); !slices.Equal(whole, []string{"b"}) || digests != 1 {
		t.Fatalf("kept whole %q and %d digests, want [b] and 1", whole, digests)
	}
	if op, ok := held.Operation(); !ok || op.State != journal.StateDone || op.Key != "key-a" {
		t.Fatalf("the holder reads %+v, %v; want the outcome", op, ok)
	}
	held.Release()
	if c, err := j.Claim(context.Background(), "a"); !errors.Is(err, journal.ErrOutcomeForgotten) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("a claim after the release: %v, want ErrOutcomeForgotten", err)
	}
	if len(j.ops) != 0 {
		t.Fatalf("%d entries left in the map, want none", len(j.ops))
	}
}

// C15.3: an ID whose digest equals a forgotten operation's, or one kept
// whole's, is refused as forgotten by Claim, TryClaim and Lookup: a
// collision never sends.
func TestMemoryJournalDigestCollisionRefusesANewOperation(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	j.digest = func(id string) uint64 { // a, and new, share 7; b, and new2, 9
		return map[string]uint64{"a": 7, "new": 7, "b": 9, "new2": 9}[id]
	}
	j.budget = 0
	memoryComplete(t, j, memoryBegin(t, j, "a", at), at)
	memoryComplete(t, j, memoryBegin(t, j, "b", at), at) // drops a to its digest; b is kept whole
	for _, id := range []string{"new", "new2"} {
		for name, claim := range map[string]func(context.Context, string) (journal.Claim, error){"Claim": j.Claim, "TryClaim": j.TryClaim} {
			if c, err := claim(context.Background(), id); !errors.Is(err, journal.ErrOutcomeForgotten) || c != nil {
				t.Fatalf("%s of %s, whose digest is held: %v, %v; want ErrOutcomeForgotten", name, id, c, err)
			}
		}
		if _, ok, err := j.Lookup(context.Background(), id); ok || !errors.Is(err, journal.ErrOutcomeForgotten) {
			t.Fatalf("Lookup of %s, whose digest is held: %v, %v; want ErrOutcomeForgotten", id, ok, err)
		}
	}
	if op, ok, err := j.Lookup(context.Background(), "b"); !ok || err != nil || op.ID != "b" {
		t.Fatalf("Lookup of b: %+v, %v, %v; want it whole", op, ok, err)
	}
}

// C15.4: the bound counts pending operations, those kept whole and the
// digests: at one under it, Begin of a new operation is taken; at it,
// refused, and the refused claim leaves nothing.
func TestMemoryJournalBoundCountsEveryOperationRemembered(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, 4)
	j.budget = 0
	memoryBegin(t, j, "pending", at)
	memoryComplete(t, j, memoryBegin(t, j, "digest", at), at)
	memoryComplete(t, j, memoryBegin(t, j, "whole", at), at) // drops digest
	if whole, digests := memoryRemembers(j); !slices.Equal(whole, []string{"pending", "whole"}) || digests != 1 {
		t.Fatalf("kept whole %q and %d digests, want [pending whole] and 1", whole, digests)
	}
	memoryBegin(t, j, "fourth", at)
	c, err := j.Claim(context.Background(), "fifth")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Begin(context.Background(), journal.Operation{ID: "fifth", Key: "key-fifth", Method: "POST", URL: "https://api.example/x", KeyTTL: time.Hour})
	c.Release()
	if !errors.Is(err, ErrTooManyOperations) {
		t.Fatalf("Begin of a fifth operation: %v, want ErrTooManyOperations", err)
	}
	if _, ok, err := j.Lookup(context.Background(), "fifth"); ok || err != nil || len(j.ops) != 2 {
		t.Fatalf("the refused operation left %v, %v, %d entries; want the two pending only", ok, err, len(j.ops))
	}
}

// C15.4: Forget and ForgetCompleted (a Resend) take the operation out of
// the count, and out of the outcomes' bytes.
func TestMemoryJournalForgetLeavesRoom(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, 2)
	memoryBegin(t, j, "pending", at)
	done := memoryBegin(t, j, "done", at)
	memoryComplete(t, j, done, at)
	if err := j.Forget(context.Background(), "pending"); err != nil {
		t.Fatal(err)
	}
	if err := j.ForgetCompleted(context.Background(), "done", done.Key); err != nil {
		t.Fatal(err)
	}
	if j.remembered() != 0 || len(j.ops) != 0 {
		t.Fatalf("after forgetting both: %d remembered, %d entries; want none", j.remembered(), len(j.ops))
	}
	memoryBegin(t, j, "pending", at)
	memoryBegin(t, j, "done", at) // two new operations fit the bound of two
}

// C3.7 in memory: a later completion replaces the outcome, counted once,
// and the operation is forgotten KeyTTL after the later completion's slice.
func TestMemoryJournalALaterCompletionReplacesTheOutcome(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	const ttl = 8 * time.Hour
	j := newMemoryJournalFor(ttl, clock.now, defaultMaxOperations)
	op := memoryBegin(t, j, "op", clock.t)
	memoryComplete(t, j, op, clock.t)
	clock.t = clock.t.Add(2 * time.Hour)
	c, _ := j.Claim(context.Background(), "op")
	op.State, op.Status, op.Body = journal.StateRejected, 409, []byte("later")
	if err := c.Complete(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if ops := list(j, journal.ListAll); j.store.live != 1 || len(ops) != 1 || ops[0].Status != 409 {
		t.Fatalf("%d kept whole, listed %+v; want the later outcome alone", j.store.live, ops)
	}
	clock.t = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC) // KeyTTL after the first slice's end
	if got, ok, _ := j.Lookup(context.Background(), "op"); !ok || got.Status != 409 || string(got.Body) != "later" {
		t.Fatalf("Lookup: %+v, %v; want the later outcome", got, ok)
	}
	clock.t = time.Date(2026, 1, 2, 14, 0, 0, 0, time.UTC) // KeyTTL after the later one's
	if _, ok, _ := j.Lookup(context.Background(), "op"); ok {
		t.Fatal("the operation is kept KeyTTL after its later completion's slice")
	}
}

// C15.5: a clock that goes back never moves a completion to a slice
// earlier than one given before: the operations are forgotten in the order
// they completed.
func TestMemoryJournalSliceEndNeverGoesBack(t *testing.T) {
	clock := &memoryClock{t: time.Date(2026, 1, 2, 5, 30, 0, 0, time.UTC)}
	const ttl = 8 * time.Hour
	j := newMemoryJournalFor(ttl, clock.now, defaultMaxOperations)
	memoryComplete(t, j, memoryBegin(t, j, "late", clock.t), clock.t)
	clock.t = time.Date(2026, 1, 2, 3, 30, 0, 0, time.UTC)
	memoryComplete(t, j, memoryBegin(t, j, "back", clock.t), clock.t)
	want := time.Date(2026, 1, 2, 6, 0, 0, 0, time.UTC).UnixNano()
	if a, b := j.store.recs[0].end, j.store.recs[1].end; a != want || b != want {
		t.Fatalf("slice ends %v and %v, want both %v", time.Unix(0, a).UTC(), time.Unix(0, b).UTC(), time.Unix(0, want).UTC())
	}
}

// C15.6: digests sit in tables of plain integers, which the collector
// does not walk; a segment grows at 7/8 full, each digest still found; a
// probe wraps around the end of the slots.
func TestMemoryDigestsGrowAndFindEveryDigest(t *testing.T) {
	if k := reflect.TypeOf(digestSegment{}.slots).Elem().Kind(); k != reflect.Uint64 {
		t.Fatalf("digest slots are %v, want uint64", k)
	}
	var d memoryDigests
	top := ^uint64(0) // its home is the last slot
	d.add(top, 10)
	d.add(top-2, 10) // the same home: wraps to slot 0
	if s := d.segs[0].slots; s[len(s)-1] != top || s[0] != top-2 {
		t.Fatalf("the last slot holds %x, the first %x; want %x and %x", s[len(s)-1], s[0], top, top-2)
	}
	if !d.has(top-2) || d.has(top-4) {
		t.Fatal("a probe that wraps around misses a digest, or finds one never added")
	}
	fill := digestSegmentMin * 7 / 8
	for i := range fill - 2 {
		d.add(uint64(i)*0x9e3779b97f4a7c15|1, 10)
	}
	if n := len(d.segs[0].slots); n != digestSegmentMin || d.n != fill {
		t.Fatalf("%d slots for %d digests, want %d: 7/8 full does not grow", n, d.n, digestSegmentMin)
	}
	d.add(12345, 10)
	if n := len(d.segs[0].slots); n != 2*digestSegmentMin || d.segs[0].n != fill+1 || len(d.segs) != 1 {
		t.Fatalf("%d slots, %d segments after one more, want %d slots in one", n, len(d.segs), 2*digestSegmentMin)
	}
	for i := range fill - 2 {
		if !d.has(uint64(i)*0x9e3779b97f4a7c15 | 1) {
			t.Fatalf("digest %d is lost after the growth", i)
		}
	}
	if !d.has(top) || !d.has(12345) {
		t.Fatal("a digest is lost after the growth")
	}
}

// C15.5: a newer slice starts a segment; an older one goes to the newest
// segment, kept as long as it; and a segment full at its largest is
// followed by another of the same end. Segments are dropped whole once
// their end is at or before the cutoff, not before.
func TestMemoryDigestsSegmentsAndExpiry(t *testing.T) {
	var d memoryDigests
	d.add(1, 10)
	d.add(3, 20)
	d.add(5, 15) // older than the newest segment: kept to 20
	if len(d.segs) != 2 || d.segs[0].end != 10 || d.segs[1].end != 20 || d.segs[1].n != 2 {
		t.Fatalf("segments %+v, want ends 10 and 20, the second holding 2", d.segs)
	}
	full := digestSegment{end: 20, slots: make([]uint64, digestSegmentMax), n: digestSegmentMax * 7 / 8}
	d.segs[1], d.n = full, 1+full.n
	d.add(7, 15)
	if len(d.segs) != 3 || d.segs[2].end != 20 || d.segs[2].n != 1 || d.n != full.n+2 {
		t.Fatalf("after a full segment: %d segments, the last ending %d; want a third ending 20", len(d.segs), d.segs[len(d.segs)-1].end)
	}
	d.expire(9)
	if len(d.segs) != 3 || !d.has(1) {
		t.Fatal("a segment was dropped before its end")
	}
	d.expire(10)
	if len(d.segs) != 2 || d.has(1) || d.n != full.n+1 {
		t.Fatalf("at its end: %d segments, %d digests; want the first dropped", len(d.segs), d.n)
	}
	d.expire(20)
	if len(d.segs) != 0 || d.n != 0 || d.has(7) {
		t.Fatalf("%d segments, %d digests left, want none", len(d.segs), d.n)
	}
}

// C15.6: a digest moves on for one farther from its home, so that a
// probe ends at the first digest nearer its home than the probe is from
// its start: a digest found past it was never placed there by add.
func TestMemoryDigestsProbeEndsAtANearerDigest(t *testing.T) {
	s := digestSegment{slots: make([]uint64, digestSegmentMin)}
	shift := 64 - 10 // digestSegmentMin slots: a home is a digest's top 10 bits
	at := func(home int, low uint64) uint64 { return uint64(home)<<shift | low }
	s.insert(at(5, 3)) // slot 5
	s.insert(at(6, 3)) // slot 6
	s.insert(at(5, 7)) // home 5: farther than the one at 6, which moves on to 7
	if got := s.slots[5:9]; got[0] != at(5, 3) || got[1] != at(5, 7) || got[2] != at(6, 3) || got[3] != 0 {
		t.Fatalf("slots 5 to 8 hold %x, want homes 5, 5, 6 and empty", got)
	}
	if !s.has(at(5, 7)) || !s.has(at(6, 3)) || s.has(at(5, 9)) {
		t.Fatal("a digest moved on is not found, or one never added is")
	}
	s.slots[8] = at(5, 9) // past the nearer digest at 7: never placed there
	if s.has(at(5, 9)) {
		t.Fatal("a probe went on past a digest nearer its home")
	}
}
