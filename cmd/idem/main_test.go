package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"

	"go.uber.org/goleak"
)

type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(withPostgres{m})
}

// t0 is the start of the fake clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// at returns a clock stopped at t.
func at(t time.Time) func() time.Time { return func() time.Time { return t } }

// result is what one run of the command wrote and returned.
type result struct {
	code           int
	stdout, stderr string
}

// runAt runs the command in-process with the clock now and stdin.
func runAt(t *testing.T, now func() time.Time, stdin io.Reader, args ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), env{stdin: stdin, stdout: &stdout, stderr: &stderr, now: now}, args)
	return result{code, stdout.String(), stderr.String()}
}

// runCLI runs the command in-process, through run, with the real clock.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	path := t.TempDir() + "/j"
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"--bogus"},
		{"journal"},
		{"journal", "nosuch", path},
		{"journal", "ls"},
		{"journal", "ls", path, "extra"},
		{"journal", "ls", "--bogus", path},
		{"journal", "ls", path, "--ttl", "0s"},
		{"journal", "ls", path, "--ttl", "soon"},
		{"journal", "pending", "--json=maybe", path},
		{"journal", "show", path},
		{"journal", "compact"},
		{"send"},
		{"send", "http://a.test/", "http://b.test/"},
		{"send", "--bogus", "http://a.test/"},
		{"send", "--journal", path, "http://a.test/"},
		{"send", "--attempts", "0", "http://a.test/"},
		{"send", "--timeout", "-1s", "http://a.test/"},
		{"send", "-H", "no colon", "http://a.test/"},
		{"send", "-H", "Bad Name: v", "http://a.test/"},
		{"send", "-H", "Idempotency-Key: mine", "http://a.test/"},
		{"send", "-d", "a", "-d", "b", "http://a.test/"},
		{"send", "-X", "GET POST", "http://a.test/"},
		{"send", "ftp://a.test/"},
		{"send", "/relative"},
		{"send", "http:///nohost"},
	} {
		r := runCLI(t, args...)
		if r.code != exitUsage {
			t.Errorf("idem %q: exit code %d, want %d; stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("idem %q: stdout %q, want nothing", args, r.stdout)
		}
		if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 2 ||
			!strings.HasPrefix(lines[1], "Run 'idem") || !strings.HasSuffix(lines[1], " -h' for usage.") {
			t.Errorf("idem %q: stderr is not one line and a pointer to -h:\n%s", args, r.stderr)
		}
	}
}

func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"Usage: idem <command>", "journal", "send", "Exit codes:"}},
		{[]string{"help"}, []string{"Usage: idem <command>"}},
		{[]string{"journal", "-h"}, []string{"Usage: idem journal <subcommand>", "ls", "pending", "expired", "completed", "show", "compact"}},
		{[]string{"journal", "ls", "-h"}, []string{"Usage: idem journal ls PATH", "-json", "key_ttl", "fingerprint  string"}},
		{[]string{"journal", "show", "--help"}, []string{"Usage: idem journal show PATH ID", "body_encoding"}},
		{[]string{"journal", "compact", "-h"}, []string{"Usage: idem journal compact PATH"}},
		{[]string{"send", "-h"}, []string{
			"Usage: idem send", "-journal", "-op", "-X", "-H", "-d", "-timeout", "-attempts", "-ttl", "-i",
			"POST unless -X", "Exit codes:", "3  send: rejected", "4  send: outcome unknown", "5  send: refused", "6  journal locked",
		}},
	} {
		r := runCLI(t, tc.args...)
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("idem %q: exit code %d, stderr %q; want 0 and nothing", tc.args, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("idem %q: help lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

func TestFlagsAfterPositionalArguments(t *testing.T) {
	fs := newFlagSet("t")
	b := fs.Bool("b", false, "")
	s := fs.String("s", "", "")
	for _, tc := range []struct {
		args    []string
		pos     []string
		b       bool
		s       string
		wantErr bool
	}{
		{args: []string{"p", "-b", "q"}, pos: []string{"p", "q"}, b: true},
		{args: []string{"-s", "v", "p", "--b"}, pos: []string{"p"}, b: true, s: "v"},
		{args: []string{"p", "--", "-b", "-s"}, pos: []string{"p", "-b", "-s"}},
		{args: []string{"-s", "--", "p", "-b"}, pos: []string{"p"}, b: true, s: "--"},
		{args: []string{"-s=--", "--", "-b"}, pos: []string{"-b"}, s: "--"},
		{args: []string{"p", "-x"}, wantErr: true},
		{args: []string{}, pos: []string{}},
	} {
		*b, *s = false, ""
		pos, err := parseInterspersed(fs, tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v, want error %v", tc.args, err, tc.wantErr)
			continue
		}
		if tc.wantErr {
			continue
		}
		if strings.Join(pos, "|") != strings.Join(tc.pos, "|") || len(pos) != len(tc.pos) || *b != tc.b || *s != tc.s {
			t.Errorf("%q: pos %q b %v s %q; want %q %v %q", tc.args, pos, *b, *s, tc.pos, tc.b, tc.s)
		}
	}
}

// running is a command started by start: the URL it printed first, what it
// wrote to stdout after that (once it has exited), its exit code, and its
// stderr (to read only after the code has arrived).
type running struct {
	url    string
	rest   <-chan string
	codes  <-chan int
	stderr *bytes.Buffer
}

// start runs idem with args until ctx ends, as serve and chaos run: it
// waits for the first line, "listening on http://127.0.0.1:PORT", and fails
// the test if that is not what comes.
func start(t *testing.T, ctx context.Context, args ...string) running {
	t.Helper()
	pr, pw := io.Pipe()
	stderr := new(bytes.Buffer)
	codes := make(chan int, 1)
	go func() {
		codes <- runEnv(ctx, env{stdout: pw, stderr: stderr, now: time.Now}, args)
		pw.Close()
	}()
	lines := bufio.NewReader(pr)
	first, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the first line: %v", err)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(first), "listening on ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q, want listening on http://127.0.0.1:PORT", first)
	}
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(lines)
		rest <- string(b)
	}()
	return running{url: url, rest: rest, codes: codes, stderr: stderr}
}
