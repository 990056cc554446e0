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
	"unsafe"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// storeEntry returns a completed entry of id, its outcome a body of size
// bytes, each id[0].
func storeEntry(id string, size int) *memoryEntry {
	e := &memoryEntry{created: 1, completed: 2, state: journal.StateDone, status: 201, begun: true, fingerprint: journal.Fingerprint{id[0]}}
	e.setIntent(&journal.Operation{ID: id, Key: "key-" + id, Method: http.MethodPost, URL: "https://api.example/" + id})
	e.outcome = journalkit.EncodeHeaderBody(nil, bytes.Repeat([]byte{id[0]}, size))
	return e
}

// pointerIn names a part of typ that holds a pointer, or returns "".
func pointerIn(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return ""
	case reflect.Array:
		return pointerIn(typ.Elem())
	case reflect.Map:
		if p := pointerIn(typ.Key()); p != "" {
			return "key " + p
		}
		return pointerIn(typ.Elem())
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerIn(typ.Field(i).Type); p != "" {
				return typ.Field(i).Name + " " + p
			}
		}
		return ""
	}
	return typ.String()
}

// C15.6: the store holds no pointer per operation (its records, its index,
// its chunks' bytes), nor do the digests; a record and its index slot fit
// in what the budget counts for them.
func TestMemoryStoreHoldsNoPointers(t *testing.T) {
	var s memoryStore
	var d memoryDigests
	for _, typ := range []reflect.Type{reflect.TypeOf(s.recs).Elem(), reflect.TypeOf(s.index),
		reflect.TypeOf(s.chunks).Elem().Elem(), reflect.TypeOf(d.segs[:0]).Elem().Field(1).Type.Elem()} {
		if p := pointerIn(typ); p != "" {
			t.Errorf("%v holds a pointer: %s", typ, p)
		}
	}
	if size := unsafe.Sizeof(storedOp{}) + 2*unsafe.Sizeof(uint64(0)); size > memoryRecordBytes {
		t.Errorf("a record and its index slot take %d bytes, more than the %d counted", size, memoryRecordBytes)
	}
}

// A record that does not fit in the room its chunk has left goes to a new
// chunk, one larger than a chunk to a chunk of its own; each reads back
// whole; a chunk is freed once no record is left in it.
func TestMemoryStoreRecordsAcrossChunks(t *testing.T) {
	var s memoryStore
	sizes := map[string]int{"half": storeChunk / 2, "half again": storeChunk / 2, "big": 2 * storeChunk, "small": 10}
	order := []string{"half", "half again", "big", "small"}
	for i, id := range order {
		if seq := s.put(uint64(i+1), storeEntry(id, sizes[id]), 100); seq != i {
			t.Fatalf("%s put as record %d, want %d", id, seq, i)
		}
	}
	for i, id := range order {
		r, seq, ok := s.find(uint64(i + 1))
		op := s.operation(r)
		if !ok || seq != i || s.id(r) != id || op.ID != id || op.Key != "key-"+id || op.URL != "https://api.example/"+id ||
			len(op.Body) != sizes[id] || op.Body[0] != id[0] || op.Body[len(op.Body)-1] != id[0] || op.Fingerprint != (journal.Fingerprint{id[0]}) {
			t.Fatalf("%s reads back as %v, record %d, ID %q, %d body bytes", id, ok, seq, op.ID, len(op.Body))
		}
	}
	// The first half leaves too little room for the second; the big one
	// has a chunk of its own, and the small one starts the next.
	if got := []int{s.recs[1].chunk, int(s.recs[1].at), s.recs[2].chunk, cap(s.chunks[2]), s.recs[3].chunk}; got[0] != 1 || got[1] != 0 || got[2] != 2 || got[3] != int(s.recs[2].n) || got[4] != 3 {
		t.Fatalf("chunk, offset of the second half, chunk of the big one and its size, chunk of the small one: %v", got)
	}
	for i, chunks := range []int{3, 2, 1, 0} {
		if _, live := s.dropFront(); !live || len(s.chunks) != chunks || s.firstChunk != 4-chunks {
			t.Fatalf("after dropping %d records: %v, %d chunks from %d; want %d chunks", i+1, live, len(s.chunks), s.firstChunk, chunks)
		}
	}
	if s.bytes != 0 || s.live != 0 || len(s.index) != 0 || s.first != 4 {
		t.Fatalf("empty store: %d bytes, %d live, %d indexed, first %d", s.bytes, s.live, len(s.index), s.first)
	}
}

// A record put again under its digest replaces the one before, which is
// marked gone, still counted in bytes until it is dropped at the front,
// and dropped without a digest.
func TestMemoryStoreReplacesARecordOfTheSameDigest(t *testing.T) {
	var s memoryStore
	first := s.put(7, storeEntry("a", 1), 100)
	s.put(8, storeEntry("b", 1), 100)
	second := s.put(7, storeEntry("a", 5), 100)
	r, seq, ok := s.find(7)
	if !ok || seq != second || len(s.operation(r).Body) != 5 || s.live != 2 || !s.recs[first].gone {
		t.Fatalf("record %d, %d live, the first gone: %v; want record %d, 2 live", seq, s.live, s.recs[first].gone, second)
	}
	if s.remove(first) {
		t.Fatal("a record gone was removed again")
	}
	if _, live := s.dropFront(); live || s.live != 2 || len(s.index) != 2 {
		t.Fatalf("dropping the replaced record: live %v, %d live, %d indexed; want false, 2 and 2", live, s.live, len(s.index))
	}
	if s.remove(first) || s.remove(second+1) {
		t.Fatal("a record not in the store was removed")
	}
}

// C15.2: a budget smaller than one outcome still keeps the latest: a
// repeated Do of the last operation is answered.
func TestMemoryJournalKeepsTheLatestOutcomeWhateverTheBudget(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	j.budget = 0
	for _, id := range []string{"a", "b", "c"} {
		memoryComplete(t, j, memoryBegin(t, j, id, at), at)
		if whole, digests := memoryRemembers(j); len(whole) != 1 || whole[0] != id || digests != int(id[0]-'a') {
			t.Fatalf("after %s: kept whole %q, %d digests", id, whole, digests)
		}
	}
	if len(j.store.recs) != 1 || len(j.store.chunks) != 1 {
		t.Fatalf("%d records, %d chunks; want 1 and 1", len(j.store.recs), len(j.store.chunks))
	}
}

// A released claim that completes a pending operation leaves it in the
// store, not in the map; one that reads a completed operation puts nothing
// in the map.
func TestMemoryJournalReleasedClaimLeavesNoOutcomeInTheMap(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	late := memoryBegin(t, j, "late", at)
	c, err := j.Claim(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	late.State, late.Status, late.Completed = journal.StateDone, 201, at
	if err := c.Complete(ctx, late); err != nil {
		t.Fatalf("Complete of a released claim: %v", err)
	}
	if op, ok := c.Operation(); !ok || op.State != journal.StateDone {
		t.Fatalf("a released claim reads %+v, %v; want the outcome", op, ok)
	}
	again := late
	again.State, again.Status, again.Completed = journal.StatePending, 0, time.Time{}
	if err := c.Begin(ctx, again); !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("Begin of a released claim over an outcome: %v, want ErrOperationExists", err)
	}
	if len(j.ops) != 0 || j.store.live != 1 || j.pending != 0 {
		t.Fatalf("%d in the map, %d kept whole, %d pending; want 0, 1 and 0", len(j.ops), j.store.live, j.pending)
	}
}

// C15.4: forgetting, under its claim, a completed operation whose outcome
// was dropped while the claim was held finds no operation to forget: its
// digest stays, and it is still refused.
func TestMemoryJournalForgetOfAnOutcomeDroppedWhileClaimed(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	a := memoryBegin(t, j, "a", at)
	memoryComplete(t, j, a, at)
	held, err := j.Claim(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	j.budget = 0
	memoryComplete(t, j, memoryBegin(t, j, "b", at), at) // drops a's outcome
	if err := held.(*memoryClaim).forget(func(*memoryEntry) error { return nil }); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("forget of an outcome dropped while claimed: %v, want ErrNoSuchOperation", err)
	}
	held.Release()
	if _, _, err := j.Lookup(context.Background(), "a"); !errors.Is(err, journal.ErrOutcomeForgotten) {
		t.Fatalf("Lookup after the refused forget: %v, want ErrOutcomeForgotten", err)
	}
}

// The store's records and chunks read back across many operations, kept
// whole and dropped to digests.
func TestMemoryJournalManyOperationsThroughTheStore(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := newMemoryJournalFor(time.Hour, nil, defaultMaxOperations)
	j.budget = 3 * storeChunk
	const n = 2000
	for i := range n {
		op := memoryBegin(t, j, fmt.Sprint("op-", i), at)
		c, _ := j.Claim(context.Background(), op.ID)
		op.State, op.Status, op.Body = journal.StateDone, 201, bytes.Repeat([]byte{byte(i)}, i%300)
		if err := c.Complete(context.Background(), op); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	whole, digests := memoryRemembers(j)
	if len(whole)+digests != n || len(whole) == 0 || digests == 0 || j.store.bytes > j.budget || len(j.store.chunks) > 4 {
		t.Fatalf("%d whole, %d digests, %d bytes in %d chunks; want %d in all, within %d bytes", len(whole), digests, j.store.bytes, len(j.store.chunks), n, j.budget)
	}
	for i := n - len(whole); i < n; i++ {
		op, ok, err := j.Lookup(context.Background(), fmt.Sprint("op-", i))
		if !ok || err != nil || len(op.Body) != i%300 || i%300 > 0 && op.Body[0] != byte(i) {
			t.Fatalf("op-%d reads back %v, %v, %d body bytes", i, ok, err, len(op.Body))
		}
	}
	if _, _, err := j.Lookup(context.Background(), fmt.Sprint("op-", n-len(whole)-1)); !errors.Is(err, journal.ErrOutcomeForgotten) {
		t.Fatalf("the latest dropped: %v, want ErrOutcomeForgotten", err)
	}
}

// C15.6: a store that drops a record for each it takes moves its records
// to the start of their array once it is full and half of it dropped,
// rather than growing it, and fills a chunk it freed rather than a new
// one: each record still reads back whole.
func TestMemoryStoreReusesItsRecordsArrayAndAFreedChunk(t *testing.T) {
	var s memoryStore
	const held = 1024
	e := storeEntry("op", storeChunk/4-40) // four records a chunk
	next := 0
	step := func() {
		if next >= held {
			s.dropFront()
		}
		s.put(uint64(2*next+1), e, 100)
		next++
	}
	for range 3 * held { // the records held, and twice as many through the array
		step()
	}
	array := &s.base[:1][0]
	for range 4 {
		step() // the first starts a chunk; the fourth frees one
	}
	if s.spare == nil {
		t.Fatal("no chunk kept once freed")
	}
	chunk := &s.spare[:1][0]
	step() // the next record goes to the freed chunk
	if s.spare != nil || &s.chunks[len(s.chunks)-1][:1][0] != chunk {
		t.Fatal("the chunk freed is not the next one filled")
	}
	if allocs := testing.AllocsPerRun(2*held, step); allocs != 0 { // through the array, moved at least once
		t.Fatalf("%v allocations a record taken and one dropped, want 0", allocs)
	}
	if &s.base[:1][0] != array || cap(s.base) > 2*held || len(s.recs) != held || s.live != held {
		t.Fatalf("records in an array of %d (the same: %v), %d of them, %d live; want the same, of at most %d, %d", cap(s.base), &s.base[:1][0] == array, len(s.recs), s.live, 2*held, held)
	}
	for i := next - held; i < next; i++ {
		r, seq, ok := s.find(uint64(2*i + 1))
		if op := s.operation(r); !ok || seq != i || op.ID != "op" || len(op.Body) != storeChunk/4-40 {
			t.Fatalf("record %d reads back as %v, %d, %q with %d body bytes", i, ok, seq, op.ID, len(op.Body))
		}
	}
}

// C15.6: a record of exactly a chunk's bytes goes to the chunk freed.
func TestMemoryStoreFillsAFreedChunkWithARecordOfItsSize(t *testing.T) {
	var s memoryStore
	e := storeEntry("op", storeChunk-38)
	if n := len(e.intent) + len(e.outcome); n != storeChunk {
		t.Fatalf("a record of %d bytes, want %d", n, storeChunk)
	}
	s.put(1, e, 100)
	s.put(3, e, 100)
	chunk := &s.chunks[0][:1][0]
	s.dropFront()
	if s.spare == nil || &s.spare[:1][0] != chunk {
		t.Fatal("the chunk freed is not kept")
	}
	s.put(5, e, 100)
	if s.spare != nil || &s.chunks[len(s.chunks)-1][:1][0] != chunk {
		t.Fatal("a record the size of the chunk freed went to a new chunk")
	}
	if r, _, ok := s.find(5); !ok || len(s.operation(r).Body) != storeChunk-38 {
		t.Fatal("the record in the chunk freed does not read back")
	}
}
