package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Replicas are several ServerProcesses of the reference server's binary on
// one PostgreSQL database: the replicas of one service, which a load
// balancer (the chaos proxy with several upstreams) spreads the requests
// over. Each listens on a port of its own, kept across restarts, and
// appends its log to a file of its own; any of them may be killed and
// started again while the others serve.
type Replicas struct {
	// DSN is the database's postgres:// URL, every replica's -db.
	DSN string
	// Procs are the replicas, in the order they were started.
	Procs []*ServerProcess

	mu           sync.Mutex
	failedStarts []error // guarded by mu
}

// StartReplicas starts n replicas of the server binary on the PostgreSQL
// database at dsn, one after the other, with the given flags (as
// StartServer takes them); replica i logs to logDir/replica-i.log. If one
// fails to start, those already running are killed.
func StartReplicas(ctx context.Context, binary, dsn, logDir string, n int, args ...string) (*Replicas, error) {
	if !IsPostgres(dsn) {
		return nil, errors.New("faultsuite: replicas need a postgres:// database URL")
	}
	if n < 1 {
		return nil, fmt.Errorf("faultsuite: %d replicas: want at least 1", n)
	}
	r := &Replicas{DSN: dsn}
	for i := range n {
		p, err := StartServer(ctx, binary, dsn, filepath.Join(logDir, "replica-"+strconv.Itoa(i)+".log"), args...)
		if err != nil {
			for _, started := range r.Procs {
				_ = started.Kill()
			}
			return nil, fmt.Errorf("faultsuite: replica %d: %w", i, err)
		}
		r.Procs = append(r.Procs, p)
	}
	return r, nil
}

// URLs returns the replicas' base URLs, in order.
func (r *Replicas) URLs() []string {
	urls := make([]string, len(r.Procs))
	for i, p := range r.Procs {
		urls[i] = p.URL
	}
	return urls
}

// maxStarts is how many times Restart starts a replica whose process exits
// before it listens, as a supervisor with a restart policy would.
const maxStarts = 5

// Restart SIGKILLs replica i, waits down (zero: not at all), and starts it
// again with args on the same port. It returns how long the replica took
// from the kill to listening again. A start whose process exits before it
// listens is tried again, up to maxStarts times in all, as a supervisor
// would; each such failure is kept for FailedStarts.
func (r *Replicas) Restart(ctx context.Context, i int, down time.Duration, args ...string) (time.Duration, error) {
	p := r.Procs[i]
	start := time.Now()
	if err := p.Kill(); err != nil {
		return 0, fmt.Errorf("faultsuite: replica %d: %w", i, err)
	}
	if down > 0 {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("faultsuite: replica %d: %w", i, ctx.Err())
		case <-time.After(down):
		}
	}
	for n := 1; ; n++ {
		err := p.Start(ctx, args...)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrExitedBeforeListening) || n == maxStarts {
			return 0, fmt.Errorf("faultsuite: replica %d: %w", i, err)
		}
		r.mu.Lock()
		r.failedStarts = append(r.failedStarts, fmt.Errorf("replica %d: %w", i, err))
		r.mu.Unlock()
	}
	return time.Since(start), nil
}

// FailedStarts returns the starts of a replica, after a kill, whose
// process exited before it listened (and that Restart tried again).
func (r *Replicas) FailedStarts() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.failedStarts...)
}

// Stop stops every replica (see ServerProcess.Stop) and returns their
// errors joined.
func (r *Replicas) Stop(timeout time.Duration) error {
	var errs []error
	for i, p := range r.Procs {
		if err := p.Stop(timeout); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Kills returns how many times the replicas were killed, in all.
func (r *Replicas) Kills() int {
	n := 0
	for _, p := range r.Procs {
		n += p.Kills()
	}
	return n
}
