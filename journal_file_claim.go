package idem

// A FileJournal's claims (C11): one Do of an operation ID at a time, across
// every Client using the journal.

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/internal/filejournal"
)

// Claim waits until no other Do of id runs through this journal, or ctx
// ends. Only one process writes a file journal (J4), so a claim on it is
// an in-process lock, and never lapses.
func (j *FileJournal) Claim(ctx context.Context, id string) (Claim, error) {
	unlock, err := j.running.Lock(ctx, id)
	if err != nil {
		return nil, err
	}
	return &fileClaim{j: j, id: id, unlock: unlock}, nil
}

// fileClaim is a FileJournal's Claim.
type fileClaim struct {
	j      *FileJournal
	id     string
	unlock func()
}

func (c *fileClaim) Operation() (Operation, bool) {
	op, ok, _ := c.j.Lookup(context.Background(), c.id)
	return op, ok
}

func (c *fileClaim) Begin(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal %s: Begin of %s under the claim on %s: %w", c.j.Path(), filejournal.QuoteID(op.ID), filejournal.QuoteID(c.id), ErrInvalidOperation)
	}
	return c.j.Begin(op)
}

func (c *fileClaim) Complete(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal %s: Complete of %s under the claim on %s: %w", c.j.Path(), filejournal.QuoteID(op.ID), filejournal.QuoteID(c.id), ErrInvalidOperation)
	}
	return c.j.Complete(op)
}

func (c *fileClaim) Lost() <-chan struct{} { return nil }

func (c *fileClaim) Release() {
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}
