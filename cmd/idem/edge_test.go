package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

// A response body larger than the recording limit is printed in full the
// first time; a rerun has only its status and header, and says why.
func TestSendRecordedWithoutItsBody(t *testing.T) {
	big := strings.Repeat("x", idem.DefaultMaxRecordedBody+1)
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		io.WriteString(w, big)
	})
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "export-1", "-i", srv.URL + "/exports"}
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n", len(big))
	r := runCLI(t, args...)
	if r.code != exitOK || r.stdout != head+big || r.stderr != "" {
		t.Fatalf("exit code %d, %d bytes on stdout, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	again := runCLI(t, args...)
	wantNote := fmt.Sprintf("idem send: the response body was larger than the recording limit (%d bytes) when it arrived, so it was not recorded and cannot be printed\n", idem.DefaultMaxRecordedBody)
	if again.code != exitOK || again.stdout != head || !strings.HasSuffix(again.stderr, wantNote) {
		t.Errorf("rerun: exit code %d, stdout %q, stderr %q", again.code, again.stdout, again.stderr)
	}
	oneKey(t, srv.keys(), 1)

	r = runCLI(t, "journal", "show", path, "export-1", "--json")
	var d struct {
		Response responseJSON `json:"response"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.Response.BodyRecorded || d.Response.BodySize != 0 || d.Response.Body != "" {
		t.Errorf("show --json: %+v, want body_recorded false and no body", d.Response)
	}
	r = runCLI(t, "journal", "show", path, "export-1")
	if !strings.Contains(r.stdout, "\nBody:        not recorded: larger than the client's recording limit\n") {
		t.Errorf("show:\n%s", r.stdout)
	}
}

// Operation IDs, URLs and header values are the caller's or the server's
// bytes: control characters in them are quoted, never sent to the terminal.
func TestJournalQuotesControlCharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd.journal")
	j, err := filejournal.Open(path, filejournal.Options{Now: at(t0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const id = "row\t7\x1b[31m"
	op := journal.Operation{ID: id, Key: "k-1", Method: "POST", URL: "http://a.test/x\ny"}
	if err := journalhelp.Begin(j, op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Status = journal.StateDone, 200
	op.Header = http.Header{"X-Note": {"a\x1bb"}}
	op.Body = []byte("text with an escape \x1b[2J")
	if err := journalhelp.Complete(j, op); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	ls := runAt(t, at(t0.Add(time.Hour)), nil, "journal", "ls", path)
	rows := strings.Split(strings.TrimSuffix(ls.stdout, "\n"), "\n")
	wantRow := []string{`"row\t7\x1b[31m"`, "done", "k-1", "2030-01-02T03:04:05Z", "1h0m0s", "200", "POST", `"http://a.test/x\ny"`}
	if ls.code != exitOK || len(rows) != 2 || strings.Join(strings.Fields(rows[1]), " ") != strings.Join(wantRow, " ") {
		t.Errorf("ls: exit code %d, output:\n%s", ls.code, ls.stdout)
	}
	show := runAt(t, at(t0.Add(time.Hour)), nil, "journal", "show", path, id)
	if show.code != exitOK || strings.ContainsRune(show.stdout, 0x1b) ||
		!strings.Contains(show.stdout, "X-Note: \"a\\x1bb\"\n") ||
		!strings.Contains(show.stdout, "Body:        24 bytes, binary, shown in base64\n") {
		t.Errorf("show: exit code %d, output:\n%q", show.code, show.stdout)
	}
	var d operationDetailJSON
	js := runAt(t, at(t0.Add(time.Hour)), nil, "journal", "show", path, id, "--json")
	if err := json.Unmarshal([]byte(js.stdout), &d); err != nil || d.ID != id || d.Response.Body != string(op.Body) || d.Response.BodyEncoding != "text" {
		t.Errorf("show --json keeps the bytes: %+v (%v)", d, err)
	}
}

// A body that compaction dropped is reported as dropped by compaction, not
// as too large: show says which of the two happened.
func TestJournalShowSaysCompactionDroppedTheBody(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.journal")
	open := func(now time.Time) *filejournal.Journal {
		j, err := filejournal.Open(path, filejournal.Options{Now: at(now), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := open(t0)
	op := journal.Operation{ID: "charge-1", Key: "k-1", Method: "POST", URL: "http://a.test/charges"}
	if err := journalhelp.Begin(j, op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Status, op.Header, op.Body = journal.StateDone, 201, http.Header{"X-Charge": {"ch_1"}}, []byte("hello world")
	if err := journalhelp.Complete(j, op); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t0.Add(48 * time.Hour)) // past the default 24h retention
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()

	r := runAt(t, at(t0.Add(48*time.Hour)), nil, "journal", "show", path, "charge-1")
	for _, want := range []string{
		"\nBody:        not recorded: compaction summarized the operation once its outcome was older than the key retention\n",
		"\nHeader:      partly recorded: compaction summarized",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runAt(t, at(t0.Add(48*time.Hour)), nil, "journal", "show", path, "charge-1", "--json")
	var d struct {
		Response responseJSON `json:"response"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.Response.BodyRecorded || !d.Response.Summarized || !d.Response.HeaderTruncated || len(d.Response.Header) != 0 {
		t.Errorf("show --json: %+v, want a summary: body and header not recorded", d.Response)
	}
}
