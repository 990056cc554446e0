package idem

import "time"

// NewMemoryJournal returns the journal a Client without Config.Journal
// keeps, for the conformance suite.
func NewMemoryJournal(keyTTL time.Duration) Journal {
	return newMemoryJournalFor(keyTTL, nil)
}
