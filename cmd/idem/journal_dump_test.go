package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
)

func TestJournalDumpLoadRoundTrip(t *testing.T) {
	f := newFixture(t)
	r := runAt(t, at(listNow), nil, "journal", "dump", f.path)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("dump: %+v", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(f.ops) {
		t.Fatalf("dump printed %d lines, want %d:\n%s", len(lines), len(f.ops), r.stdout)
	}
	for _, line := range lines {
		var d dumpedOperation
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		op, err := d.operation()
		if err != nil {
			t.Fatal(err)
		}
		want := f.ops[d.ID]
		if op.Key != want.Key || op.Fingerprint != want.Fingerprint || !op.Created.Equal(want.Created) ||
			op.State != want.State || !bytes.Equal(op.Body, want.Body) || op.Status != want.Status {
			t.Fatalf("dumped %+v, journal holds %+v", op, want)
		}
	}
	dump := r.stdout

	dst := filepath.Join(t.TempDir(), "copy.journal")
	r = runAt(t, at(listNow), strings.NewReader(dump), "journal", "load", dst)
	if r.code != exitOK || !strings.Contains(r.stdout, "wrote 5 operations") {
		t.Fatalf("load: %+v", r)
	}
	if again := runAt(t, at(listNow), nil, "journal", "dump", dst); again.stdout != dump {
		t.Fatalf("dump of the loaded journal differs:\n got %s\nwant %s", again.stdout, dump)
	}
	r = runAt(t, at(listNow), strings.NewReader(dump), "journal", "load", dst)
	if r.code != exitOK || !strings.Contains(r.stdout, "wrote 0 operations") || !strings.Contains(r.stdout, "5 were there already") {
		t.Fatalf("second load: %+v", r)
	}
}

func TestJournalLoadConflictsAndBadInput(t *testing.T) {
	f := newFixture(t)
	dump := runAt(t, at(listNow), nil, "journal", "dump", f.path).stdout

	// A journal holding another operation under "charge-1".
	dst := filepath.Join(t.TempDir(), "other.journal")
	j, err := openFileForWriting(env{stderr: new(bytes.Buffer), now: at(listNow)}, dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := journalhelp.Begin(j, journal.Operation{ID: "charge-1", Key: "another-key", Method: "POST", URL: "https://x.test/"}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	r := runAt(t, at(listNow), strings.NewReader(dump), "journal", "load", dst)
	if r.code != exitFailure || !strings.Contains(r.stderr, "charge-1") || !strings.Contains(r.stdout, "wrote 4 operations") {
		t.Fatalf("load with a conflict: %+v", r)
	}
	if op, _ := readOp(t, dst, "charge-1"); op.Key != "another-key" {
		t.Fatalf("the conflicting operation was overwritten: %+v", op)
	}

	// A pending operation that the input has completed gets the outcome.
	pend := filepath.Join(t.TempDir(), "pending.journal")
	var pendingOnly []string
	for _, line := range strings.Split(strings.TrimSuffix(dump, "\n"), "\n") {
		if strings.Contains(line, `"id":"charge-1"`) {
			var d dumpedOperation
			json.Unmarshal([]byte(line), &d)
			d.State, d.Completed, d.Status, d.Header, d.Body = "pending", nil, nil, nil, nil
			b, _ := json.Marshal(d)
			pendingOnly = append(pendingOnly, string(b))
		}
	}
	if r := runAt(t, at(listNow), strings.NewReader(strings.Join(pendingOnly, "\n")), "journal", "load", pend); r.code != exitOK {
		t.Fatalf("load of a pending operation: %+v", r)
	}
	if r := runAt(t, at(listNow), strings.NewReader(dump), "journal", "load", pend); r.code != exitOK || !strings.Contains(r.stdout, "wrote 5") {
		t.Fatalf("load completing a pending operation: %+v", r)
	}
	if op, _ := readOp(t, pend, "charge-1"); op.State != journal.StateDone || op.Status != f.ops["charge-1"].Status {
		t.Fatalf("pending operation not completed by load: %+v", op)
	}

	for name, input := range map[string]string{
		"not JSON":       "{",
		"unknown field":  `{"id":"a","key":"k","fingerprint":"` + strings.Repeat("00", 32) + `","created":"2026-01-01T00:00:00Z","state":"pending","extra":1}`,
		"bad state":      `{"id":"a","key":"k","fingerprint":"` + strings.Repeat("00", 32) + `","created":"2026-01-01T00:00:00Z","state":"lost"}`,
		"bad fp":         `{"id":"a","key":"k","fingerprint":"zz","created":"2026-01-01T00:00:00Z","state":"pending"}`,
		"no key":         `{"id":"a","fingerprint":"` + strings.Repeat("00", 32) + `","created":"2026-01-01T00:00:00Z","state":"pending"}`,
		"done no status": `{"id":"a","key":"k","fingerprint":"` + strings.Repeat("00", 32) + `","created":"2026-01-01T00:00:00Z","state":"done"}`,
	} {
		path := filepath.Join(t.TempDir(), "j")
		r := runAt(t, at(listNow), strings.NewReader(dump+input), "journal", "load", path)
		if r.code != exitFailure || !strings.Contains(r.stderr, "nothing was written") || exists(path) {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

func TestJournalDumpAndCopyErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.journal")
	if r := runAt(t, at(listNow), nil, "journal", "dump", missing); r.code != exitPath || !strings.Contains(r.stderr, "no journal at") {
		t.Fatalf("dump of a missing journal: %+v", r)
	}
	if r := runAt(t, at(listNow), nil, "journal", "copy", missing, missing+"2"); r.code != exitPath || !strings.Contains(r.stderr, "no journal at") || exists(missing+"2") {
		t.Fatalf("copy of a missing journal: %+v", r)
	}
	for _, args := range [][]string{{"dump"}, {"dump", "a", "b"}, {"load"}, {"copy", "a"}, {"copy", "a", "a"}} {
		if r := runAt(t, at(listNow), nil, append([]string{"journal"}, args...)...); r.code != exitUsage {
			t.Errorf("journal %q: exit %d, want %d", args, r.code, exitUsage)
		}
	}
}

// TestJournalCopyThroughPostgres moves a file journal into a shared
// PostgreSQL journal and back, and finds every operation as it was.
func TestJournalCopyThroughPostgres(t *testing.T) {
	f := newFixture(t)
	dsn := pgtest.NewDatabase(t)
	want := runAt(t, at(listNow), nil, "journal", "dump", f.path).stdout
	if r := runAt(t, at(listNow), nil, "journal", "copy", f.path, dsn); r.code != exitOK || !strings.Contains(r.stdout, "wrote 5") {
		t.Fatalf("copy into postgres: %+v", r)
	}
	if got := runAt(t, at(listNow), nil, "journal", "dump", dsn).stdout; got != want {
		t.Fatalf("dump of the PostgreSQL journal differs:\n got %s\nwant %s", got, want)
	}
	back := filepath.Join(t.TempDir(), "back.journal")
	if r := runAt(t, at(listNow), nil, "journal", "copy", dsn, back); r.code != exitOK || !strings.Contains(r.stdout, "wrote 5") {
		t.Fatalf("copy back: %+v", r)
	}
	if got := runAt(t, at(listNow), nil, "journal", "dump", back).stdout; got != want {
		t.Fatalf("dump of the copy back differs:\n got %s\nwant %s", got, want)
	}
	// Settle works on the shared journal too.
	if r := runAt(t, at(listNow), nil, "journal", "settle", dsn, "charge-3", "--rejected", "422"); r.code != exitOK {
		t.Fatalf("settle in postgres: %+v", r)
	}
	if r := runAt(t, at(listNow), nil, "journal", "settle", dsn, "old", "--forget", "--i-understand-a-new-key"); r.code != exitOK {
		t.Fatalf("forget in postgres: %+v", r)
	}
	ops := runAt(t, at(listNow), nil, "journal", "dump", dsn).stdout
	if strings.Contains(ops, `"id":"old"`) || !strings.Contains(ops, `"status":422`) {
		t.Fatalf("after settling in postgres:\n%s", ops)
	}
}

// TestJournalDumpKeepsBytesThatAreNotUTF8: JSON cannot carry them as they
// are, so dump writes them in base64, and load gets the same bytes back.
func TestJournalDumpKeepsBytesThatAreNotUTF8(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.journal")
	e := env{stderr: new(bytes.Buffer), now: at(listNow)}
	j, err := openFileForWriting(e, src)
	if err != nil {
		t.Fatal(err)
	}
	want := journal.Operation{ID: "op-\xff", Key: "key-\xfe", Method: "POST", URL: "https://x.test/\xe9", Created: listNow.Add(-time.Hour).UTC()}
	if err := journalhelp.Begin(j, want); err != nil {
		t.Fatal(err)
	}
	want.State, want.Status, want.Completed = journal.StateDone, 200, listNow.UTC()
	want.Header = http.Header{"X-Name": {"caf\xe9"}}
	want.Body = []byte{0, 0xff}
	if err := journalhelp.Complete(j, want); err != nil {
		t.Fatal(err)
	}
	j.Close()
	dump := runAt(t, at(listNow), nil, "journal", "dump", src)
	if dump.code != exitOK || !strings.Contains(dump.stdout, `"base64":["id","key","url","header"]`) {
		t.Fatalf("dump: %+v", dump)
	}
	dst := filepath.Join(t.TempDir(), "dst.journal")
	if r := runAt(t, at(listNow), strings.NewReader(dump.stdout), "journal", "load", dst); r.code != exitOK {
		t.Fatalf("load: %+v", r)
	}
	got, ok := readOp(t, dst, want.ID)
	if !ok || got.Key != want.Key || got.URL != want.URL || !got.Created.Equal(want.Created) ||
		!got.Completed.Equal(want.Completed) || !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	if again := runAt(t, at(listNow), nil, "journal", "dump", dst).stdout; again != dump.stdout {
		t.Fatalf("dumps differ:\n%s\n%s", again, dump.stdout)
	}
}

// TestJournalLoadKeepsEachKeyLifetime: a dump carries each operation's key
// lifetime, and load keeps it; a line without one, from a dump of an
// earlier release, loads as 24 hours, the lifetime it was judged by; a
// lifetime that is not a positive duration is refused.
func TestJournalLoadKeepsEachKeyLifetime(t *testing.T) {
	line := func(id, ttl string) string {
		s := `{"id":"` + id + `","key":"key-` + id + `","fingerprint":"` + strings.Repeat("00", 32) +
			`","method":"POST","url":"https://x.test/","created":"2030-01-02T03:04:05Z",`
		if ttl != "" {
			s += `"key_ttl":"` + ttl + `",`
		}
		return s + `"state":"pending"}` + "\n"
	}
	dst := filepath.Join(t.TempDir(), "dst.journal")
	in := line("hourly", "1h0m0s") + line("old", "")
	if r := runAt(t, at(listNow), strings.NewReader(in), "journal", "load", dst); r.code != exitOK {
		t.Fatalf("load: %+v", r)
	}
	for id, want := range map[string]time.Duration{"hourly": time.Hour, "old": 24 * time.Hour} {
		if got, ok := readOp(t, dst, id); !ok || got.KeyTTL != want {
			t.Errorf("%s loaded with KeyTTL %v (found %v), want %v", id, got.KeyTTL, ok, want)
		}
	}
	if dump := runAt(t, at(listNow), nil, "journal", "dump", dst).stdout; !strings.Contains(dump, `"key_ttl":"1h0m0s"`) || !strings.Contains(dump, `"key_ttl":"24h0m0s"`) {
		t.Errorf("dump lacks the key lifetimes:\n%s", dump)
	}
	for _, bad := range []string{"0s", "-1h", "soon"} {
		r := runAt(t, at(listNow), strings.NewReader(line("bad", bad)), "journal", "load", filepath.Join(t.TempDir(), "bad.journal"))
		if r.code == exitOK || !strings.Contains(r.stderr, `key_ttl "`+bad+`" is not a positive duration`) {
			t.Errorf("load of key_ttl %q: %+v, want it refused", bad, r)
		}
	}
}

// C16.3 for a dump: a line of an earlier release holds the marks as header
// fields and loads with them in the operation's fields; the dump of what
// it loaded has them as its own fields, and loads again the same.
func TestJournalLoadReadsAnEarlierDumpsMarks(t *testing.T) {
	in := `{"id":"old","key":"key-old","fingerprint":"` + strings.Repeat("00", 32) +
		`","method":"POST","url":"https://x.test/","created":"2030-01-02T03:04:05Z","state":"rejected",` +
		`"completed":"2030-01-02T03:04:06Z","status":400,"header":{"Content-Type":["application/json"],` +
		`"Idem-Key-Reused":["IdempotentParameterMismatch"],"Idem-Settled":["by hand"],"Idem-Settled-Note":["seen"],` +
		`"Idem-Unrecorded-Headers":["Set-Cookie"]}}` + "\n"
	dst := filepath.Join(t.TempDir(), "dst.journal")
	if r := runAt(t, at(listNow), strings.NewReader(in), "journal", "load", dst); r.code != exitOK {
		t.Fatalf("load: %+v", r)
	}
	check := func(path string) {
		t.Helper()
		got, ok := readOp(t, path, "old")
		if !ok || got.KeyReused != "IdempotentParameterMismatch" || !got.Settled || got.SettledNote != "seen" || got.Applied ||
			!slices.Equal(got.Unrecorded, []string{"Set-Cookie"}) || len(got.Header) != 1 || got.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("loaded %+v (found %v); want the marks as fields, Content-Type alone in the header", got, ok)
		}
	}
	check(dst)
	dump := runAt(t, at(listNow), nil, "journal", "dump", dst).stdout
	for _, want := range []string{`"key_reused":"IdempotentParameterMismatch"`, `"settled":true`, `"settled_note":"seen"`, `"unrecorded":["Set-Cookie"]`} {
		if !strings.Contains(dump, want) || strings.Contains(dump, "Idem-") {
			t.Fatalf("dump lacks %s or holds a header-form mark:\n%s", want, dump)
		}
	}
	again := filepath.Join(t.TempDir(), "again.journal")
	if r := runAt(t, at(listNow), strings.NewReader(dump), "journal", "load", again); r.code != exitOK {
		t.Fatalf("load of the new dump: %+v", r)
	}
	check(again)
}
