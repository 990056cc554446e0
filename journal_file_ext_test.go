package idem_test

import (
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

func init() {
	idem.OpenFileJournal = func(path string) (journal.Journal, error) {
		return filejournal.Open(path, filejournal.Options{
			Now:    func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC) },
			Logger: slog.New(slog.DiscardHandler),
		})
	}
}
