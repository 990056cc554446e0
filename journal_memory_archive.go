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
// visit each of them at every cycle: records without pointers, their
// strings and outcomes end to end in one byte slice, found through a map
// from the ID's hash to a record number. None of the three holds a pointer,
// so a collection does not look inside them. Records are only appended; a
// record taken out is marked, and the sweep rewrites the archive without
// the marked and the expired ones.
type memoryArchive struct {
	hash  func(id string) uint64
	heads map[uint64]int // by the ID's hash: the newest record of that hash
	recs  []archived
	data  []byte // every record's ID, key, method, URL and outcome, end to end
	taken int    // records marked taken, still in recs
}

// archived is one record of a memoryArchive. Its bytes are data[at:at+end]:
// the ID, then the key from keyAt, the method from methodAt, the URL from
// urlAt, and the outcome, encoded as a file journal encodes it, from outAt.
type archived struct {
	at                                 int
	keyAt, methodAt, urlAt, outAt, end uint32
	prev                               int // the next older record of the same hash; -1 for none
	hash                               uint64
	created, completed                 int64 // Unix nanoseconds
	fingerprint                        Fingerprint
	status                             int32
	state                              State
	bodyTruncated, headerTruncated     bool
	gone                               bool // taken out of the archive
}

// A record is an intent and an outcome of at most memoryMaxRecord bytes
// each: its offsets fit a uint32.
const _ uint32 = 2 * memoryMaxRecord

func newMemoryArchive() memoryArchive {
	seed := maphash.MakeSeed()
	return memoryArchive{hash: func(id string) uint64 { return maphash.String(seed, id) }, heads: make(map[uint64]int)}
}

// len is the number of records in the archive, taken ones included.
func (a *memoryArchive) len() int { return len(a.recs) }

// put archives e, a begun and completed operation: its ID must not be in
// the archive.
func (a *memoryArchive) put(e *memoryEntry) {
	at := len(a.data)
	a.data = append(a.data, e.intent...)
	a.data = append(a.data, e.outcome...)
	h := a.hash(e.id())
	prev, ok := a.heads[h]
	if !ok {
		prev = -1
	}
	a.heads[h] = len(a.recs)
	a.recs = append(a.recs, archived{
		at: at, keyAt: e.keyAt, methodAt: e.methodAt, urlAt: e.urlAt,
		outAt: uint32(len(e.intent)), end: uint32(len(e.intent) + len(e.outcome)),
		prev: prev, hash: h, created: e.created, completed: e.completed,
		fingerprint: e.fingerprint, status: e.status, state: e.state,
		bodyTruncated: e.bodyTruncated, headerTruncated: e.headerTruncated,
	})
}

// find returns the number of id's record, or -1.
func (a *memoryArchive) find(id string) int {
	i, ok := a.heads[a.hash(id)]
	if !ok {
		return -1
	}
	for ; i >= 0; i = a.recs[i].prev {
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
	r := &a.recs[i]
	e := &memoryEntry{
		intent: string(a.data[r.at : r.at+int(r.outAt)]), keyAt: r.keyAt, methodAt: r.methodAt, urlAt: r.urlAt,
		status: r.status, fingerprint: r.fingerprint, created: r.created, completed: r.completed,
		outcome: append([]byte(nil), a.data[r.at+int(r.outAt):r.at+int(r.end)]...),
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
		for j := head; ; j = a.recs[j].prev {
			if a.recs[j].prev == i {
				a.recs[j].prev = r.prev
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
	r := &a.recs[i]
	return string(a.data[r.at : r.at+int(r.keyAt)])
}

// operation returns record i, its header and body in fresh memory that the
// caller may keep and change.
func (a *memoryArchive) operation(i int) Operation {
	r := &a.recs[i]
	b := a.data[r.at : r.at+int(r.end)]
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
// whose outcome is ttl old at now.
func (a *memoryArchive) sweep(now time.Time, ttl time.Duration) {
	var keep []int
	size := 0
	for i := range a.recs {
		r := &a.recs[i]
		if !r.gone && now.Sub(time.Unix(0, r.completed)) < ttl {
			keep = append(keep, i)
			size += int(r.end)
		}
	}
	old := *a
	*a = memoryArchive{hash: old.hash, heads: make(map[uint64]int, len(keep)),
		recs: make([]archived, 0, len(keep)), data: make([]byte, 0, size)}
	for _, i := range keep {
		r := old.recs[i]
		at := len(a.data)
		a.data = append(a.data, old.data[r.at:r.at+int(r.end)]...)
		prev, ok := a.heads[r.hash]
		if !ok {
			prev = -1
		}
		r.at, r.prev = at, prev
		a.heads[r.hash] = len(a.recs)
		a.recs = append(a.recs, r)
	}
}
