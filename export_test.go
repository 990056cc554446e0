package idem

import (
	"net/url"
	"time"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/journal"
)

// NewMemoryJournal returns the journal a Client without Config.Journal
// keeps, its outcomes within budget bytes (memoryOutcomeBudget when 0),
// for the conformance suite.
func NewMemoryJournal(keyTTL time.Duration, budget int) journal.Journal {
	j := newMemoryJournalFor(keyTTL, nil, defaultMaxOperations)
	if budget > 0 {
		j.budget = budget
	}
	return j
}

// MemoryRecordBytes is what the memory journal counts for a completed
// operation beside its intent and outcome.
const MemoryRecordBytes = memoryRecordBytes

// OpenFileJournal opens a file journal with a fixed clock and no log
// output, for the benchmarks of this package, which cannot import package
// filejournal (it imports this one). An external test file sets it.
var OpenFileJournal func(path string) (journal.Journal, error)

// SetOutcomeBudget sets the bytes of completed operations c keeps whole,
// c being a Client without a journal.
func SetOutcomeBudget(c *Client, bytes int) {
	j := c.journal.(*memoryJournal)
	j.mu.Lock()
	j.budget = bytes
	j.mu.Unlock()
}

// ZeroConfigBound is the most heap a Client with the zero Config holds for
// n completed operations, beside what is in flight: its outcome budget,
// and a digest of each in segments at least 7/16 full (a segment just
// doubled), or one of the smallest.
func ZeroConfigBound(n int) int64 {
	n = min(n, defaultMaxOperations)
	return memoryOutcomeBudget + max(int64(n)*8*16/7, 8*digestSegmentMin)
}

// NewWithClock is New for a Client without a journal whose clock is now:
// a Client with a journal reads its journal's.
func NewWithClock(cfg Config, now func() time.Time) (*Client, error) { return newClient(cfg, now) }

// RedactURL returns u as a Client whose Config.RedactedParams is
// extraParams writes it.
func RedactURL(u *url.URL, extraParams ...string) string {
	return redact.New(nil, nil, extraParams).URL(u)
}

// DefaultRedactedParams and DefaultUnrecordedHeaders return copies of the
// secrets rule's default names.
var (
	DefaultRedactedParams    = redact.DefaultRedactedParams
	DefaultUnrecordedHeaders = redact.DefaultUnrecordedHeaders
)
