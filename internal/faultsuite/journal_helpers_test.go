package faultsuite

import (
	"context"

	"github.com/idemkit/idem"
)

// list returns j's listing. The journals these tests list never fail to.
func list(j idem.Journal, which idem.Listing) []idem.Operation {
	ops, err := j.List(context.Background(), which)
	if err != nil {
		panic(err)
	}
	return ops
}

// lookup returns what j holds for id. The journals these tests look up
// never fail to.
func lookup(j idem.Journal, id string) (idem.Operation, bool) {
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil {
		panic(err)
	}
	return op, ok
}
