package journalkit

// Set: the in-process half of "one Do of an operation at a time" (C11)
// that every journal's Claim starts with.

import (
	"context"
	"sync"
)

// Set is a set of locks by name. The zero Set is ready to use; a name's
// lock exists only while it is held or awaited.
type Set struct {
	mu sync.Mutex
	m  map[string]*lock
}

type lock struct {
	held chan struct{} // holds one token while the lock is held
	refs int           // holders and waiters; the entry goes at zero
}

// Lock waits until no one holds name's lock, or ctx ends, and returns the
// function that unlocks it, or ctx's error.
func (s *Set) Lock(ctx context.Context, name string) (unlock func(), err error) {
	return s.lock(ctx, name, true)
}

// TryLock takes name's lock if no one holds it and returns the function
// that unlocks it; it returns nil, without waiting, if someone holds it.
func (s *Set) TryLock(name string) (unlock func()) {
	unlock, _ = s.lock(context.Background(), name, false)
	return unlock
}

// lock takes name's lock, waiting for it within ctx or, unless wait, not
// at all.
func (s *Set) lock(ctx context.Context, name string, wait bool) (unlock func(), err error) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*lock)
	}
	e := s.m[name]
	if e == nil {
		e = &lock{held: make(chan struct{}, 1)}
		s.m[name] = e
	}
	e.refs++
	s.mu.Unlock()

	release := func() {
		s.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(s.m, name)
		}
		s.mu.Unlock()
	}
	if err := ctx.Err(); err != nil {
		release()
		return nil, err
	}
	if !wait {
		select {
		case e.held <- struct{}{}:
			return func() { <-e.held; release() }, nil
		default:
			release()
			return nil, nil
		}
	}
	select {
	case e.held <- struct{}{}:
		return func() { <-e.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
