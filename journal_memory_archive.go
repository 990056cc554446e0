package idem

import (
	"hash/maphash"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

// memoryArchive holds the completed operations of a memory journal that no
// claim holds: what a repeated Do of them answers (C4), until the journal
// sweeps them KeyTTL after their outcome.
//
// A Client without a journal archives every operation it completes, so
// the archive is laid out for the garbage collector, which would otherwise
// visit each of them at every cycle: records without pointers, in slabs of
// archiveSlab; their strings and outcomes end to end in chunks of bytes;
// and a map from the ID's hash to a record number. A collection follows a
// pointer per slab and per chunk, none per operation. Neither slabs nor
// chunks are ever copied to grow: a full one is followed by a new one.
//
// Records are only appended; a record taken out is marked, and the sweep
// rewrites the archive without the marked and the expired ones.
type memoryArchive struct {
	hash   func(id string) uint64
	heads  map[uint64]int // by the ID's hash: the newest record of that hash
	slabs  [][]archived   // record i is slabs[i/archiveSlab][i%archiveSlab]
	n      int            // records
	chunks [][]byte       // the records' bytes; each record lies in one chunk
	taken  int            // records marked taken, still among the n
}

// The sizes of an archive's parts: archiveSlab records a slab, and
// archiveChunk bytes a chunk, unless one record's bytes are more.
const (
	archiveSlab  = 1024
	archiveChunk = 256 << 10
)

// archived is one record of a memoryArchive. Its bytes are
// chunks[chunk][at:at+end]: the ID, then the key from keyAt, the method from
// methodAt, the URL from urlAt, and the outcome, encoded as a file journal
// encodes it, from outAt.
type archived struct {
	chunk                                  int
	at, keyAt, methodAt, urlAt, outAt, end uint32
	prev                                   int // the next older record of the same hash; -1 for none
	hash                                   uint64
	created, completed                     int64 // Unix nanoseconds
	fingerprint                            Fingerprint
	status                                 int32
	state                                  State
	bodyTruncated, headerTruncated         bool
	gone                                   bool // taken out of the archive
}

// A record is an intent and an outcome of at most memoryMaxRecord bytes
// each, and a chunk is at most the larger of archiveChunk and one record:
// offsets within a chunk fit a uint32.
const _ uint32 = 2*memoryMaxRecord + archiveChunk

func newMemoryArchive() memoryArchive {
	seed := maphash.MakeSeed()
	return memoryArchive{hash: func(id string) uint64 { return maphash.String(seed, id) }, heads: make(map[uint64]int)}
}

// len is the number of records in the archive, taken ones included.
func (a *memoryArchive) len() int { return a.n }

// rec returns record i.
func (a *memoryArchive) rec(i int) *archived { return &a.slabs[i/archiveSlab][i%archiveSlab] }

// bytes returns r's bytes.
func (a *memoryArchive) bytes(r *archived) []byte { return a.chunks[r.chunk][r.at : r.at+r.end] }

// put archives e, a begun and completed operation: its ID must not be in
// the archive.
func (a *memoryArchive) put(e *memoryEntry) {
	h := a.hash(e.id())
	prev, ok := a.heads[h]
	if !ok {
		prev = -1
	}
	r, b := a.add(h, prev, len(e.intent)+len(e.outcome))
	copy(b, e.intent)
	copy(b[len(e.intent):], e.outcome)
	r.keyAt, r.methodAt, r.urlAt, r.outAt = e.keyAt, e.methodAt, e.urlAt, uint32(len(e.intent))
	r.created, r.completed, r.fingerprint, r.status, r.state = e.created, e.completed, e.fingerprint, e.status, e.state
	r.bodyTruncated, r.headerTruncated = e.bodyTruncated, e.headerTruncated
}

// add appends a record of hash h and size bytes, prev the next older
// record of that hash, and makes it the newest of its hash. It returns the
// record, for the caller to fill in, and the room for its bytes.
func (a *memoryArchive) add(h uint64, prev, size int) (*archived, []byte) {
	last := len(a.chunks) - 1
	if last < 0 || cap(a.chunks[last])-len(a.chunks[last]) < size {
		a.chunks = append(a.chunks, make([]byte, 0, max(archiveChunk, size)))
		last++
	}
	at := len(a.chunks[last])
	a.chunks[last] = a.chunks[last][:at+size]
	if a.n%archiveSlab == 0 {
		a.slabs = append(a.slabs, make([]archived, 0, archiveSlab))
	}
	s := &a.slabs[len(a.slabs)-1]
	*s = append(*s, archived{chunk: last, at: uint32(at), end: uint32(size), prev: prev, hash: h})
	a.heads[h] = a.n
	a.n++
	return &(*s)[len(*s)-1], a.chunks[last][at : at+size]
}

// find returns the number of id's record, or -1.
func (a *memoryArchive) find(id string) int {
	i, ok := a.heads[a.hash(id)]
	if !ok {
		return -1
	}
	for ; i >= 0; i = a.rec(i).prev {
		if a.id(i) == id {
			return i
		}
	}
	return -1
}

// take removes id's record from the archive and returns it as an entry no
// claim holds, or nil if the archive has no record of id.
func (a *memoryArchive) take(id string) *memoryEntry {
	i := a.find(id)
	if i < 0 {
		return nil
	}
	r := a.rec(i)
	b := a.bytes(r)
	e := &memoryEntry{
		intent: string(b[:r.outAt]), keyAt: r.keyAt, methodAt: r.methodAt, urlAt: r.urlAt,
		status: r.status, fingerprint: r.fingerprint, created: r.created, completed: r.completed,
		outcome: append([]byte(nil), b[r.outAt:]...),
		state:   r.state, bodyTruncated: r.bodyTruncated, headerTruncated: r.headerTruncated, begun: true,
	}
	// Unlink the record from its hash's chain.
	if head := a.heads[r.hash]; head == i {
		if r.prev < 0 {
			delete(a.heads, r.hash)
		} else {
			a.heads[r.hash] = r.prev
		}
	} else {
		for j := head; ; j = a.rec(j).prev {
			if a.rec(j).prev == i {
				a.rec(j).prev = r.prev
				break
			}
		}
	}
	r.gone = true
	a.taken++
	return e
}

// id returns record i's ID.
func (a *memoryArchive) id(i int) string {
	r := a.rec(i)
	return string(a.bytes(r)[:r.keyAt])
}

// operation returns record i, its header and body in fresh memory that the
// caller may keep and change.
func (a *memoryArchive) operation(i int) Operation {
	r := a.rec(i)
	b := a.bytes(r)
	op := Operation{
		ID: string(b[:r.keyAt]), Key: string(b[r.keyAt:r.methodAt]), Method: string(b[r.methodAt:r.urlAt]),
		URL: string(b[r.urlAt:r.outAt]), Fingerprint: r.fingerprint, State: r.state,
		Created: time.Unix(0, r.created).UTC(), Completed: time.Unix(0, r.completed).UTC(), Status: int(r.status),
		BodyTruncated: r.bodyTruncated, HeaderTruncated: r.headerTruncated,
	}
	op.Header, op.Body = journalkit.DecodeHeaderBody(string(b[r.outAt:]))
	return op
}

// sweep rewrites the archive without the records taken out and those
// whose outcome is ttl old at now. An archive with neither is left as it
// is.
func (a *memoryArchive) sweep(now time.Time, ttl time.Duration) {
	kept := 0
	for i := range a.n {
		if r := a.rec(i); !r.gone && now.Sub(time.Unix(0, r.completed)) < ttl {
			kept++
		}
	}
	if kept == a.n {
		return
	}
	old := *a
	*a = memoryArchive{hash: old.hash, heads: make(map[uint64]int, kept)}
	for i := range old.n {
		r := old.rec(i)
		if r.gone || now.Sub(time.Unix(0, r.completed)) >= ttl {
			continue
		}
		prev, ok := a.heads[r.hash]
		if !ok {
			prev = -1
		}
		n, b := a.add(r.hash, prev, int(r.end))
		copy(b, old.bytes(r))
		chunk, at := n.chunk, n.at
		*n = *r
		n.chunk, n.at, n.prev = chunk, at, prev
	}
}
