package idem

import (
	"context"

	"github.com/idemkit/idem/journal"
)

// list returns j's listing. The journals these tests list never fail to.
func list(j journal.Journal, which journal.Listing) []journal.Operation {
	ops, err := j.List(context.Background(), which)
	if err != nil {
		panic(err)
	}
	return ops
}

// lookup returns what j holds for id. The journals these tests look up
// never fail to.
func lookup(j journal.Journal, id string) (journal.Operation, bool) {
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil {
		panic(err)
	}
	return op, ok
}
