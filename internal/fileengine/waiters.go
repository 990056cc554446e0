package fileengine

// Waking the callers that wait for an fsync (J5).
//
// A Begin whose record an fsync must cover, and which finds another
// caller's fsync running, waits in j.waiters. When that fsync ends, its
// leader wakes exactly the waiters it covered, and one waiter it did not
// cover, which leads the next fsync for all of those. A broadcast would
// wake every waiter at once, each to take mu only to find it must wait
// again, and the next fsync would start only when one of them happened to
// be scheduled first: with 64 callers that herd cost more CPU and time than
// the fsync it waited for.

import "sync"

// A waiter is a caller parked until an fsync covers record seq, or until
// it is handed the lead of the next fsync. wake has room for one value, so
// waking never blocks the waker.
type waiter struct {
	seq  uint64
	wake chan struct{}
}

var waiterPool = sync.Pool{New: func() any { return &waiter{wake: make(chan struct{}, 1)} }}

// park queues the caller until wakeWaiters picks it, releasing mu while it
// waits. The caller must then check again whether its record is covered:
// it may have been woken to lead, or because the journal failed or closed.
// Called with mu held; returns with mu held.
func (j *Journal) park(seq uint64) {
	w := waiterPool.Get().(*waiter)
	w.seq = seq
	j.waiters = append(j.waiters, w)
	j.mu.Unlock()
	<-w.wake
	waiterPool.Put(w)
	j.mu.Lock()
}

// wakeWaiters wakes the parked callers that have no reason to wait any
// longer: those syncedSeq covers, every one once the journal has failed or
// lost its file, and, while no fsync runs, one that is not covered, to lead
// the next fsync. The leader is woken last, so that it is the goroutine
// this P runs next. It also wakes Close, compaction and Forget, which wait
// on cond for a running fsync to end. Called with mu held.
func (j *Journal) wakeWaiters() {
	j.cond.Broadcast()
	all := j.failed != nil || j.f == nil
	var lead *waiter
	kept := j.waiters[:0]
	for _, w := range j.waiters {
		switch {
		case all || w.seq <= j.syncedSeq:
			w.wake <- struct{}{}
		case lead == nil && !j.syncing:
			lead = w
		default:
			kept = append(kept, w)
		}
	}
	clear(j.waiters[len(kept):])
	j.waiters = kept
	if lead != nil {
		lead.wake <- struct{}{}
	}
}
