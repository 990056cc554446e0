package idem

import (
	"context"
	"sync"
)

// opLocks serializes Do calls of the same operation ID (C11). A Journal
// holds one, so that Clients sharing a journal share it too.
type opLocks struct {
	mu sync.Mutex
	m  map[string]*opLock
}

type opLock struct {
	held chan struct{} // holds one token while the operation runs
	refs int           // holders and waiters; the entry goes at zero
}

// lock waits until no other Do of id runs, or ctx ends.
func (l *opLocks) lock(ctx context.Context, id string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*opLock)
	}
	e := l.m[id]
	if e == nil {
		e = &opLock{held: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()

	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
	if err := ctx.Err(); err != nil {
		release()
		return nil, err
	}
	select {
	case e.held <- struct{}{}:
		return func() { <-e.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
