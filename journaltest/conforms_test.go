package journaltest_test

import "testing"

// TestMapJournalConforms runs the conformance suite against mapJournal, a
// journal written only against idem's public API, so that the suite is
// known to ask nothing more of a journal than that API.
func TestMapJournalConforms(t *testing.T) { testConforms(t) }
