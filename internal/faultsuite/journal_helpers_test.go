package faultsuite

import "github.com/idemkit/idem/internal/journaltest"

// list and lookup read a journal that cannot fail to be read.
var (
	list   = journaltest.MustList
	lookup = journaltest.MustLookup
)
