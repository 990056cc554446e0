//go:build race

package idem

// maxDoAllocs bounds the allocations TestDoAllocations finds Do adding to
// net/http's; the race detector adds its bookkeeping, and drops some of
// what sync.Pool is given back. One more for the memory journal's kept
// intent, as without the race detector.
const maxDoAllocs = 25
