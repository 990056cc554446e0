package idem

import "time"

// NewMemoryJournal returns the journal a Client without Config.Journal
// keeps, for the conformance suite.
func NewMemoryJournal(keyTTL time.Duration) Journal {
	return newMemoryJournalFor(keyTTL, nil)
}

// FingerprintOf is the fingerprint Do journals for a request with that
// method, URL and body, for tests that journal an operation by hand.
var FingerprintOf = fingerprintOf
