//go:build !race

package idem

// maxDoAllocs bounds the allocations TestDoAllocations finds Do adding to
// net/http's. The memory journal copies an operation's ID, key, method and
// URL into one string it keeps (journal_memory.go): one allocation more
// per operation, two fewer objects for the collector to visit until the
// key expires.
const maxDoAllocs = 23
