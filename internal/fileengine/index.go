package fileengine

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// index is the journal's in-memory index (J8): every operation's entry,
// found by ID and kept in the order its intent was written. Entries live in
// slabs, so that recovering a million operations does not make a million
// allocations; an entry stays where it is until the index is replaced.
//
// Entries are found through an open-addressing hash table of entry
// numbers rather than a map keyed by ID: a slot is 8 bytes, where a map's
// holds a copy of the ID's string header and a pointer, and growing it
// rehashes from the slots alone, never from the IDs. At ten million
// operations that is the difference between a few and several tens of
// bytes per operation. Nothing is ever removed from an index: compaction,
// Forget and the failure latch build a new one.
type index struct {
	slabs [][]entry
	n     int // entries inserted
	// table holds, per used slot, the low 32 bits of the ID's hash above
	// the entry's number plus one; 0 is an empty slot. Its length is a
	// power of two, at most three quarters used.
	table []uint64
	seed  maphash.Seed
	// touched keeps the sum of the slots touch read, so that the reads
	// are made.
	touched uint64
}

// Slab sizes: 64, 128, ... doubling up to slabMax entries, then slabMax
// each. firstSlabs is the number of entries in the slabs before the first
// of size slabMax.
const (
	slabMin    = 64
	slabMax    = 4096
	firstSlabs = slabMax - slabMin
)

// newIndex returns an empty index with room for about n operations.
func newIndex(n int) index {
	x := index{seed: maphash.MakeSeed()}
	x.reserve(n)
	return x
}

// len is the number of operations in the index.
func (x *index) len() int { return x.n }

// hash returns the low 32 bits of id's hash: where its probe starts, and
// the tag its slot carries.
func (x *index) hash(id string) uint32 { return uint32(maphash.String(x.seed, id)) }

// hashBytes is hash of an ID in bytes.
func (x *index) hashBytes(id []byte) uint32 { return uint32(maphash.Bytes(x.seed, id)) }

// at returns entry number i.
func (x *index) at(i int) *entry {
	if i < firstSlabs {
		k := bits.Len(uint(i/slabMin+1)) - 1
		return &x.slabs[k][i-slabMin*(1<<k-1)]
	}
	i -= firstSlabs
	return &x.slabs[bits.Len(slabMax/slabMin)-1+i/slabMax][i%slabMax]
}

// find returns the slot of id, whose hash is h, in the table: the slot
// holding it, or the empty slot where it would go.
func find[ID string | []byte](x *index, id ID, h uint32) (slot int, e *entry) {
	mask := len(x.table) - 1
	for p := int(h) & mask; ; p = (p + 1) & mask {
		s := x.table[p]
		if s == 0 {
			return p, nil
		}
		if uint32(s>>32) == h {
			if e := x.at(int(uint32(s)) - 1); e.ID == string(id) {
				return p, e
			}
		}
	}
}

// findIn returns the entry of id, whose hash is h, or nil.
func findIn(x *index, id []byte, h uint32) *entry {
	if x.n == 0 {
		return nil
	}
	_, e := find(x, id, h)
	return e
}

// get returns the entry of operation id.
func (x *index) get(id string) (*entry, bool) {
	if x.n == 0 {
		return nil, false
	}
	_, e := find(x, id, x.hash(id))
	return e, e != nil
}

// touch reads the table slots where the records' IDs are found or go, so
// that the reads, which do not depend on one another, overlap: recovery
// then finds each slot in the cache (recover.go, batch).
func (x *index) touch(recs []decoded) {
	mask := len(x.table) - 1
	var sum uint64
	for i := range recs {
		sum += x.table[int(recs[i].hash)&mask]
	}
	x.touched = sum
}

// add copies e into the index, last in intent order. Its ID must not be in
// the index yet.
func (x *index) add(e *entry) {
	ne := x.alloc()
	*ne = *e
	x.insert(ne)
}

// all yields every entry, in the order its intent was written.
func (x *index) all() iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		for _, slab := range x.slabs {
			for i := range slab {
				if !yield(&slab[i]) {
					return
				}
			}
		}
	}
}

// alloc returns a zeroed entry, last in intent order, that get does not
// find yet: recovery decodes an intent into it in place, then inserts it
// or takes it back with unalloc.
func (x *index) alloc() *entry {
	n := len(x.slabs)
	if n == 0 || len(x.slabs[n-1]) == cap(x.slabs[n-1]) {
		size := slabMin
		if n > 0 {
			size = min(2*cap(x.slabs[n-1]), slabMax)
		}
		x.slabs = append(x.slabs, make([]entry, 0, size))
		n++
	}
	s := &x.slabs[n-1]
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

// unalloc takes back the entry alloc just returned.
func (x *index) unalloc() {
	s := &x.slabs[len(x.slabs)-1]
	(*s)[len(*s)-1] = entry{}
	*s = (*s)[:len(*s)-1]
}

// insert makes e, the entry alloc just returned, found by its ID, unless
// the index holds that ID already: then it leaves the index as it was and
// returns the entry holding it, the earliest in intent order.
func (x *index) insert(e *entry) (held *entry) {
	return x.insertHashed(e, x.hash(e.ID))
}

// insertHashed is insert of an entry whose ID's hash is h.
func (x *index) insertHashed(e *entry, h uint32) (held *entry) {
	x.reserve(x.n + 1)
	slot, held := find(x, e.ID, h)
	if held != nil {
		return held
	}
	x.table[slot] = uint64(h)<<32 | uint64(x.n+1)
	x.n++
	return nil
}

// reserve grows the table, if need be, to hold n entries.
func (x *index) reserve(n int) {
	size := len(x.table)
	for size < 8 || n > size/4*3 {
		size = max(2*size, 8)
	}
	if size == len(x.table) {
		return
	}
	old := x.table
	x.table = make([]uint64, size)
	mask := size - 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		p := int(uint32(s>>32)) & mask
		for x.table[p] != 0 {
			p = (p + 1) & mask
		}
		x.table[p] = s
	}
}
