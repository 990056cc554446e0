package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// listNow is when the fixture journal is listed: 25h after t0.
var listNow = t0.Add(25 * time.Hour)

// binaryBody is the response body of the fixture's "blob" operation.
var binaryBody = []byte{0x00, 0x01, 0xfe, 0xff, 'x', '\n'}

// fixture is a journal built through the client with a fake clock.
type fixture struct {
	path string
	url  string                       // the server's URL, gone by the time the tests run
	ops  map[string]journal.Operation // by ID, as the journal holds them
}

// newFixture builds a journal holding, at listNow with a 24h TTL:
//
//	old       pending, created at t0: expired
//	charge-1  done 201 with a JSON body, created at t0+24h
//	charge-2  rejected 422, created at t0+24h1m
//	charge-3  pending, created at t0+24h2m
//	blob      done 200 with a binary body, created at t0+24h3m
func newFixture(t *testing.T) fixture {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header()["Date"] = nil // recorded headers must not depend on the wall clock
		switch r.URL.Path {
		case "/done":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/charges/ch_1")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"ch_1"}`)
		case "/rejected":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"title":"card declined"}`)
		case "/binary":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(binaryBody)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	path := filepath.Join(t.TempDir(), "ops.journal")
	clock := newFakeClock(t0)
	j, err := filejournal.Open(path, filejournal.Options{Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Journal: j, HTTPClient: &http.Client{Transport: tr}, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	do := func(at time.Time, id, path, body string, want error) {
		t.Helper()
		clock.Set(at)
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(id, req)
		if resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("Do(%s): %v, want %v", id, err, want)
		}
	}
	day := t0.Add(24 * time.Hour)
	do(t0, "old", "/unavailable", `{"n":0}`, idem.ErrUnknown)
	do(day, "charge-1", "/done", `{"n":1}`, nil)
	do(day.Add(time.Minute), "charge-2", "/rejected", `{"n":2}`, idem.ErrRejected)
	do(day.Add(2*time.Minute), "charge-3", "/unavailable", `{"n":3}`, idem.ErrUnknown)
	do(day.Add(3*time.Minute), "blob", "/binary", `{"n":4}`, nil)
	ops := map[string]journal.Operation{}
	for _, op := range list(j, journal.ListAll) {
		ops[op.ID] = op
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return fixture{path: path, url: srv.URL, ops: ops}
}

// listed is the JSON object "idem journal ls --json" prints for op.
func listed(f fixture, id, state string, expired bool, path string, created time.Time, status any) map[string]any {
	op := f.ops[id]
	m := map[string]any{
		"id": id, "state": state, "expired": expired, "key_ttl": op.KeyTTL.String(), "key": op.Key,
		"fingerprint": op.Fingerprint.String(), "method": "POST", "url": f.url + path,
		"created": created.Format(time.RFC3339Nano), "completed": nil, "status": nil,
	}
	if status != nil {
		m["completed"], m["status"] = created.Format(time.RFC3339Nano), status
	}
	return m
}

func TestJournalListJSON(t *testing.T) {
	f := newFixture(t)
	day := t0.Add(24 * time.Hour)
	old := listed(f, "old", "pending", true, "/unavailable", t0, nil)
	c1 := listed(f, "charge-1", "done", false, "/done", day, 201.0)
	c2 := listed(f, "charge-2", "rejected", false, "/rejected", day.Add(time.Minute), 422.0)
	c3 := listed(f, "charge-3", "pending", false, "/unavailable", day.Add(2*time.Minute), nil)
	blob := listed(f, "blob", "done", false, "/binary", day.Add(3*time.Minute), 200.0)
	for _, tc := range []struct {
		sub  string
		want []map[string]any
	}{
		{"ls", []map[string]any{old, c1, c2, c3, blob}},
		{"pending", []map[string]any{c3}},
		{"expired", []map[string]any{old}},
		{"completed", []map[string]any{c1, c2, blob}},
	} {
		r := runAt(t, at(listNow), nil, "journal", tc.sub, f.path, "--json")
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("journal %s: exit code %d, stderr %q", tc.sub, r.code, r.stderr)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("journal %s: %v in:\n%s", tc.sub, err, r.stdout)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("journal %s --json:\n got %v\nwant %v", tc.sub, got, tc.want)
		}
	}
}

// TestListShowsAKeyExpiredByItsOwnLifetime is C6.7 for the command line: a
// Client whose Dialect keeps keys an hour leaves an operation pending; two
// hours later the command, which has no lifetime of its own, lists it
// expired, with the lifetime recorded, and not pending; show says so.
func TestListShowsAKeyExpiredByItsOwnLifetime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "ops.journal")
	j, err := filejournal.Open(path, filejournal.Options{Now: at(t0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 1, Dialect: idem.Dialect{Retention: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("hourly", req); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("Do: %v, want ErrUnknown", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	later := at(t0.Add(2 * time.Hour))
	for sub, want := range map[string]int{"expired": 1, "pending": 0} {
		r := runAt(t, later, nil, "journal", sub, path, "--json")
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK {
			t.Fatalf("journal %s: exit code %d, %v in:\n%s", sub, r.code, err, r.stdout)
		}
		if len(got) != want || (want == 1 && (got[0]["id"] != "hourly" || got[0]["expired"] != true || got[0]["key_ttl"] != "1h0m0s")) {
			t.Errorf("journal %s two hours later: %v, want %d operation(s), hourly expired with key_ttl 1h0m0s", sub, got, want)
		}
	}
	if r := runAt(t, later, nil, "journal", "show", path, "hourly"); !strings.Contains(r.stdout, "expired: the key is older than 1h0m0s") {
		t.Errorf("journal show two hours later:\n%s\nwant it expired by its 1h lifetime", r.stdout)
	}
}

func TestJournalListEmptyIsEmptyArray(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.journal")
	j, err := filejournal.Open(path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "journal", "ls", "--json", path)
	if r.code != exitOK || r.stdout != "[]\n" {
		t.Errorf("exit code %d, stdout %q; want 0 and %q", r.code, r.stdout, "[]\n")
	}
}

func TestJournalListTable(t *testing.T) {
	f := newFixture(t)
	day := "2030-01-03T03:0"
	key := func(id string) string { return f.ops[id].Key }
	row := func(cells ...string) []string { return cells }
	header := row("ID", "STATE", "KEY", "CREATED", "AGE", "STATUS", "METHOD", "URL")
	old := row("old", "expired", key("old"), "2030-01-02T03:04:05Z", "25h0m0s", "-", "POST", f.url+"/unavailable")
	c1 := row("charge-1", "done", key("charge-1"), day+"4:05Z", "1h0m0s", "201", "POST", f.url+"/done")
	c2 := row("charge-2", "rejected", key("charge-2"), day+"5:05Z", "59m0s", "422", "POST", f.url+"/rejected")
	c3 := row("charge-3", "pending", key("charge-3"), day+"6:05Z", "58m0s", "-", "POST", f.url+"/unavailable")
	blob := row("blob", "done", key("blob"), day+"7:05Z", "57m0s", "200", "POST", f.url+"/binary")
	for _, tc := range []struct {
		sub  string
		want [][]string
	}{
		{"ls", [][]string{header, old, c1, c2, c3, blob}},
		{"pending", [][]string{header, c3}},
		{"expired", [][]string{header, old}},
		{"completed", [][]string{header, c1, c2, blob}},
	} {
		r := runAt(t, at(listNow), nil, "journal", tc.sub, f.path)
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("journal %s: exit code %d, stderr %q", tc.sub, r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		var got [][]string
		for _, l := range lines {
			got = append(got, strings.Fields(l))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("journal %s:\n got %q\nwant %q", tc.sub, got, tc.want)
			continue
		}
		// Aligned: every cell starts where its column's title does.
		for r, l := range lines[1:] {
			for i, title := range header {
				col := strings.Index(lines[0], title)
				if col > len(l) || (col > 0 && l[col-1] != ' ') || !strings.HasPrefix(l[col:], tc.want[r+1][i]) {
					t.Errorf("journal %s: column %s not aligned:\n%s\n%s", tc.sub, title, lines[0], l)
				}
			}
		}
	}
}

func TestJournalShowJSON(t *testing.T) {
	f := newFixture(t)
	day := t0.Add(24 * time.Hour)
	for _, tc := range []struct {
		id   string
		want map[string]any
	}{
		{"old", func() map[string]any {
			m := listed(f, "old", "pending", true, "/unavailable", t0, nil)
			m["response"] = nil
			return m
		}()},
		{"charge-1", func() map[string]any {
			m := listed(f, "charge-1", "done", false, "/done", day, 201.0)
			m["response"] = map[string]any{
				"header": map[string]any{
					"Content-Type":   []any{"application/json"},
					"Content-Length": []any{"13"},
					"Location":       []any{"/charges/ch_1"},
				},
				"header_truncated": false, "summarized": false,
				"body_recorded": true, "body_size": 13.0, "body_encoding": "text", "body": `{"id":"ch_1"}`,
			}
			return m
		}()},
		{"charge-2", func() map[string]any {
			m := listed(f, "charge-2", "rejected", false, "/rejected", day.Add(time.Minute), 422.0)
			m["response"] = map[string]any{
				"header": map[string]any{
					"Content-Type":   []any{"application/problem+json"},
					"Content-Length": []any{"25"},
				},
				"header_truncated": false, "summarized": false,
				"body_recorded": true, "body_size": 25.0, "body_encoding": "text", "body": `{"title":"card declined"}`,
			}
			return m
		}()},
		{"blob", func() map[string]any {
			m := listed(f, "blob", "done", false, "/binary", day.Add(3*time.Minute), 200.0)
			m["response"] = map[string]any{
				"header": map[string]any{
					"Content-Type":   []any{"application/octet-stream"},
					"Content-Length": []any{"6"},
				},
				"header_truncated": false, "summarized": false,
				"body_recorded": true, "body_size": 6.0, "body_encoding": "base64",
				"body": base64.StdEncoding.EncodeToString(binaryBody),
			}
			return m
		}()},
	} {
		r := runAt(t, at(listNow), nil, "journal", "show", f.path, tc.id, "--json")
		if r.code != exitOK || r.stderr != "" {
			t.Fatalf("show %s: exit code %d, stderr %q", tc.id, r.code, r.stderr)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("show %s: %v in:\n%s", tc.id, err, r.stdout)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("show %s --json:\n got %v\nwant %v", tc.id, got, tc.want)
		}
	}
}

func TestJournalShowText(t *testing.T) {
	f := newFixture(t)
	op := f.ops["charge-1"]
	r := runAt(t, at(listNow), nil, "journal", "show", f.path, "charge-1")
	want := fmt.Sprintf(`ID:          charge-1
State:       done
Key:         %s
Fingerprint: %s
Request:     POST %s/done
Created:     2030-01-03T03:04:05Z (1h0m0s ago)
Completed:   2030-01-03T03:04:05Z (1h0m0s ago)
Status:      201 Created
Body:        13 bytes, text

Content-Length: 13
Content-Type: application/json
Location: /charges/ch_1

{"id":"ch_1"}
`, op.Key, op.Fingerprint, f.url)
	if r.code != exitOK || r.stderr != "" || r.stdout != want {
		t.Errorf("exit code %d, stderr %q, stdout:\n%s\nwant:\n%s", r.code, r.stderr, r.stdout, want)
	}

	r = runAt(t, at(listNow), nil, "journal", "show", f.path, "blob")
	wantTail := "Body:        6 bytes, binary, shown in base64\n\nContent-Length: 6\nContent-Type: application/octet-stream\n\n" +
		base64.StdEncoding.EncodeToString(binaryBody) + "\n"
	if r.code != exitOK || !strings.HasSuffix(r.stdout, wantTail) {
		t.Errorf("blob: exit code %d, stdout:\n%s\nwant it to end:\n%s", r.code, r.stdout, wantTail)
	}

	r = runAt(t, at(listNow), nil, "journal", "show", f.path, "old")
	want = fmt.Sprintf(`ID:          old
State:       pending, expired: the key is older than 24h0m0s; resending could apply it twice, so check with the server whether it was applied
Key:         %s
Fingerprint: %s
Request:     POST %s/unavailable
Created:     2030-01-02T03:04:05Z (25h0m0s ago)
`, f.ops["old"].Key, f.ops["old"].Fingerprint, f.url)
	if r.code != exitOK || r.stdout != want {
		t.Errorf("old: exit code %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}

	r = runAt(t, at(listNow), nil, "journal", "show", f.path, "nosuch")
	if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "no operation nosuch in "+f.path) {
		t.Errorf("nosuch: exit code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// fileState is what a read-only command must not change about a journal:
// its bytes, its modification time, and the names in its directory.
type fileState struct {
	data  []byte
	mtime time.Time
	names []string
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return fileState{data, fi.ModTime(), names}
}

func TestReadOnlySubcommandsChangeNothing(t *testing.T) {
	f := newFixture(t)
	// A torn tail: the start of a record (its header says more follows)
	// that a crash cut short. A writer would truncate it.
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	const torn = 20
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(data[16 : 16+torn]); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	// An mtime far in the past: any write would move it to now.
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(f.path, past, past); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, f.path)

	for _, args := range [][]string{
		{"journal", "ls", f.path}, {"journal", "ls", f.path, "--json"},
		{"journal", "pending", f.path}, {"journal", "pending", f.path, "--json"},
		{"journal", "expired", f.path}, {"journal", "expired", f.path, "--json"},
		{"journal", "completed", f.path}, {"journal", "completed", f.path, "--json"},
		{"journal", "show", f.path, "charge-1"}, {"journal", "show", f.path, "charge-1", "--json"},
	} {
		r := runAt(t, at(listNow), nil, args...)
		if r.code != exitOK {
			t.Errorf("%q: exit code %d, stderr %q", args, r.code, r.stderr)
		}
		wantNote := fmt.Sprintf("idem: note: %s ends with %d bytes of a write a crash cut short; they are ignored (the next writer removes them)\n", f.path, torn)
		if r.stderr != wantNote {
			t.Errorf("%q: stderr %q, want %q", args, r.stderr, wantNote)
		}
		if after := stateOf(t, f.path); !reflect.DeepEqual(after, before) {
			t.Fatalf("%q changed the journal: mtime %v → %v, %d → %d bytes, files %q → %q",
				args, before.mtime, after.mtime, len(before.data), len(after.data), before.names, after.names)
		}
	}
	// Nothing was lost to the torn tail.
	r := runAt(t, at(listNow), nil, "journal", "ls", f.path, "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 5 {
		t.Errorf("after the torn tail: %d operations (%v), want 5", len(got), err)
	}
}

func TestMissingJournalIsNotCreated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nosuch.journal")
	for _, args := range [][]string{
		{"journal", "ls", path},
		{"journal", "pending", path, "--json"},
		{"journal", "show", path, "op"},
		{"journal", "compact", path},
	} {
		r := runCLI(t, args...)
		want := fmt.Sprintf("idem journal %s: no journal at %s\n", args[1], path)
		if r.code != exitPath || r.stdout != "" || r.stderr != want {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q; want %d and %q", args, r.code, r.stdout, r.stderr, exitPath, want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("%q created %v", args, entries)
		}
	}
}

func TestCorruptJournalNamesTheOffset(t *testing.T) {
	f := newFixture(t)
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(f.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt *filejournal.CorruptError
	_, err = filejournal.Open(f.path, filejournal.Options{ReadOnly: true})
	if !errors.As(err, &corrupt) || corrupt.Offset <= 0 || corrupt.Offset >= int64(len(data)) {
		t.Fatalf("opening the damaged journal: %v; want a *CorruptError inside the file", err)
	}
	want := fmt.Sprintf("journal %s is corrupt at offset %d: %s\n", f.path, corrupt.Offset, corrupt.Reason)
	// A damaged journal's report points to the commands that deal with it.
	hint := fmt.Sprintf("\"idem journal verify %s\" lists every damaged record; \"idem journal salvage %s NEW\"", f.path, f.path)

	for _, args := range [][]string{
		{"journal", "ls", f.path},
		{"journal", "completed", f.path, "--json"},
		{"journal", "show", f.path, "charge-1"},
		{"journal", "compact", f.path},
		{"send", "--journal", f.path, "--op", "charge-1", "-d", `{"n":1}`, f.url + "/done"},
	} {
		r := runCLI(t, args...)
		if r.code != exitDamaged || r.stdout != "" || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, hint) {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q; want %d, %q and %q", args, r.code, r.stdout, r.stderr, exitDamaged, want, hint)
		}
	}
	if got, _ := os.ReadFile(f.path); string(got) != string(data) {
		t.Error("the corrupt journal was changed")
	}
}

func TestLockedJournal(t *testing.T) {
	f := newFixture(t)
	j, err := filejournal.Open(f.path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, args := range [][]string{
		{"journal", "compact", f.path},
		{"send", "--journal", f.path, "--op", "charge-1", "-d", `{"n":1}`, f.url + "/done"},
	} {
		r := runCLI(t, args...)
		if r.code != exitJournal || r.stdout != "" || !strings.Contains(r.stderr, "journal "+f.path+" is locked") {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q; want %d and a lock message", args, r.code, r.stdout, r.stderr, exitJournal)
		}
	}
	// Reading needs no lock.
	if r := runAt(t, at(listNow), nil, "journal", "ls", f.path); r.code != exitOK {
		t.Errorf("ls of a locked journal: exit code %d, stderr %q", r.code, r.stderr)
	}
}

func TestJournalCompact(t *testing.T) {
	f := newFixture(t)
	before := stateOf(t, f.path)
	// A day after listNow, the completed operations (recorded 24h57m to
	// 25h ago, past the 24h key lifetime recorded with each) keep a
	// summary only, and with --forget-after 30m not even that; the
	// pending ones, expired or not, stay.
	later := listNow.Add(24 * time.Hour)
	r := runAt(t, at(later), nil, "journal", "compact", f.path)
	summarized := stateOf(t, f.path)
	want := fmt.Sprintf("compacted %s: 5 of 5 operations kept, 8 records in %d bytes (was 8 records in %d bytes)\n",
		f.path, len(summarized.data), len(before.data))
	if r.code != exitOK || r.stdout != want || r.stderr != "" || len(summarized.data) >= len(before.data) {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	before = summarized
	r = runAt(t, at(later), nil, "journal", "compact", f.path, "--forget-after", "30m")
	after := stateOf(t, f.path)
	want = fmt.Sprintf("compacted %s: 2 of 5 operations kept, 2 records in %d bytes (was 8 records in %d bytes)\n",
		f.path, len(after.data), len(before.data))
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	r = runAt(t, at(listNow), nil, "journal", "ls", f.path, "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	want2 := []map[string]any{
		listed(f, "old", "pending", true, "/unavailable", t0, nil),
		listed(f, "charge-3", "pending", false, "/unavailable", t0.Add(24*time.Hour+2*time.Minute), nil),
	}
	if !reflect.DeepEqual(got, want2) {
		t.Errorf("after compaction:\n got %v\nwant %v", got, want2)
	}
}
