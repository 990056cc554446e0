package idem_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/journal"
)

// noInventedHeader fails t if h holds a field idem would have invented.
func noInventedHeader(t *testing.T, what string, h http.Header) {
	t.Helper()
	for name := range h {
		if strings.HasPrefix(name, "Idem-") {
			t.Fatalf("%s: the response carries %s: %v", what, name, h)
		}
	}
}

// C16.2: an outcome settled by hand is recorded with the marks as fields
// (Settled, SettledNote), and the response a later Do answers from the
// journal carries no header field for them.
func TestASettledOutcomeCarriesNoInventedHeader(t *testing.T) {
	w := newWire(t, hangUp)
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
	if _, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}")); err == nil {
		t.Fatal("a hung-up attempt: no error")
	}
	if err := idem.Settle(context.Background(), j, "op", idem.Settlement{State: journal.StateDone, Status: 201, Note: "ch_1 in the dashboard"}); err != nil {
		t.Fatal(err)
	}
	op, _ := lookup(j, "op")
	if !op.Settled || op.SettledNote != "ch_1 in the dashboard" || op.Header != nil || op.Applied {
		t.Fatalf("recorded %+v; want settled with its note, and no header", op)
	}
	resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !idem.Recorded(resp) || resp.StatusCode != 201 || len(resp.Header) != 0 {
		t.Fatalf("recorded %v, status %d, header %v; want the settled 201 with no header", idem.Recorded(resp), resp.StatusCode, resp.Header)
	}
	if n := len(w.attempts()); n != 1 {
		t.Fatalf("the server saw %d attempts, want 1", n)
	}
}

// C16.3: a record written before the marks were fields holds them as
// header fields (Idem-Already-Applied, Idem-Settled, Idem-Settled-Note,
// Idem-Key-Reused, Idem-Unrecorded-Headers): it reads back with the marks
// in the fields and the fields gone from the header, and a Do answered
// from it carries only the server's fields.
func TestAnOldRecordsHeaderMarksReadAsFields(t *testing.T) {
	w := newWire(t, status(201, `{"id":"ch_1"}`, "Content-Type", "application/json"))
	dir := t.TempDir()
	j := openJournal(t, filepath.Join(dir, "new.journal"))
	c := newClient(t, idem.Config{Journal: j})
	resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	op, _ := lookup(j, "op")
	j.Close()

	// The old record, written by the engine as the earlier release did:
	// the marks in the stored header.
	oldPath := filepath.Join(dir, "old.journal")
	eng, err := fileengine.Open(oldPath, fileengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Begin(fileengine.Intent{ID: op.ID, Key: op.Key, Method: op.Method, URL: op.URL,
		Fingerprint: op.Fingerprint, Created: op.Created, KeyTTL: op.KeyTTL}); err != nil {
		t.Fatal(err)
	}
	old := http.Header{"Content-Type": {"application/json"}, "Idem-Already-Applied": {"true"},
		"Idem-Settled": {"by hand"}, "Idem-Settled-Note": {"seen"}, "Idem-Unrecorded-Headers": {"Authorization, Set-Cookie"}}
	if err := eng.Complete(fileengine.Completion{ID: op.ID, Key: op.Key, State: fileengine.State(journal.StateDone),
		Completed: op.Completed, Status: 201, Header: old, Body: []byte(`{"id":"ch_1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	j = openJournal(t, oldPath)
	defer j.Close()
	got, _ := lookup(j, "op")
	if !got.Applied || !got.Settled || got.SettledNote != "seen" || got.KeyReused != "" ||
		!slices.Equal(got.Unrecorded, []string{"Authorization", "Set-Cookie"}) ||
		len(got.Header) != 1 || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the old record reads as %+v; want its marks as fields, Content-Type alone in the header", got)
	}
	c = newClient(t, idem.Config{Journal: j})
	resp, err = c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	noInventedHeader(t, "answered from the old record", resp.Header)
	if !idem.Recorded(resp) || !idem.AlreadyApplied(resp) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("recorded %v, applied %v, header %v; want the old record's applied answer", idem.Recorded(resp), idem.AlreadyApplied(resp), resp.Header)
	}
	if n := len(w.attempts()); n != 1 {
		t.Fatalf("the server saw %d attempts, want 1", n)
	}
}

// C16.1: AlreadyApplied and Recorded say no of a nil response, and of a
// response a Client did not return, whatever its header says.
func TestTheAccessorsOfAResponseNotFromAClient(t *testing.T) {
	if idem.AlreadyApplied(nil) || idem.Recorded(nil) {
		t.Fatal("a nil response reported applied or recorded")
	}
	req, _ := http.NewRequest(http.MethodPost, "http://example.test/", nil)
	for _, resp := range []*http.Response{
		{Header: http.Header{"Idem-Already-Applied": {"true"}}, Body: http.NoBody},
		{Header: http.Header{"Idem-Already-Applied": {"true"}}, Body: http.NoBody, Request: req},
	} {
		if idem.AlreadyApplied(resp) || idem.Recorded(resp) {
			t.Fatalf("a response not from a Client (request %v) reported applied or recorded", resp.Request != nil)
		}
	}
}
