package idem

import (
	"math/bits"
	"slices"
)

// memoryDigests is the set of operations a memory journal completed and no
// longer keeps whole: an 8-byte digest of each ID, in tables that hold no
// pointer, so the collector never walks them. The tables are segments of
// at most digestSegmentMax slots, filled in the order the digests come;
// each segment has the latest slice end of its digests, and is dropped
// whole once that end is KeyTTL old. A segment is filled up to 7/8 of its
// slots, and doubled until it has digestSegmentMax of them: a digest takes
// 9 bytes in a full segment, at most 19 in one just doubled.
type memoryDigests struct {
	segs []digestSegment // by end, oldest first
	n    int             // digests in all segments
}

// The sizes of a segment, in slots: its first, and its most.
const (
	digestSegmentMin = 1 << 10
	digestSegmentMax = 1 << 20
)

// digestSegment is one table of memoryDigests.
type digestSegment struct {
	end   int64    // the latest slice end of its digests, Unix nanoseconds
	slots []uint64 // open addressing, probed linearly from a digest's top bits; 0 is empty
	n     int      // digests held
}

// add adds the digest x of an operation whose slice ends at end. A digest
// whose slice ends before the newest segment's goes to that segment, which
// keeps it as long or longer.
func (d *memoryDigests) add(x uint64, end int64) {
	k := len(d.segs) - 1
	if k < 0 || end > d.segs[k].end || d.segs[k].full() {
		if k >= 0 {
			end = max(end, d.segs[k].end)
		}
		d.segs = append(d.segs, digestSegment{end: end, slots: make([]uint64, digestSegmentMin)})
		k++
	}
	s := &d.segs[k]
	if s.crowded() {
		s.grow()
	}
	s.insert(x)
	d.n++
}

// has reports whether x is held.
func (d *memoryDigests) has(x uint64) bool {
	for i := range d.segs {
		if d.segs[i].has(x) {
			return true
		}
	}
	return false
}

// expire drops the segments whose end is at or before cutoff.
func (d *memoryDigests) expire(cutoff int64) {
	k := 0
	for k < len(d.segs) && d.segs[k].end <= cutoff {
		d.n -= d.segs[k].n
		k++
	}
	d.segs = slices.Delete(d.segs, 0, k)
}

// crowded reports whether one more digest would fill s past 7/8.
func (s *digestSegment) crowded() bool { return 8*(s.n+1) > 7*len(s.slots) }

// full reports whether s takes no more digests: crowded at its largest.
func (s *digestSegment) full() bool { return len(s.slots) == digestSegmentMax && s.crowded() }

// grow doubles s's slots.
func (s *digestSegment) grow() {
	old := s.slots
	s.slots, s.n = make([]uint64, 2*len(old)), 0
	for _, x := range old {
		if x != 0 {
			s.insert(x)
		}
	}
}

// home returns the slot where x's probe starts: x's top bits, as many as
// index the slots (a power of two).
func (s *digestSegment) home(x uint64) int {
	return int(x >> (bits.LeadingZeros64(uint64(len(s.slots))) + 1))
}

// insert puts x in the first empty slot from its home. s is not full.
func (s *digestSegment) insert(x uint64) {
	mask := len(s.slots) - 1
	for i := s.home(x); ; i = (i + 1) & mask {
		if s.slots[i] == 0 {
			s.slots[i] = x
			s.n++
			return
		}
	}
}

// has reports whether x is in s: found before an empty slot.
func (s *digestSegment) has(x uint64) bool {
	mask := len(s.slots) - 1
	for i := s.home(x); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case x:
			return true
		case 0:
			return false
		}
	}
}
