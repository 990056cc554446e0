package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// TestSendAndListThroughASharedJournal: send and the journal commands take
// a postgres:// URL, whose fragment is the namespace; a rerun on "another
// machine" answers from the shared journal; a namespace that holds nothing
// is named, with those that hold operations (F9.8).
func TestSendAndListThroughASharedJournal(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	loc := dsn + "#nightly"
	srv := newTestServer(t, respond(http.StatusCreated, `{"id":"ch_1"}`))
	args := []string{"send", "--journal", loc, "--op", "invoice-42", "-d", `{"amount":1}`, srv.URL + "/charges"}
	if r := runCLI(t, args...); r.code != exitOK || r.stdout != `{"id":"ch_1"}` {
		t.Fatalf("send: exit code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	again := runCLI(t, args...)
	if again.code != exitOK || !strings.Contains(again.stderr, "was already done") {
		t.Fatalf("rerun: exit code %d, stderr %q; want the recorded answer", again.code, again.stderr)
	}
	key := oneKey(t, srv.keys(), 1)

	ls := runCLI(t, "journal", "completed", "--json", loc)
	var ops []operationJSON
	if err := json.Unmarshal([]byte(ls.stdout), &ops); err != nil {
		t.Fatalf("%v: %q %q", err, ls.stdout, ls.stderr)
	}
	if len(ops) != 1 || ops[0].ID != "invoice-42" || ops[0].Key != key || ops[0].State != "done" {
		t.Fatalf("journal completed: %+v; want invoice-42 done under %s", ops, key)
	}
	if other := runCLI(t, "journal", "ls", "--json", dsn+"#elsewhere"); other.code != exitPath || other.stdout != "" ||
		!strings.Contains(other.stderr, `no namespace "elsewhere"`) || !strings.Contains(other.stderr, `its namespaces: "nightly"`) {
		t.Fatalf("an unknown namespace: exit code %d, stdout %q, stderr %q; want exit 8 naming the namespaces there", other.code, other.stdout, other.stderr)
	}
	show := runCLI(t, "journal", "show", loc, "invoice-42")
	if show.code != exitOK || !strings.Contains(show.stdout, key) {
		t.Fatalf("journal show: exit code %d, stdout %q", show.code, show.stdout)
	}
	if m := runCLI(t, "journal", "migrate", dsn); m.code != exitOK || !strings.Contains(m.stdout, fmt.Sprint("schema version ", pgjournal.SchemaVersion)) {
		t.Fatalf("journal migrate: exit code %d, stdout %q, stderr %q", m.code, m.stdout, m.stderr)
	}
	if c := runCLI(t, "journal", "compact", loc); c.code != exitUsage || strings.Count(c.stderr, "\n") != 2 {
		t.Fatalf("journal compact of a URL: exit code %d, stderr %q; want a usage error", c.code, c.stderr)
	}
}

// TestReadingAURLChangesNothing (F9.8): the commands that read a shared journal
// (ls, show, settle) never create or migrate its tables: on a database
// without them they say so, with exit code 8, and leave it as it was. The
// namespace after # is percent-decoded.
func TestReadingAURLChangesNothing(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	for _, args := range [][]string{
		{"journal", "ls", dsn},
		{"journal", "pending", dsn + "#nightly"},
		{"journal", "show", dsn, "invoice-42"},
		{"journal", "settle", "--done", "201", dsn, "invoice-42"},
	} {
		r := runCLI(t, args...)
		if r.code != exitPath || !strings.Contains(r.stderr, "no idem journal tables") || !strings.Contains(r.stderr, "nothing was created") {
			t.Errorf("%s on a database without tables: exit code %d, stderr %q; want exit 8 saying so", args[1], r.code, r.stderr)
		}
	}
	if tables := countTables(t, dsn); tables != 0 {
		t.Fatalf("after the reading commands the database has %d idem tables, want 0", tables)
	}

	srv := newTestServer(t, respond(http.StatusCreated, `{}`))
	loc := dsn + "#nightly%20charges"
	if r := runCLI(t, "send", "--journal", loc, "--op", "invoice-42", "-d", "{}", srv.URL+"/charges"); r.code != exitOK {
		t.Fatalf("send: exit code %d, stderr %q", r.code, r.stderr)
	}
	ls := runCLI(t, "journal", "ls", "--json", loc)
	var ops []operationJSON
	if err := json.Unmarshal([]byte(ls.stdout), &ops); err != nil || len(ops) != 1 || ops[0].ID != "invoice-42" {
		t.Fatalf("journal ls of %s: %+v %v, stderr %q; want invoice-42", loc, ops, err, ls.stderr)
	}
	if r := runCLI(t, "journal", "ls", dsn+"#nightly"); r.code != exitPath || !strings.Contains(r.stderr, `its namespaces: "nightly charges"`) {
		t.Fatalf("journal ls of #nightly: exit code %d, stderr %q; want exit 8 naming \"nightly charges\"", r.code, r.stderr)
	}
	if r := runCLI(t, "journal", "ls", dsn+"#nightly%zz"); r.code != exitUsage {
		t.Fatalf("a fragment that does not decode: exit code %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// countTables returns how many tables named idem_* the database at dsn has.
func countTables(t *testing.T, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'idem\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSharedJournalDown: a database that does not answer is one line
// naming it, without its password, and exit code 6; nothing is sent.
func TestSharedJournalDown(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, `{}`))
	loc := "postgres://idem:s3cret@127.0.0.1:1/jobs?connect_timeout=2"
	for _, args := range [][]string{
		{"send", "--journal", loc, "--op", "x", "-d", "{}", srv.URL},
		{"journal", "ls", loc},
		{"journal", "migrate", loc},
	} {
		r := runCLI(t, args...)
		if r.code != exitJournal || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "s3cret") ||
			!strings.Contains(r.stderr, "did not answer") {
			t.Errorf("%q: exit code %d, stderr %q; want 6 and one line without the password", args[:2], r.code, r.stderr)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("%d requests sent with the journal down", n)
	}
}

// TestJournalShowsNoSecrets: what send journals from a response setting a
// cookie, for a URL with user info and a token, shows none of them in
// journal show and ls, and send's own messages hold none either.
func TestJournalShowsNoSecrets(t *testing.T) {
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=c00k1e-s3cret")
		respond(http.StatusCreated, `{"id":"ch_1"}`)(w, r)
	})
	path := journalIn(t)
	u := strings.Replace(srv.URL, "http://", "http://user:pa55-s3cret@", 1) + "/charges?access_token=t0k3n-s3cret"
	r := runCLI(t, "send", "--journal", path, "--op", "c1", "-d", "{}", u)
	if r.code != exitOK {
		t.Fatalf("send: %d %q", r.code, r.stderr)
	}
	other := runCLI(t, "send", "--journal", path, "--op", "c1", "-d", "{}", strings.Replace(u, "t0k3n", "other", 1))
	if other.code != exitRefused || !strings.Contains(other.stderr, "other credentials in the URL") {
		t.Fatalf("send with another token: %d %q; want refused, saying the credentials differ", other.code, other.stderr)
	}
	show := runCLI(t, "journal", "show", path, "c1")
	ls := runCLI(t, "journal", "ls", "--json", path)
	for what, out := range map[string]string{"show": show.stdout + show.stderr, "ls": ls.stdout + ls.stderr, "refused send": other.stderr} {
		for _, secret := range []string{"c00k1e-s3cret", "pa55-s3cret", "t0k3n-s3cret"} {
			if strings.Contains(out, secret) {
				t.Errorf("journal %s prints %q: %s", what, secret, out)
			}
		}
	}
	if !strings.Contains(show.stdout, "access_token=xxxxx") || !strings.Contains(show.stdout, "Unrecorded:  Set-Cookie") {
		t.Fatalf("journal show does not say what it redacted:\n%s", show.stdout)
	}
}

// TestPathErrorsAreConsistent: every command given a directory, or a path
// in a directory that does not exist, says so in the same words, on one
// line, and fails.
func TestPathErrorsAreConsistent(t *testing.T) {
	dir := t.TempDir()
	missing := dir + "/nodir/j"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"journal", "ls", dir}, dir + " is a directory, not a journal"},
		{[]string{"journal", "show", dir, "x"}, dir + " is a directory, not a journal"},
		{[]string{"journal", "compact", dir}, dir + " is a directory, not a journal"},
		{[]string{"send", "--journal", dir, "--op", "a", "http://127.0.0.1:1/"}, dir + " is a directory, not a journal"},
		{[]string{"journal", "ls", missing}, "no journal at " + missing + ": directory " + dir + "/nodir does not exist"},
		{[]string{"journal", "compact", missing}, "no journal at " + missing + ": directory " + dir + "/nodir does not exist"},
		{[]string{"send", "--journal", missing, "--op", "a", "http://127.0.0.1:1/"}, "no journal at " + missing + ": directory " + dir + "/nodir does not exist"},
		{[]string{"serve", "--db", dir, "--addr", "127.0.0.1:0"}, "database " + dir + " is a directory, not a file"},
		{[]string{"serve", "--db", missing, "--addr", "127.0.0.1:0"}, "database " + missing + ": directory " + dir + "/nodir does not exist"},
	} {
		r := runCLI(t, tc.args...)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.code == exitOK || !strings.Contains(lines[len(lines)-1], tc.want) || strings.Count(r.stderr, "\n") > 2 {
			t.Errorf("idem %s: exit code %d, stderr %q; want a failure saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// TestACommandThatWritesChecksTheReplication (F12.1, F12.2 in the CLI):
// on a primary whose only standby is asynchronous, send is refused before
// anything is sent or written, and says how to accept the risk; with
// allow_async_replication=true in the URL it sends, and the journal warns;
// a command that only reads neither refuses nor warns.
func TestACommandThatWritesChecksTheReplication(t *testing.T) {
	primary := pgtest.Own(t)
	pgtest.OwnAsyncStandby(t, primary)
	loc := primary.DSN() + "#nightly"
	srv := newTestServer(t, respond(http.StatusCreated, `{"id":"ch_1"}`))
	send := func(loc string) result {
		return runCLI(t, "send", "--journal", loc, "--op", "invoice-42", "-d", `{"amount":1}`, srv.URL+"/charges")
	}
	r := send(loc)
	if r.code != exitFailure || !strings.Contains(r.stderr, "synchronous_standby_names") ||
		!strings.Contains(r.stderr, "add allow_async_replication=true to the URL") || len(srv.keys()) != 0 {
		t.Fatalf("send on an async primary: exit code %d, stderr %q, %d requests; want a refusal naming the fixes, nothing sent",
			r.code, r.stderr, len(srv.keys()))
	}
	allowed := strings.Replace(loc, "#", "&allow_async_replication=true#", 1)
	r = send(allowed)
	if r.code != exitOK || !strings.Contains(r.stderr, "may not be synchronous to its standbys") || len(srv.keys()) != 1 {
		t.Fatalf("send with allow_async_replication=true: exit code %d, stderr %q; want it sent, with the warning", r.code, r.stderr)
	}
	ls := runCLI(t, "journal", "ls", loc)
	if ls.code != exitOK || ls.stderr != "" || !strings.Contains(ls.stdout, "invoice-42") {
		t.Fatalf("journal ls on an async primary: exit code %d, stdout %q, stderr %q; want the listing, no word", ls.code, ls.stdout, ls.stderr)
	}
}

// TestCutAllowAsync: the parameter is taken out of the URL wherever it is,
// and only "true" accepts the risk.
func TestCutAllowAsync(t *testing.T) {
	for _, c := range []struct {
		in, out string
		allow   bool
	}{
		{"postgres://db/jobs", "postgres://db/jobs", false},
		{"postgres://db/jobs?allow_async_replication=true", "postgres://db/jobs", true},
		{"postgres://db/jobs?sslmode=disable&allow_async_replication=true", "postgres://db/jobs?sslmode=disable", true},
		{"postgres://db/jobs?allow_async_replication=true&sslmode=disable", "postgres://db/jobs?sslmode=disable", true},
		{"postgres://db/jobs?allow_async_replication=false&sslmode=disable", "postgres://db/jobs?sslmode=disable", false},
		{"postgres://db/jobs?sslmode=disable", "postgres://db/jobs?sslmode=disable", false},
	} {
		if out, allow := cutAllowAsync(c.in); out != c.out || allow != c.allow {
			t.Errorf("cutAllowAsync(%q) = %q, %v; want %q, %v", c.in, out, allow, c.out, c.allow)
		}
	}
}
