package faultsuite

import (
	"context"
	"fmt"
	"sync"
)

// progress is a Recorder that passes events on and counts outcomes, so
// that a test can wait for a run to have made some progress before it
// kills something.
type progress struct {
	Recorder
	mu       sync.Mutex
	outcomes int
	changed  chan struct{} // closed and replaced at each outcome
}

func newProgress(rec Recorder) *progress {
	return &progress{Recorder: rec, changed: make(chan struct{})}
}

// Outcome passes the outcome on and counts it.
func (p *progress) Outcome(op string, r Result) {
	p.Recorder.Outcome(op, r)
	p.mu.Lock()
	p.outcomes++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// count returns the outcomes so far.
func (p *progress) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcomes
}

// waitFor waits until n outcomes have been counted. It returns false if
// stop is closed first, and an error if ctx ends first.
func (p *progress) waitFor(ctx context.Context, n int, stop <-chan struct{}) (bool, error) {
	for {
		p.mu.Lock()
		got, changed := p.outcomes, p.changed
		p.mu.Unlock()
		if got >= n {
			return true, nil
		}
		select {
		case <-changed:
		case <-stop:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for %d outcomes (have %d): %w", n, got, ctx.Err())
		}
	}
}
