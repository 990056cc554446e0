package filejournal

// A Journal's claims: one Do of an operation ID at a time, across
// every Client using the journal.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// Claim waits until no other Do of id runs through this journal, or ctx
// ends. Only one process writes a file journal, so a claim on it is
// an in-process lock, and never lapses. The operation is looked up once
// the claim is held, and Claim returns Lookup's error, if any.
func (j *Journal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	unlock, err := j.running.Lock(ctx, id)
	if err != nil {
		return nil, err
	}
	return j.claimed(id, unlock)
}

// TryClaim is Claim without the wait: a *journal.HeldError at once when another Do
// of id runs through this journal.
func (j *Journal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	unlock := j.running.TryLock(id)
	if unlock == nil {
		return nil, &journal.HeldError{ID: id}
	}
	return j.claimed(id, unlock)
}

// claimed returns the claim on id, whose lock unlock releases, with the
// operation looked up.
func (j *Journal) claimed(id string, unlock func()) (journal.Claim, error) {
	c := &fileClaim{j: j, id: id, unlock: unlock}
	if err := c.load(); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// fileClaim is a Journal's Claim. It holds what the journal held of
// the operation when it was taken, or, after Begin, what Begin recorded.
type fileClaim struct {
	j      *Journal
	id     string
	unlock func()
	op     journal.Operation
	ok     bool
}

// load looks the operation up.
func (c *fileClaim) load() error {
	op, ok, err := c.j.Lookup(context.Background(), c.id)
	if err != nil {
		return err
	}
	c.op, c.ok = op, ok
	return nil
}

func (c *fileClaim) Operation() (journal.Operation, bool) { return c.op, c.ok }

func (c *fileClaim) Begin(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("filejournal: %s: Begin of %s under the claim on %s: %w", c.j.Path(), journalkit.QuoteID(op.ID), journalkit.QuoteID(c.id), journal.ErrInvalidOperation)
	}
	if op.Created.IsZero() {
		// As Begin would: the journal's clock, so the claim holds the
		// time recorded.
		op.Created = c.j.Now()
	}
	err := c.j.begin(op)
	switch {
	case err == nil:
		// What Lookup would now return.
		op.State = journal.StatePending
		op.Created = time.Unix(0, op.Created.UnixNano()).UTC()
		c.op, c.ok = op, true
	case errors.Is(err, journal.ErrOperationExists):
		// Begun outside this claim (Journal.begin is not fenced by
		// it): hold what the journal holds.
		if lerr := c.load(); lerr != nil {
			return errors.Join(err, lerr)
		}
	}
	return err
}

func (c *fileClaim) Complete(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("filejournal: %s: Complete of %s under the claim on %s: %w", c.j.Path(), journalkit.QuoteID(op.ID), journalkit.QuoteID(c.id), journal.ErrInvalidOperation)
	}
	return c.j.complete(op)
}

func (c *fileClaim) Lost() <-chan struct{} { return nil }

func (c *fileClaim) Release() {
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}
