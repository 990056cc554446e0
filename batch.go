package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/idemkit/idem/journal"
)

// defaultMaxJournalOutage is BatchOptions.MaxJournalOutage's default: a
// routine failover of the database (Patroni's, at its default TTL of 30
// s, a managed database's), or a restart, fits in it.
const defaultMaxJournalOutage = time.Minute

// BatchOp is one operation of a batch: its ID, stable across runs, and a
// function that builds its request. Request is called for completed
// operations too, since the request must match the journaled one.
type BatchOp struct {
	ID      string
	Request func(ctx context.Context) (*http.Request, error)
}

// BatchOptions tunes RunBatch.
type BatchOptions struct {
	// Concurrency is how many operations run at once. Default 8.
	Concurrency int

	Resend func(journal.Operation) bool // as CallOptions.Resend

	// Progress, when set, is called, serialized, after each operation ends.
	Progress func(BatchResult, BatchSummary)

	MaxJournalOutage time.Duration // how long operations wait for a journal that does not answer; negative: not at all; default 1m
}

// BatchResult is how one operation of a batch ended.
type BatchResult struct {
	ID       string
	Outcome  Outcome // zero when refused before sending; Err says why
	Recorded bool    // the outcome came from the journal
	Resent   bool    // a recorded refusal was sent again (BatchOptions.Resend)
	Status   int     // the final status, or the last one for Unknown
	Body     []byte  // the final response body, read in full; the rejection's for Rejected
	Err      error   // nil for Done
}

// BatchSummary counts how the operations of a batch ended.
type BatchSummary struct {
	Done     int // applied (Recorded included)
	Rejected int // refused by the server (Recorded included)
	Unknown  int // left pending: the next run resumes them under their keys
	Expired  int // pending with a key older than KeyTTL: not sent, for a person to reconcile
	Failed   int // refused before sending for another reason, a journal that did not answer for longer than MaxJournalOutage included (see the results)
	Recorded int // of Done and Rejected, those answered from the journal: finished by an earlier run or another machine
	Skipped  int // not sent because the batch's context ended first
}

// Total is the number of operations accounted for.
func (s BatchSummary) Total() int {
	return s.Done + s.Rejected + s.Unknown + s.Expired + s.Failed + s.Skipped
}

// RunBatch runs ops, Concurrency at a time, as a job that may have been
// interrupted before: completed operations are answered from the journal,
// pending ones run first under their journaled keys, then the rest in order.
// Machines running the same batch on a shared journal split the work: an
// operation another Do holds is set aside and waited for at the end.
//
// When ctx ends, no further operation starts, and RunBatch returns the
// summary and ctx's error. Otherwise it returns an error only for an invalid
// batch (an empty or repeated ID, or no Request) or a failed listing.
func (c *Client) RunBatch(ctx context.Context, ops []BatchOp, opts BatchOptions) (BatchSummary, error) {
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if op.ID == "" || op.Request == nil || seen[op.ID] {
			return BatchSummary{}, fmt.Errorf("idem: %w: batch operation %q: empty or repeated ID, or no Request", ErrInvalidRequest, op.ID)
		}
		seen[op.ID] = true
	}

	// Pending operations first: they have been sent before, so their
	// outcome is the most overdue, and their keys are the closest to
	// KeyTTL.
	resumable, err := newOutage(opts.MaxJournalOutage).list(ctx, c.journal)
	if err != nil {
		return BatchSummary{}, wrapf(err, "batch: listing pending operations")
	}
	pending := make(map[string]bool, len(resumable))
	for _, op := range resumable {
		pending[op.ID] = true
	}
	order := slices.Clone(ops)
	slices.SortStableFunc(order, func(a, b BatchOp) int {
		return boolRank(pending[b.ID]) - boolRank(pending[a.ID])
	})
	summary, err := c.runBatch(ctx, slices.Values(order), opts)
	summary.Skipped += len(order) - summary.Total() // never read: the context ended first
	return summary, err
}

// runBatch runs the operations ops yields, opts.Concurrency at a time,
// in two passes. The first takes every operation it can claim at once
// and sets aside those another Do holds; the second runs the ones set
// aside, each waiting for its claim within ctx. A batch shared by many
// machines thus splits the work between them: each takes what the others
// do not hold, and waits only at the end, for operations still held (a
// dead machine's, once its lease lapses).
func (c *Client) runBatch(ctx context.Context, ops iter.Seq[BatchOp], opts BatchOptions) (BatchSummary, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Resend != nil {
		o, _ := ctx.Value(callOptionsKey{}).(CallOptions)
		o.Resend = opts.Resend
		ctx = WithCallOptions(ctx, o)
	}
	out := newOutage(opts.MaxJournalOutage)
	var (
		mu      sync.Mutex
		summary BatchSummary
		aside   []BatchOp
	)
	report := func(r BatchResult) {
		mu.Lock()
		defer mu.Unlock()
		summary.add(ctx, r)
		if opts.Progress != nil {
			opts.Progress(r, summary)
		}
	}
	_, stopped := feed(ctx, ops, opts.Concurrency, func(op BatchOp) {
		if r, held := out.ride(ctx, op, false, c.runOne); !held {
			report(r)
			return
		}
		mu.Lock()
		aside = append(aside, op)
		mu.Unlock()
	})
	if stopped {
		summary.Skipped++ // read, not started
	}
	started, _ := feed(ctx, slices.Values(aside), opts.Concurrency, func(op BatchOp) {
		r, _ := out.ride(ctx, op, true, c.runOne)
		report(r)
	})
	summary.Skipped += len(aside) - started // set aside, not run again
	return summary, ctx.Err()
}

// feed runs run on the operations ops yields, n at a time, until ctx ends.
// It returns how many it started, and whether it stopped at one read but
// not started because ctx ended.
func feed(ctx context.Context, ops iter.Seq[BatchOp], n int, run func(BatchOp)) (started int, stopped bool) {
	var (
		wg   sync.WaitGroup
		work = make(chan BatchOp)
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range work {
				run(op)
			}
		}()
	}
	for op := range ops {
		if ctx.Err() == nil { // select alone may still pick a ready worker
			select {
			case work <- op:
				started++
				continue
			case <-ctx.Done():
			}
		}
		stopped = true
		break
	}
	close(work)
	wg.Wait()
	return started, stopped
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runOne runs one operation of a batch. Unless wait, an operation another
// Do holds is not run: runOne reports it held.
func (c *Client) runOne(ctx context.Context, op BatchOp, wait bool) (r BatchResult, held bool) {
	r = BatchResult{ID: op.ID}
	if err := ctx.Err(); err != nil {
		r.Err = err
		return r, false
	}
	if op.ID == "" || op.Request == nil {
		r.Err = fmt.Errorf("idem: %w: batch operation %q: empty ID, or no Request", ErrInvalidRequest, op.ID)
		return r, false
	}
	resent, err := c.resendBeforeClaim(ctx, op.ID) // resend.go
	if err != nil {
		r.Err = err
		return r, false
	}
	r.Resent = resent
	var claim journal.Claim
	if wait {
		claim, err = c.journal.Claim(ctx, op.ID)
	} else {
		claim, err = c.journal.TryClaim(ctx, op.ID)
		if he := (*journal.HeldError)(nil); errors.As(err, &he) && he.Err == nil {
			return r, true
		}
	}
	if err != nil {
		r.Err = wrapf(err, "batch operation %q", op.ID)
		return r, false
	}
	// An operation completed before (by an earlier run, or by another
	// machine sharing the journal) goes through Do too: its request is
	// judged against the journaled one before its outcome is
	// answered from the journal, and counted as Recorded.
	req, err := op.Request(ctx)
	if err != nil {
		claim.Release()
		r.Err = fmt.Errorf("idem: building request of %q: %w", op.ID, err)
		return r, false
	}
	resp, err := c.doClaimed(op.ID, req, claim)
	if he := (*journal.HeldError)(nil); !wait && errors.As(err, &he) && he.Err == nil {
		return r, true // another machine began it since the claim (Claim.Begin)
	}
	if err != nil {
		r.Err = err
		var oe *OutcomeError
		if errors.As(err, &oe) {
			r.Outcome, r.Status, r.Body, r.Recorded = oe.Outcome, oe.Status, oe.Body, oe.Recorded
		}
		return r, false
	}
	defer resp.Body.Close()
	r.Outcome, r.Status, r.Recorded = OutcomeDone, resp.StatusCode, Recorded(resp)
	if r.Body, err = io.ReadAll(resp.Body); err != nil && !errors.Is(err, ErrBodyNotRecorded) {
		r.Err = wrapf(err, "reading response of %q", op.ID)
	}
	return r, false
}

// add counts r, which ended while the batch's context was ctx: an
// operation is Skipped only when its error is ctx's, ended; a journal that
// did not answer in time (journal.ErrUnavailable, which may wrap
// context.DeadlineExceeded) is Failed.
func (s *BatchSummary) add(ctx context.Context, r BatchResult) {
	switch {
	case r.Outcome == OutcomeDone:
		s.Done++
	case r.Outcome == OutcomeRejected:
		s.Rejected++
	case r.Outcome == OutcomeUnknown:
		s.Unknown++
	case errors.Is(r.Err, ErrKeyExpired):
		s.Expired++
	case ctx.Err() != nil && errors.Is(r.Err, ctx.Err()) && !errors.Is(r.Err, journal.ErrUnavailable):
		s.Skipped++
	default:
		s.Failed++
	}
	if r.Recorded {
		s.Recorded++
	}
}

// outage is a batch's view of its journal's outages: since when no
// operation got an answer from it.
type outage struct {
	max   time.Duration // MaxJournalOutage; negative: no wait
	mu    sync.Mutex
	since time.Time // the first refusal of the outage; zero while the journal answers
}

// newOutage returns the outage state of a batch whose
// BatchOptions.MaxJournalOutage is max.
func newOutage(max time.Duration) *outage {
	if max == 0 {
		max = defaultMaxJournalOutage
	}
	return &outage{max: max}
}

// ride runs op with run, and again after a pause each time it ends
// refused by a journal that did not answer, or with its claim lost,
// while the outage is within bounds and ctx lasts. A result of an
// operation the outage left unsent when ctx ended says so, as ctx's.
func (o *outage) ride(ctx context.Context, op BatchOp, wait bool,
	run func(context.Context, BatchOp, bool) (BatchResult, bool)) (BatchResult, bool) {
	var pause *backoff.ExponentialBackOff
	for {
		r, held := run(ctx, op, wait)
		if held || !o.outOfJournal(r) {
			return r, held
		}
		if pause == nil {
			pause = newPause()
		}
		t := time.NewTimer(pause.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			if r.Outcome == 0 {
				r.Err = fmt.Errorf("idem: batch operation %q: %w (while the journal did not answer: %v)", op.ID, ctx.Err(), r.Err)
			}
			return r, false
		case <-t.C:
		}
	}
}

// list lists j's pending operations, again after a pause while j does
// not answer, as ride runs an operation.
func (o *outage) list(ctx context.Context, j journal.Journal) ([]journal.Operation, error) {
	var pause *backoff.ExponentialBackOff
	for {
		ops, err := j.List(ctx, journal.ListPending)
		if !o.outOfJournal(BatchResult{Err: err}) {
			return ops, err
		}
		if pause == nil {
			pause = newPause()
		}
		t := time.NewTimer(pause.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// newPause returns the pauses between an operation's runs during an
// outage: from a tenth of a second, growing, up to two seconds, jittered.
func newPause() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
}

// outOfJournal reports whether r should run again: it ended for a
// journal that did not answer, before sending (journal.ErrUnavailable) or
// by losing its claim (ErrClaimLost), within max of the outage's start.
// Any other result ends the outage.
func (o *outage) outOfJournal(r BatchResult) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := r.Outcome != OutcomeDone && r.Outcome != OutcomeRejected &&
		(errors.Is(r.Err, journal.ErrUnavailable) || errors.Is(r.Err, journal.ErrClaimLost))
	switch {
	case !out:
		o.since = time.Time{}
		return false
	case o.max < 0:
		return false
	case o.since.IsZero():
		o.since = time.Now()
	}
	return time.Since(o.since) < o.max
}
