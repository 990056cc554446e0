package filejournal

import "iter"

// index is the journal's in-memory index (J8): every operation's entry,
// found by ID and kept in the order its intent was written. Entries live in
// slabs, so that recovering a million operations does not make a million
// allocations; an entry stays where it is until the index is replaced.
type index struct {
	byID  map[string]*entry
	slabs [][]entry
}

// newIndex returns an empty index with room for about n operations.
func newIndex(n int) index { return index{byID: make(map[string]*entry, n)} }

// len is the number of operations in the index.
func (x *index) len() int { return len(x.byID) }

// get returns the entry of operation id.
func (x *index) get(id string) (*entry, bool) {
	e, ok := x.byID[id]
	return e, ok
}

// add copies e into the index, last in intent order. Its ID must not be in
// the index yet.
func (x *index) add(e *entry) {
	ne := x.alloc()
	*ne = *e
	x.byID[ne.ID] = ne
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
		size := 64
		if n > 0 {
			size = min(2*cap(x.slabs[n-1]), 4096)
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
// returns the entry holding it.
func (x *index) insert(e *entry) (held *entry) {
	// Insert without looking first: one map probe per intent instead of
	// two, a tenth of the time recovery takes. If the map did not grow,
	// the ID was there already (a repeated record, or damage): find the
	// first entry with it in intent order and put it back.
	n := len(x.byID)
	x.byID[e.ID] = e
	if len(x.byID) > n {
		return nil
	}
	held = x.first(e.ID)
	x.byID[held.ID] = held
	return held
}

// first returns the earliest entry in intent order with the given ID. It is
// slow, and only used when an ID turns up twice.
func (x *index) first(id string) *entry {
	for e := range x.all() {
		if e.ID == id {
			return e
		}
	}
	return nil
}
