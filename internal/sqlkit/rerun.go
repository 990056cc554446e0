package sqlkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Waits between reruns: random, up to waitBase << run, capped at waitMax.
const (
	waitBase = time.Millisecond
	waitMax  = 100 * time.Millisecond
)

// Rerun calls run, and calls it again after a short random wait (Wait)
// while it fails with an error that again accepts and fewer than reruns
// reruns have been made; onRerun, if set, is called before each rerun. It
// returns how often run ran and its last error, or the context's cause if
// ctx ends during a wait. A caller tells reruns exhausted from again(err).
func Rerun(ctx context.Context, reruns int, again func(error) bool, onRerun func(), run func() error) (int, error) {
	for n := 0; ; n++ {
		err := run()
		if err == nil || !again(err) || n >= reruns {
			return n + 1, err
		}
		if onRerun != nil {
			onRerun()
		}
		if err := Wait(ctx, n); err != nil {
			return n + 1, err
		}
	}
}

// Wait waits before rerun number run+1: its step (waitBase doubled run+1
// times, at most waitMax) from a quarter of it to five quarters, drawn at
// random, so that transactions that collided do not collide again in
// step. It returns early, with an error wrapping ctx's cause, if ctx ends.
func Wait(ctx context.Context, run int) error {
	t := time.NewTimer(WaitTime(run))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting to rerun a transaction: %w", context.Cause(ctx))
	}
}

// WaitTime draws the wait before rerun number run+1 (see Wait).
func WaitTime(run int) time.Duration {
	step := min(waitBase<<(run+1), waitMax)
	return rand.N(step) + step/4
}
