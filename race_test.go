//go:build race

package idem

// maxDoAllocs bounds the allocations TestDoAllocations finds Do adding to
// net/http's; the race detector's bookkeeping adds one of its own.
const maxDoAllocs = 35
