package idem_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journaltest"
)

// TestFileJournalConforms runs the journal conformance suite against the
// file journal, reopened as the next process would open it.
func TestFileJournalConforms(t *testing.T) {
	journaltest.Run(t, func(t *testing.T, keyTTL time.Duration) journaltest.Backend {
		path := filepath.Join(t.TempDir(), "ops.journal")
		o := filejournal.Options{KeyTTL: keyTTL, Logger: slog.New(slog.DiscardHandler)}
		open := func(t *testing.T) idem.Journal {
			j, err := filejournal.Open(path, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			return j
		}
		j := open(t)
		return journaltest.Backend{Journal: j, Reopen: func(t *testing.T) idem.Journal {
			if err := j.(*filejournal.Journal).Close(); err != nil {
				t.Fatal(err)
			}
			return open(t)
		}}
	})
}

// TestMemoryJournalConforms runs the journal conformance suite against the
// journal a Client keeps in memory when Config.Journal is nil.
func TestMemoryJournalConforms(t *testing.T) {
	journaltest.Run(t, func(t *testing.T, keyTTL time.Duration) journaltest.Backend {
		return journaltest.Backend{Journal: idem.NewMemoryJournal(keyTTL)}
	})
}
