//go:build !race

package idem

// maxDoAllocs bounds the allocations TestDoAllocations finds Do adding to
// net/http's.
const maxDoAllocs = 22
