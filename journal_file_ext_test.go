package idem_test

import (
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
)

func init() {
	idem.OpenFileJournal = func(path string) (idem.Journal, error) {
		return filejournal.Open(path, filejournal.Options{
			Now:    func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC) },
			Logger: slog.New(slog.DiscardHandler),
		})
	}
}
