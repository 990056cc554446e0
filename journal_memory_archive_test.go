package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

// archivedEntry returns a begun, completed entry of id, its outcome the
// given body.
func archivedEntry(id string, completed time.Time, body string) *memoryEntry {
	e := &memoryEntry{created: completed.Add(-time.Second).UnixNano(), completed: completed.UnixNano(),
		state: StateDone, status: 201, begun: true, fingerprint: Fingerprint{id[0]}}
	e.setIntent(&Operation{ID: id, Key: "key-" + id, Method: http.MethodPost, URL: "https://api.example/" + id})
	e.outcome = []byte{0, byte(len(body))} // no header fields, then the body's length
	e.outcome = append(e.outcome, body...)
	return e
}

// wantArchived checks that the archive finds exactly the IDs of want, each
// with its own record.
func wantArchived(t *testing.T, a *memoryArchive, want []string, gone []string) {
	t.Helper()
	for _, id := range want {
		i := a.find(id)
		if i < 0 {
			t.Fatalf("%s is not found", id)
		}
		op := a.operation(i)
		if op.ID != id || op.Key != "key-"+id || op.URL != "https://api.example/"+id || string(op.Body) != "body of "+id ||
			op.Fingerprint != (Fingerprint{id[0]}) || op.State != StateDone || op.Status != 201 {
			t.Fatalf("%s reads back as %+v", id, op)
		}
	}
	for _, id := range gone {
		if i := a.find(id); i >= 0 {
			t.Fatalf("%s is found at %d after it was taken out", id, i)
		}
	}
}

// IDs whose hashes are equal each keep their own record, whichever of them
// is taken out, and across a sweep.
func TestMemoryArchiveTellsIDsOfOneHashApart(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newMemoryArchive()
	a.hash = func(string) uint64 { return 7 }
	for _, id := range []string{"a", "b", "c", "d"} {
		a.put(archivedEntry(id, now, "body of "+id))
	}
	wantArchived(t, &a, []string{"a", "b", "c", "d"}, []string{"e"})

	c := a.take("c") // in the chain's middle
	if c == nil || c.id() != "c" || c.key() != "key-c" || c.method() != http.MethodPost || c.url() != "https://api.example/c" ||
		string(c.outcome) != "\x00\x09body of c" || !c.begun || c.held || c.state != StateDone || c.status != 201 {
		t.Fatalf("take(c) = %+v", c)
	}
	wantArchived(t, &a, []string{"a", "b", "d"}, []string{"c"})
	a.take("d") // the newest
	wantArchived(t, &a, []string{"a", "b"}, []string{"c", "d"})
	b := a.take("b") // the newest, the one after it record 0
	wantArchived(t, &a, []string{"a"}, []string{"b", "c", "d"})
	a.put(c)
	a.put(b)
	a.take("c") // in the middle again
	wantArchived(t, &a, []string{"a", "b"}, []string{"c", "d"})
	a.take("a") // the oldest
	wantArchived(t, &a, []string{"b"}, []string{"a", "c", "d"})
	if a.take("a") != nil {
		t.Fatal("an ID taken out was taken out again")
	}
	a.put(c)
	wantArchived(t, &a, []string{"b", "c"}, []string{"a", "d"})
	if a.len() != 7 || a.taken != 5 {
		t.Fatalf("%d records, %d taken; want 7 and 5", a.len(), a.taken)
	}

	a.sweep(now, time.Hour)
	wantArchived(t, &a, []string{"b", "c"}, []string{"a", "d"})
	record := len("b") + len("key-b") + len(http.MethodPost) + len("https://api.example/b") + len("\x00\x09body of b")
	if a.len() != 2 || a.taken != 0 || len(a.chunks) != 1 || len(a.chunks[0]) != 2*record {
		t.Fatalf("after the sweep %d records, %d taken, %d chunks; want 2, 0 and one of their bytes only", a.len(), a.taken, len(a.chunks))
	}
	a.take("b")
	wantArchived(t, &a, []string{"c"}, []string{"a", "b", "d"})
}

// A sweep drops a record whose outcome is exactly ttl old and keeps one a
// nanosecond younger.
func TestMemoryArchiveSweepsAnOutcomeExactlyTTLOld(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newMemoryArchive()
	a.put(archivedEntry("old", now.Add(-time.Hour), "body of old"))
	a.put(archivedEntry("young", now.Add(-time.Hour+time.Nanosecond), "body of young"))
	a.sweep(now, time.Hour)
	wantArchived(t, &a, []string{"young"}, []string{"old"})
	if a.len() != 1 {
		t.Fatalf("%d records after the sweep, want 1", a.len())
	}
}

// The archive holds nothing the garbage collector follows per operation:
// its map, its records and its bytes hold no pointers.
func TestMemoryArchiveHoldsNoPointers(t *testing.T) {
	a := newMemoryArchive()
	for _, typ := range []reflect.Type{reflect.TypeOf(a.heads), reflect.TypeOf(a.slabs).Elem().Elem(), reflect.TypeOf(a.chunks).Elem().Elem()} {
		if p := pointerIn(typ); p != "" {
			t.Errorf("%v holds a pointer: %s", typ, p)
		}
	}
}

// pointerIn names a part of typ that holds a pointer, or returns "".
func pointerIn(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		return pointerIn(typ.Elem())
	case reflect.Map:
		if p := pointerIn(typ.Key()); p != "" {
			return "key " + p
		}
		if p := pointerIn(typ.Elem()); p != "" {
			return "value " + p
		}
		return ""
	case reflect.Struct:
		for i := range typ.NumField() {
			f := typ.Field(i)
			if p := pointerIn(f.Type); p != "" {
				return f.Name + " " + p
			}
		}
		return ""
	}
	return typ.String()
}

// A completed operation leaves the map for the archive when its claim is
// released, and comes back when its ID is claimed again: the holder reads
// it, a second claim waits, and it is archived again on release.
func TestMemoryJournalArchivesAReleasedOutcome(t *testing.T) {
	ctx := context.Background()
	j := newMemoryJournalFor(time.Hour, nil)
	op := memoryBegin(t, j, "op", time.Now())
	if len(j.ops) != 1 || j.archive.len() != 0 {
		t.Fatalf("a pending operation: %d in the map, %d archived; want 1 and 0", len(j.ops), j.archive.len())
	}
	memoryComplete(t, j, op, time.Now())
	if len(j.ops) != 0 || j.archive.len() != 1 {
		t.Fatalf("a released outcome: %d in the map, %d archived; want 0 and 1", len(j.ops), j.archive.len())
	}
	if got, ok, _ := j.Lookup(ctx, "op"); !ok || got.State != StateDone || got.Key != op.Key {
		t.Fatalf("Lookup of the archived operation: %+v, %v", got, ok)
	}
	if all, _ := j.List(ctx, ListCompleted); len(all) != 1 || all[0].ID != "op" {
		t.Fatalf("List of completed operations: %+v", all)
	}
	c, err := j.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Operation(); !ok || got.State != StateDone || got.Status != 201 {
		t.Fatalf("the claim reads %+v, %v; want the outcome", got, ok)
	}
	if _, err := j.TryClaim(ctx, "op"); err == nil {
		t.Fatal("a second claim of an ID claimed back from the archive was granted")
	}
	if err := c.Begin(ctx, op); err == nil {
		t.Fatal("Begin over an outcome claimed back from the archive was allowed")
	}
	c.Release()
	if len(j.ops) != 0 || j.archive.len() != 2 || j.archive.taken != 1 {
		t.Fatalf("released again: %d in the map, %d archived, %d taken; want 0, 2 and 1", len(j.ops), j.archive.len(), j.archive.taken)
	}
	if got, ok, _ := j.Lookup(ctx, "op"); !ok || got.State != StateDone {
		t.Fatalf("Lookup after the second release: %+v, %v", got, ok)
	}
}

// An archived operation that is forgotten is gone: Lookup, List and a
// claim find nothing of it, and its ID can be begun again.
func TestMemoryJournalForgetsAnArchivedOperation(t *testing.T) {
	ctx := context.Background()
	j := newMemoryJournalFor(time.Hour, nil)
	op := memoryBegin(t, j, "op", time.Now())
	memoryComplete(t, j, op, time.Now())
	memoryComplete(t, j, memoryBegin(t, j, "other", time.Now()), time.Now())
	if err := j.ForgetCompleted(ctx, "op", op.Key); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := j.Lookup(ctx, "op"); ok {
		t.Fatalf("Lookup of a forgotten operation: %+v", got)
	}
	if all, _ := j.List(ctx, ListAll); len(all) != 1 || all[0].ID != "other" {
		t.Fatalf("List after the forget: %+v, want other alone", all)
	}
	c, err := j.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got, ok := c.Operation(); ok {
		t.Fatalf("a claim of the forgotten ID reads %+v", got)
	}
	op.Key = "key-again"
	if err := c.Begin(ctx, op); err != nil {
		t.Fatalf("Begin of the forgotten ID: %v", err)
	}
}

// What a released claim reads back or completes goes to the archive, so
// the sweep finds it there: the map keeps no completed operation that no
// claim holds.
func TestMemoryJournalReleasedClaimLeavesNoOutcomeInTheMap(t *testing.T) {
	ctx := context.Background()
	clock := &memoryClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	const ttl = time.Hour
	j := newMemoryJournalFor(ttl, clock.now)
	read := memoryBegin(t, j, "read", clock.t)
	c, _ := j.Claim(ctx, "read")
	read.State, read.Status, read.Completed = StateDone, 201, clock.t
	if err := c.Complete(ctx, read); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if op, ok := c.Operation(); !ok || op.State != StateDone {
		t.Fatalf("a released claim reads %+v, %v; want the outcome", op, ok)
	}
	again := read
	again.State, again.Status, again.Completed = StatePending, 0, time.Time{}
	if err := c.Begin(ctx, again); !errors.Is(err, ErrOperationExists) {
		t.Fatalf("Begin of a released claim over an outcome: %v, want ErrOperationExists", err)
	}
	late := memoryBegin(t, j, "late", clock.t)
	c, _ = j.Claim(ctx, "late")
	c.Release()
	late.State, late.Status, late.Completed = StateDone, 201, clock.t
	if err := c.Complete(ctx, late); err != nil {
		t.Fatalf("Complete of a released claim: %v", err)
	}
	if len(j.ops) != 0 || j.archive.len()-j.archive.taken != 2 {
		t.Fatalf("%d operations in the map, %d archived; want 0 and 2", len(j.ops), j.archive.len()-j.archive.taken)
	}
	clock.t = clock.t.Add(ttl)
	growToSweep(t, j, clock.t)
	for _, id := range []string{"read", "late"} {
		if op, ok, _ := j.Lookup(ctx, id); ok {
			t.Fatalf("%s, completed KeyTTL ago, is still held after the sweep: %+v", id, op)
		}
	}
}

// A record that does not fit in the room its chunk has left goes to a new
// chunk, one larger than a chunk to a chunk of its own, and records go on
// past a slab: each reads back whole, before and after a sweep.
func TestMemoryArchiveRecordsAcrossChunksAndSlabs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newMemoryArchive()
	sizes := map[string]int{"half": archiveChunk / 2, "half again": archiveChunk / 2, "big": 2 * archiveChunk, "small": 10}
	put := func(id string, size int) {
		e := &memoryEntry{completed: now.UnixNano(), state: StateDone, status: 201, begun: true}
		e.setIntent(&Operation{ID: id, Key: "key-" + id, Method: http.MethodPost, URL: "https://api.example/"})
		e.outcome = journalkit.EncodeHeaderBody(nil, bytes.Repeat([]byte{id[0]}, size))
		a.put(e)
	}
	for _, id := range []string{"half", "half again", "big", "small"} {
		put(id, sizes[id])
	}
	for i := range archiveSlab + 1 {
		id := fmt.Sprint("filler-", i)
		sizes[id] = i % 100
		put(id, sizes[id])
	}
	check := func(when string) {
		t.Helper()
		for id, size := range sizes {
			i := a.find(id)
			if i < 0 {
				t.Fatalf("%s: %s is not found", when, id)
			}
			op := a.operation(i)
			if op.ID != id || op.Key != "key-"+id || len(op.Body) != size || size > 0 && (op.Body[0] != id[0] || op.Body[size-1] != id[0]) {
				t.Fatalf("%s: %s reads back as ID %q, key %q, %d body bytes", when, id, op.ID, op.Key, len(op.Body))
			}
		}
	}
	check("appended")
	// The first half leaves too little room for the second; the big one
	// has a chunk of its own, and the small one starts the next.
	if r := a.rec(a.find("half again")); r.chunk != 1 || r.at != 0 {
		t.Fatalf("the second half is at %d in chunk %d, want 0 in chunk 1", r.at, r.chunk)
	}
	if r := a.rec(a.find("big")); r.chunk != 2 || cap(a.chunks[2]) != int(r.end) {
		t.Fatalf("the big record is in chunk %d of %d bytes, want chunk 2 of its %d", r.chunk, cap(a.chunks[2]), r.end)
	}
	if r := a.rec(a.find("small")); r.chunk != 3 || len(a.slabs) != 2 {
		t.Fatalf("the small record is in chunk %d, %d slabs; want chunk 3 and 2 slabs", r.chunk, len(a.slabs))
	}
	a.take("half")
	delete(sizes, "half")
	a.sweep(now, time.Hour)
	check("swept")
	if a.len() != len(sizes) || a.taken != 0 {
		t.Fatalf("%d records, %d taken after the sweep; want %d and 0", a.len(), a.taken, len(sizes))
	}
}

// A sweep that would drop nothing leaves the archive as it is: nothing is
// copied.
func TestMemoryArchiveSweepWithNothingToDropCopiesNothing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newMemoryArchive()
	a.put(archivedEntry("a", now, "body of a"))
	chunk := &a.chunks[0][0]
	a.sweep(now, time.Hour)
	if &a.chunks[0][0] != chunk {
		t.Fatal("a sweep with nothing to drop rewrote the archive")
	}
	wantArchived(t, &a, []string{"a"}, nil)
}

// A claim waiting on an ID whose holder completed it wakes when the holder
// releases, after the outcome went to the archive, and finds the outcome.
func TestMemoryJournalWaitingClaimFindsTheArchivedOutcome(t *testing.T) {
	ctx := context.Background()
	j := newMemoryJournalFor(time.Hour, nil)
	op := memoryBegin(t, j, "op", time.Now())
	held, err := j.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	op.State, op.Status, op.Completed = StateDone, 201, time.Now()
	if err := held.Complete(ctx, op); err != nil {
		t.Fatal(err)
	}
	got := make(chan Operation, 1)
	go func() {
		c, err := j.Claim(ctx, "op")
		if err != nil {
			got <- Operation{}
			return
		}
		o, _ := c.Operation()
		c.Release()
		got <- o
	}()
	waitForAWaitingClaim(j, "op")
	held.Release()
	if o := <-got; o.State != StateDone || o.Status != 201 || o.Key != op.Key {
		t.Fatalf("the waiting claim read %+v; want the outcome", o)
	}
	if len(j.ops) != 0 || j.archive.len()-j.archive.taken != 1 {
		t.Fatalf("%d in the map, %d archived; want 0 and 1", len(j.ops), j.archive.len()-j.archive.taken)
	}
}
