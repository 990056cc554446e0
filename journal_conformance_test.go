package idem_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/journaltest"
)

// TestFileJournalConforms runs the journal conformance suite against the
// file journal, reopened as the next process would open it.
func TestFileJournalConforms(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Backend {
		path := filepath.Join(t.TempDir(), "ops.journal")
		o := filejournal.Options{Logger: slog.New(slog.DiscardHandler)}
		open := func(t *testing.T) journal.Journal {
			j, err := filejournal.Open(path, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			return j
		}
		j := open(t)
		return journaltest.Backend{Journal: j, Reopen: func(t *testing.T) journal.Journal {
			if err := j.(*filejournal.Journal).Close(); err != nil {
				t.Fatal(err)
			}
			return open(t)
		}}
	})
}

// TestMemoryJournalConforms runs the journal conformance suite against the
// journal a Client keeps in memory when Config.Journal is nil: with its
// budget, which keeps every outcome of the suite's, and with a budget of
// two of the suite's operations, which forgets all but the latest (C15.7).
func TestMemoryJournalConforms(t *testing.T) {
	t.Run("budget=default", func(t *testing.T) {
		journaltest.Run(t, func(t *testing.T) journaltest.Backend {
			return journaltest.Backend{Journal: idem.NewMemoryJournal(idem.DefaultKeyTTL, 0), KeptOutcomes: 1000}
		})
	})
	t.Run("budget=two operations", func(t *testing.T) {
		// The suite's operations take 100 to 200 bytes each beside the
		// record: two fit, a third does not.
		budget := 2 * (idem.MemoryRecordBytes + 200)
		journaltest.Run(t, func(t *testing.T) journaltest.Backend {
			return journaltest.Backend{Journal: idem.NewMemoryJournal(idem.DefaultKeyTTL, budget), KeptOutcomes: 2}
		})
	})
}
