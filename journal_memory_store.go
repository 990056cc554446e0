package idem

import (
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// memoryStore holds the completed operations a memory journal keeps whole,
// in the order they completed, in memory the collector need not walk: a
// record without pointers per operation, its bytes end to end in chunks of
// storeChunk, and an index from the digest of its ID to its record. Each
// collection follows a pointer per chunk, none per operation: a few dozen
// at the journal's budget, where an entry per operation would make each
// collection walk tens of thousands.
//
// Records are only appended, and dropped from the front: the oldest when
// the journal is over its budget, or when their time is up. A record
// replaced, or forgotten on request, is marked gone and dropped when it
// reaches the front. A chunk is freed once no record is left in it; the
// last one freed is used again. The records move to the start of their
// array when they reach its end with at least half of it dropped, or else
// to a new array twice their number: a store that drops as many as it
// takes allocates nothing for them.
type memoryStore struct {
	recs       []storedOp     // oldest first: record first+i is recs[i]
	base       []storedOp     // recs's array from its start: recs is base[len(base)-len(recs):]
	first      int            // the sequence number of recs[0]
	chunks     [][]byte       // oldest first: chunk firstChunk+i is chunks[i]
	firstChunk int            // the sequence number of chunks[0]
	spare      []byte         // a chunk freed, empty, for the next chunk
	index      map[uint64]int // a digest to the sequence number of its record, for records not gone
	bytes      int            // the sizes of recs (see size)
	live       int            // records not gone
}

// storeChunk is the size of a chunk, unless one record's bytes are more.
const storeChunk = 64 << 10

// memoryRecordBytes is what a record takes beside its bytes: the record
// and its slot in the index, rounded up.
const memoryRecordBytes = 160

// storedOp is one record of a memoryStore. Its bytes are
// chunk[at:at+n]: the ID, then the key from keyAt, the method from
// methodAt, the URL from urlAt, and from outAt the outcome, encoded as a
// file journal encodes it.
type storedOp struct {
	digest                        uint64
	end                           int64 // the end of its time slice: forgotten KeyTTL after
	created, completed            int64 // Unix nanoseconds
	keyTTL                        int64 // nanoseconds: the operation's KeyTTL
	chunk                         int
	at                            uint32
	keyAt, methodAt, urlAt, outAt uint32
	n                             uint32
	fingerprint                   journal.Fingerprint
	status                        int32
	state                         journal.State
	bodyTruncated                 bool
	headerTruncated               bool
	gone                          bool // replaced, or forgotten on request
}

// An intent and an outcome are at most memoryMaxRecord bytes each, and a
// chunk at most the larger of storeChunk and one record's bytes: offsets
// fit a uint32.
const _ uint32 = 2*memoryMaxRecord + storeChunk

// size is what r counts against the journal's budget.
func (r *storedOp) size() int { return memoryRecordBytes + int(r.n) }

// put appends the completed operation e, its digest d, forgotten KeyTTL
// after end, and returns its sequence number. A record of the same digest
// is marked gone: it is e's before, as a new ID whose digest is held is
// never begun (see memoryJournal.find).
func (s *memoryStore) put(d uint64, e *memoryEntry, end int64) int {
	if s.index == nil {
		s.index = make(map[uint64]int)
	}
	if old, ok := s.index[d]; ok {
		s.remove(old)
	}
	n := len(e.intent) + len(e.outcome)
	last := len(s.chunks) - 1
	if last < 0 || cap(s.chunks[last])-len(s.chunks[last]) < n {
		c := s.spare
		if n <= cap(c) {
			s.spare = nil
		} else {
			c = make([]byte, 0, max(storeChunk, n))
		}
		s.chunks = append(s.chunks, c)
		last++
	}
	at := len(s.chunks[last])
	s.chunks[last] = append(append(s.chunks[last], e.intent...), e.outcome...)
	if len(s.recs) == cap(s.recs) { // at the end of the array
		if s.base == nil || 2*len(s.recs) > len(s.base) { // less than half dropped: a new array, twice the records
			s.base = make([]storedOp, 0, max(2*len(s.recs), 64))
		}
		s.base = append(s.base[:0], s.recs...)
		s.recs = s.base
	}
	s.recs = append(s.recs, storedOp{
		digest: d, end: end, created: e.created, completed: e.completed, keyTTL: e.keyTTL, chunk: s.firstChunk + last, at: uint32(at),
		keyAt: e.keyAt, methodAt: e.methodAt, urlAt: e.urlAt, outAt: uint32(len(e.intent)), n: uint32(n),
		fingerprint: e.fingerprint, status: e.status, state: e.state,
		bodyTruncated: e.bodyTruncated, headerTruncated: e.headerTruncated,
	})
	s.base = s.base[:len(s.base)+1]
	seq := s.first + len(s.recs) - 1
	s.index[d] = seq
	s.bytes += s.recs[len(s.recs)-1].size()
	s.live++
	return seq
}

// find returns the record of digest d, and its sequence number.
func (s *memoryStore) find(d uint64) (*storedOp, int, bool) {
	seq, ok := s.index[d]
	if !ok {
		return nil, 0, false
	}
	return &s.recs[seq-s.first], seq, true
}

// remove marks the record seq gone, and reports whether it was there and
// not gone already.
func (s *memoryStore) remove(seq int) bool {
	i := seq - s.first
	if i < 0 || i >= len(s.recs) || s.recs[i].gone {
		return false
	}
	r := &s.recs[i]
	r.gone = true
	s.live--
	delete(s.index, r.digest)
	return true
}

// dropFront drops the oldest record, which must exist, and returns it and
// whether it was live (not gone); chunks left without a record are freed.
func (s *memoryStore) dropFront() (storedOp, bool) {
	r := s.recs[0]
	live := s.remove(s.first)
	s.recs = s.recs[1:]
	s.first++
	s.bytes -= r.size()
	keep := len(s.chunks) // none left: every chunk is freed
	if len(s.recs) > 0 {
		keep = s.recs[0].chunk - s.firstChunk
	}
	if keep > 0 && cap(s.chunks[0]) == storeChunk {
		s.spare = s.chunks[0][:0]
	}
	clear(s.chunks[:keep])
	s.chunks = s.chunks[keep:]
	s.firstChunk += keep
	return r, live
}

// bytesOf returns r's bytes.
func (s *memoryStore) bytesOf(r *storedOp) []byte {
	c := s.chunks[r.chunk-s.firstChunk]
	return c[r.at : r.at+r.n]
}

// id returns r's operation ID.
func (s *memoryStore) id(r *storedOp) string {
	return string(s.bytesOf(r)[:r.keyAt])
}

// entry returns r as an entry no claim holds, in memory of its own.
func (s *memoryStore) entry(r *storedOp, seq int) *memoryEntry {
	b := s.bytesOf(r)
	return &memoryEntry{
		intent: string(b[:r.outAt]), keyAt: r.keyAt, methodAt: r.methodAt, urlAt: r.urlAt,
		status: r.status, fingerprint: r.fingerprint, created: r.created, completed: r.completed, keyTTL: r.keyTTL,
		outcome: append([]byte(nil), b[r.outAt:]...), seq: seq,
		state: r.state, bodyTruncated: r.bodyTruncated, headerTruncated: r.headerTruncated, begun: true,
	}
}

// operation returns r, its header and body in memory of their own.
func (s *memoryStore) operation(r *storedOp) journal.Operation {
	b := s.bytesOf(r)
	op := journal.Operation{
		ID: string(b[:r.keyAt]), Key: string(b[r.keyAt:r.methodAt]), Method: string(b[r.methodAt:r.urlAt]),
		URL: string(b[r.urlAt:r.outAt]), Fingerprint: r.fingerprint, State: r.state,
		Created: time.Unix(0, r.created).UTC(), KeyTTL: time.Duration(r.keyTTL), Completed: time.Unix(0, r.completed).UTC(), Status: int(r.status),
		BodyTruncated: r.bodyTruncated, HeaderTruncated: r.headerTruncated,
	}
	op.Header, op.Body = journalkit.DecodeHeaderBody(string(b[r.outAt:]))
	readMarks(&op)
	return op
}
