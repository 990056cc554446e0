package journaltest_test

// mapJournal is a minimal journal.Journal, written only against idem's public
// API as a journal outside this module would be: its operations live in a
// map under a mutex, and each operation ID has a lock that its claim holds.
// It passes the whole conformance suite.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/journaltest"
)

// testConforms is a journal's conformance test. In the journal's own
// package it is a test function, func TestConforms(t *testing.T); here
// TestMapJournalConforms runs it.
func testConforms(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Backend {
		s := newStore() // the journal's storage, as a database would be
		return journaltest.Backend{
			Journal: openMapJournal(s),
			// The next process opens the same storage.
			Reopen: func(*testing.T) journal.Journal { return openMapJournal(s) },
		}
	})
}

// Example is a minimal journal that passes the suite, and the test that
// runs the suite against it: testConforms. Run needs the test's
// *testing.T, so this example does not run on its own.
func Example() {}

// store is where a mapJournal keeps its operations. It outlives the
// journals opened on it, as a database outlives the process that opened
// it; one journal at a time uses it.
type store struct {
	mu  sync.Mutex
	ops map[string]journal.Operation // by ID, as Lookup returns them
}

// newStore returns an empty store.
func newStore() *store { return &store{ops: make(map[string]journal.Operation)} }

// mapJournal is a journal opened on a store. Its claims hold within this
// process.
type mapJournal struct {
	s *store

	mu    sync.Mutex
	locks map[string]chan struct{} // by ID; full while a claim holds the ID
}

var (
	_ journal.Journal       = (*mapJournal)(nil)
	_ journal.ClaimBeginner = (*mapJournal)(nil)
)

// openMapJournal opens a journal on s.
func openMapJournal(s *store) *mapJournal {
	return &mapJournal{s: s, locks: make(map[string]chan struct{})}
}

// lock returns the claim lock of id.
func (j *mapJournal) lock(id string) chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.locks[id]
	if l == nil {
		l = make(chan struct{}, 1)
		j.locks[id] = l
	}
	return l
}

// Claim waits for id's lock within ctx.
func (j *mapJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := j.lock(id)
	select {
	case l <- struct{}{}:
		return j.claimed(id, l), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TryClaim takes id's lock if it is free.
func (j *mapJournal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := j.lock(id)
	select {
	case l <- struct{}{}:
		return j.claimed(id, l), nil
	default:
		return nil, &journal.HeldError{ID: id}
	}
}

// ClaimBegin claims op.ID and begins op if the store holds nothing for it.
// A journal need not have it (journal.ClaimBeginner); one that does is
// checked by the suite.
func (j *mapJournal) ClaimBegin(ctx context.Context, op journal.Operation) (journal.Claim, error) {
	c, err := j.Claim(ctx, op.ID)
	if err != nil {
		return nil, err
	}
	if _, ok := c.Operation(); !ok {
		if err := c.Begin(ctx, op); err != nil {
			c.Release()
			return nil, err
		}
	}
	return c, nil
}

// claimed returns the claim on id, whose lock l the caller holds.
func (j *mapJournal) claimed(id string, l chan struct{}) *mapClaim {
	op, ok := j.read(id)
	return &mapClaim{j: j, id: id, lock: l, op: op, ok: ok}
}

// read returns a copy of what the store holds for id.
func (j *mapJournal) read(id string) (journal.Operation, bool) {
	j.s.mu.Lock()
	defer j.s.mu.Unlock()
	op, ok := j.s.ops[id]
	return clone(op), ok
}

// Lookup returns what the store holds for id.
func (j *mapJournal) Lookup(_ context.Context, id string) (journal.Operation, bool, error) {
	op, ok := j.read(id)
	return op, ok, nil
}

// List returns the operations which selects, by Created and then by ID.
func (j *mapJournal) List(_ context.Context, which journal.Listing) ([]journal.Operation, error) {
	now := j.Now()
	j.s.mu.Lock()
	var ops []journal.Operation
	for _, op := range j.s.ops {
		if which.Selects(op, now) {
			ops = append(ops, clone(op))
		}
	}
	j.s.mu.Unlock()
	slices.SortFunc(ops, func(a, b journal.Operation) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return ops, nil
}

// Now returns the machine's clock.
func (j *mapJournal) Now() time.Time { return time.Now() }

// mapClaim is a mapJournal's claim on one ID.
type mapClaim struct {
	j    *mapJournal
	id   string
	lock chan struct{} // nil once released
	op   journal.Operation
	ok   bool // op is what the store held, or what Begin recorded
}

// Operation returns what the store held when the claim was taken, or
// what Begin recorded.
func (c *mapClaim) Operation() (journal.Operation, bool) { return clone(c.op), c.ok }

// Begin records op's intent, unless the store holds the ID already.
func (c *mapClaim) Begin(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("mapjournal: Begin of %q under the claim on %q: %w", op.ID, c.id, journal.ErrInvalidOperation)
	}
	if err := journal.CheckIntent(op); err != nil {
		return fmt.Errorf("mapjournal: begin %q: %w", op.ID, err)
	}
	if op.Created.IsZero() {
		op.Created = c.j.Now()
	}
	op.Created, op.State = op.Created.UTC(), journal.StatePending
	s := c.j.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ops[op.ID]; ok {
		return fmt.Errorf("mapjournal: begin %q: %w", op.ID, journal.ErrOperationExists)
	}
	s.ops[op.ID] = op
	c.op, c.ok = op, true
	return nil
}

// Complete records op's outcome on the intent the store holds.
func (c *mapClaim) Complete(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("mapjournal: Complete of %q under the claim on %q: %w", op.ID, c.id, journal.ErrInvalidOperation)
	}
	if err := journal.CheckOutcome(op); err != nil {
		return fmt.Errorf("mapjournal: complete %q: %w", op.ID, err)
	}
	if op.Completed.IsZero() {
		op.Completed = c.j.Now()
	}
	s := c.j.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.ops[op.ID]
	switch {
	case !ok:
		return fmt.Errorf("mapjournal: complete %q: %w", op.ID, journal.ErrNoSuchOperation)
	case op.Key != "" && op.Key != rec.Key:
		return fmt.Errorf("mapjournal: complete %q under another key: %w", op.ID, journal.ErrInvalidOperation)
	}
	rec.State, rec.Status, rec.Completed = op.State, op.Status, op.Completed.UTC()
	rec.Header, rec.HeaderTruncated = kept(op.Header), op.HeaderTruncated
	rec.Body, rec.BodyTruncated = bytes.Clone(op.Body), op.BodyTruncated
	rec.Applied, rec.KeyReused, rec.Settled, rec.SettledNote = op.Applied, op.KeyReused, op.Settled, op.SettledNote
	rec.Unrecorded = slices.Clone(op.Unrecorded)
	if len(rec.Body) == 0 {
		rec.Body = nil
	}
	s.ops[op.ID] = rec
	return nil
}

// Lost returns nil: the claim cannot lapse.
func (c *mapClaim) Lost() <-chan struct{} { return nil }

// Release frees the ID's lock, once.
func (c *mapClaim) Release() {
	if c.lock != nil {
		<-c.lock
		c.lock = nil
	}
}

// clone returns op with a header and body of its own.
func clone(op journal.Operation) journal.Operation {
	op.Header, op.Body, op.Unrecorded = op.Header.Clone(), bytes.Clone(op.Body), slices.Clone(op.Unrecorded)
	return op
}

// kept returns a copy of h, nil if h has no names, and nil for the values
// of a name that has none.
func kept(h http.Header) http.Header {
	if len(h) == 0 {
		return nil
	}
	out := make(http.Header, len(h))
	for name, values := range h {
		out[name] = nil
		if len(values) > 0 {
			out[name] = slices.Clone(values)
		}
	}
	return out
}
