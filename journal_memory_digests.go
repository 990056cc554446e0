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
	slots []uint64 // open addressing, probed linearly from a digest's top bits, Robin Hood order; 0 is empty
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

// insert puts x in the first slot from its home (its top bits, as many as
// index the slots, a power of two) that is empty or holds a digest nearer
// its own home than x is to x's, which then moves on in x's place (Robin
// Hood hashing). So every digest a probe passes is at least as far from
// its home as the probe from its start: a probe for a digest not held
// ends at the first that is nearer (see has). s is not full.
func (s *digestSegment) insert(x uint64) {
	mask := len(s.slots) - 1
	shift := bits.LeadingZeros64(uint64(len(s.slots))) + 1
	for i, far := int(x>>shift), 0; ; i, far = (i+1)&mask, far+1 {
		y := s.slots[i]
		if y == 0 {
			s.slots[i] = x
			s.n++
			return
		}
		if yfar := (i - int(y>>shift)) & mask; yfar < far {
			s.slots[i], x, far = x, y, yfar
		}
	}
}

// has reports whether x is in s: found before an empty slot, or a digest
// nearer its home than x would be there.
func (s *digestSegment) has(x uint64) bool {
	mask := len(s.slots) - 1
	shift := bits.LeadingZeros64(uint64(len(s.slots))) + 1
	for i, far := int(x>>shift), 0; ; i, far = (i+1)&mask, far+1 {
		y := s.slots[i]
		if y == x {
			return true
		}
		if y == 0 || (i-int(y>>shift))&mask < far {
			return false
		}
	}
}
