package idem_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// A filejournal.Journal keeps recorded responses in its file and reads them back
// when an operation is replayed (J9): the replay is byte for byte the
// response recorded, and a record changed on disk after the journal was
// opened is reported, never replayed wrong and never sent again.

func TestFileJournalReplaysTheBodyItReadsBack(t *testing.T) {
	body := strings.Repeat("receipt;", 4096)
	s := newScript(t, status(201, body, "Content-Type", "text/plain"))
	path := filepath.Join(t.TempDir(), "ops.journal")
	j := openJournal(t, path)
	c := newClient(t, fast(idem.Config{Journal: j}))
	resp, err := c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != body {
		t.Fatalf("first response: %d bytes, want %d", len(got), len(body))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, path)
	defer j.Close()
	c = newClient(t, fast(idem.Config{Journal: j}))
	resp, err = c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != body || resp.StatusCode != 201 || resp.Header.Get("Content-Type") != "text/plain" || !idem.Recorded(resp) {
		t.Fatalf("replay: %d %q, %d bytes, recorded %v; want the recorded 201 with its %d bytes", resp.StatusCode, resp.Header, len(got), idem.Recorded(resp), len(body))
	}
	if s.count() != 1 {
		t.Fatalf("server saw %d attempts, want 1", s.count())
	}
}

// Clause: J9.6.
func TestFileJournalChangedOnDiskIsReportedNotReplayed(t *testing.T) {
	body := strings.Repeat("receipt;", 4096)
	s := newScript(t, status(201, body))
	path := filepath.Join(t.TempDir(), "ops.journal")
	j := openJournal(t, path)
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j}))
	resp, err := c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)

	// A byte of the recorded body changes on disk under the open journal.
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := strings.LastIndex(string(file), "receipt;")
	if err := os.WriteFile(path, append(append(file[:at:at], "RECEIPT;"...), file[at+8:]...), 0o600); err != nil {
		t.Fatal(err)
	}

	_, ok, err := j.Lookup(context.Background(), "op-1")
	var ce *filejournal.CorruptError
	if ok || !errors.As(err, &ce) || !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(ce.Reason, "checksum") {
		t.Fatalf("Lookup of the changed record = %v, %v; want a *CorruptError", ok, err)
	}
	if _, err := j.List(context.Background(), journal.ListCompleted); !errors.Is(err, journal.ErrCorrupt) {
		t.Fatalf("List over the changed record: err = %v, want ErrCorrupt", err)
	}
	resp, err = c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, journal.ErrCorrupt) {
		t.Fatalf("Do of the operation whose record changed: err = %v, want ErrCorrupt", err)
	}
	if s.count() != 1 {
		t.Fatalf("server saw %d attempts, want 1: the operation was sent again", s.count())
	}
}
