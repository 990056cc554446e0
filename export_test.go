package idem

import "time"

// NewMemoryJournal returns the journal a Client without Config.Journal
// keeps, for the conformance suite.
func NewMemoryJournal(keyTTL time.Duration) Journal {
	return newMemoryJournalFor(keyTTL, nil)
}

// OpenFileJournal opens a file journal with a fixed clock and no log
// output, for the benchmarks of this package, which cannot import package
// filejournal (it imports this one). An external test file sets it.
var OpenFileJournal func(path string) (Journal, error)
