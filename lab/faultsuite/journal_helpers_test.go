package faultsuite

import "github.com/idemkit/idem/internal/journalhelp"

// list and lookup read a journal that cannot fail to be read.
var (
	list   = journalhelp.MustList
	lookup = journalhelp.MustLookup
)
