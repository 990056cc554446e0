// Package journalhelp sets up and reads journals in this repository's
// tests. Its functions panic or return errors rather than take a
// *testing.T, so that setup code can call them anywhere.
package journalhelp

import (
	"context"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// MustList returns j's listing, and panics on an error. It is for tests of
// journals that cannot fail to list, such as the file and memory journals.
func MustList(j journal.Journal, which journal.Listing) []journal.Operation {
	ops, err := j.List(context.Background(), which)
	if err != nil {
		panic(err)
	}
	return ops
}

// MustLookup returns what j holds for id, and panics on an error, as
// MustList does.
func MustLookup(j journal.Journal, id string) (journal.Operation, bool) {
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil {
		panic(err)
	}
	return op, ok
}

// Begin journals op's intent in j under a claim of its own, as a Client
// does before its first attempt; a zero KeyTTL is the Client's default,
// 24 hours. It is for tests that set a journal up by hand.
func Begin(j journal.Journal, op journal.Operation) error {
	if op.KeyTTL == 0 {
		op.KeyTTL = journalkit.DefaultKeyTTL
	}
	c, err := j.Claim(context.Background(), op.ID)
	if err != nil {
		return err
	}
	defer c.Release()
	return c.Begin(context.Background(), op)
}

// Complete records op's outcome in j under a claim of its own, as Begin
// journals an intent.
func Complete(j journal.Journal, op journal.Operation) error {
	c, err := j.Claim(context.Background(), op.ID)
	if err != nil {
		return err
	}
	defer c.Release()
	return c.Complete(context.Background(), op)
}
