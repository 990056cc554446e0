package faultsuite

// Hostile peers: servers and disks that do what a well-behaved peer never
// does, each probe aimed at one way the exactly-once promise could break
// silently. Redirects that would turn a POST into another request's
// recorded outcome or carry the key to another host (C13); 409s that are
// not refusals (C7); a journal file reached by a second name (J4); a
// response header of megabytes (C3); clients that stall a server (S9).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver"
)

// seen is a request as a hostile server received it.
type seen struct {
	method, path, key, body string
}

// hostile is an httptest server running handle, recording every request.
type hostile struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newHostile(t *testing.T, handle http.HandlerFunc) *hostile {
	t.Helper()
	h := &hostile{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.reqs = append(h.reqs, seen{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), string(body)})
		h.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// requests returns what the server received so far.
func (h *hostile) requests() []seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seen(nil), h.reqs...)
}

// hostileClient is a client on a journal in a fresh directory, with quick
// retries; tweak changes its Config first.
func hostileClient(t *testing.T, tweak func(*idem.Config)) (*idem.Client, *filejournal.Journal) {
	t.Helper()
	j := openJournal(t)
	tr := NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	cfg := idem.Config{Journal: j, HTTPClient: &http.Client{Transport: tr}, InitialWait: time.Millisecond, MaxWait: 5 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, j
}

func postTo(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// C13.1-C13.4: a redirect never becomes the recorded outcome of another request,
// and never carries the key or the body to another origin. Each status is
// tried with a Location on the same origin and on another one; the
// operation is then run again, as a resumed batch would, and must be
// answered from the journal without a request.
func TestHostileRedirects(t *testing.T) {
	const body = `{"amount":1200}`
	type want struct {
		outcome idem.Outcome
		status  int  // the recorded and returned status
		landed  bool // the Location got the POST, under the same key
	}
	for _, tc := range []struct {
		status int
		same   want
		other  want
	}{
		{301, want{idem.OutcomeRejected, 301, false}, want{idem.OutcomeRejected, 301, false}},
		{302, want{idem.OutcomeRejected, 302, false}, want{idem.OutcomeRejected, 302, false}},
		{303, want{idem.OutcomeDone, 303, false}, want{idem.OutcomeDone, 303, false}},
		{307, want{idem.OutcomeDone, 200, true}, want{idem.OutcomeRejected, 307, false}},
		{308, want{idem.OutcomeDone, 200, true}, want{idem.OutcomeRejected, 308, false}},
	} {
		for _, origin := range []string{"same", "other"} {
			t.Run(fmt.Sprintf("%d %s origin", tc.status, origin), func(t *testing.T) {
				w := tc.same
				landing := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "landed") }
				other := newHostile(t, landing)
				srv := newHostile(t, func(rw http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/landing" {
						landing(rw, r)
						return
					}
					target := "/landing"
					if origin == "other" {
						target = other.URL + "/landing"
					}
					rw.Header().Set("Location", target)
					rw.WriteHeader(tc.status)
					io.WriteString(rw, "moved")
				})
				if origin == "other" {
					w = tc.other
				}
				c, j := hostileClient(t, nil)
				resp, err := c.Do("charge-1", postTo(t, srv.URL+"/moved", body))
				status := checkOutcome(t, resp, err, w.outcome)
				if status != w.status {
					t.Fatalf("status %d, want %d", status, w.status)
				}
				if w.outcome == idem.OutcomeRejected && !strings.Contains(err.Error(), "/landing") {
					t.Errorf("the rejection does not say where the server points: %v", err)
				}
				reqs := append(srv.requests(), other.requests()...)
				if len(reqs) == 0 {
					t.Fatal("nothing was sent")
				}
				first := reqs[0]
				if first.method != "POST" || first.path != "/moved" || first.body != body || first.key == "" {
					t.Fatalf("first request %+v", first)
				}
				wantReqs := []seen{first}
				if w.landed {
					wantReqs = append(wantReqs, seen{"POST", "/landing", first.key, body})
				}
				if fmt.Sprint(reqs) != fmt.Sprint(wantReqs) {
					t.Fatalf("requests seen\n got %v\nwant %v", reqs, wantReqs)
				}
				op, ok := lookup(j, "charge-1")
				wantState := journal.StateDone
				if w.outcome == idem.OutcomeRejected {
					wantState = journal.StateRejected
				}
				if !ok || op.State != wantState || op.Status != w.status {
					t.Fatalf("journal holds %+v, want %v with status %d", op, wantState, w.status)
				}

				resp, err = c.Do("charge-1", postTo(t, srv.URL+"/moved", body))
				if status := checkOutcome(t, resp, err, w.outcome); status != w.status {
					t.Fatalf("resumed: status %d, want %d", status, w.status)
				}
				if n := len(srv.requests()) + len(other.requests()); n != len(wantReqs) {
					t.Fatalf("the resumed operation sent %d requests, want 0: it is recorded", n-len(wantReqs))
				}
			})
		}
	}
}

// checkOutcome checks that a Do ended with the outcome, closes the
// response, and returns the status.
func checkOutcome(t *testing.T, resp *http.Response, err error, outcome idem.Outcome) int {
	t.Helper()
	if outcome == idem.OutcomeDone {
		if err != nil {
			t.Fatalf("Do = %v, want done", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != outcome {
		t.Fatalf("Do = %v, want %v", err, outcome)
	}
	return oe.Status
}

// C13.8, C12.4: the caller's own CheckRedirect cannot relax the rule for an
// operation; StandardClient returns the unfollowed 3xx of an operation as
// its response, and lets safe requests without one follow redirects as
// net/http does, without a key.
func TestHostileRedirectsThroughCallerPolicyAndStandardClient(t *testing.T) {
	other := newHostile(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "elsewhere") })
	srv := newHostile(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/landing", http.StatusMovedPermanently)
		case "/away":
			http.Redirect(w, r, other.URL+"/landing", http.StatusTemporaryRedirect)
		default:
			io.WriteString(w, "landed")
		}
	})
	var asked []string
	c, _ := hostileClient(t, func(cfg *idem.Config) {
		cfg.HTTPClient.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			asked = append(asked, req.Method+" "+req.URL.Path)
			return nil // follow everything
		}
	})

	t.Run("a permissive CheckRedirect", func(t *testing.T) {
		_, err := c.Do("permissive", postTo(t, srv.URL+"/moved", "x"))
		if !errors.Is(err, idem.ErrRejected) || len(asked) != 0 {
			t.Fatalf("Do = %v after asking the caller's policy about %v; want rejected without asking", err, asked)
		}
	})

	t.Run("StandardClient with an operation", func(t *testing.T) {
		before := len(srv.requests())
		req := postTo(t, srv.URL+"/moved", "x").WithContext(idem.WithOperation(context.Background(), "standard"))
		resp, err := c.StandardClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 301 || len(srv.requests()) != before+1 {
			t.Fatalf("status %d after %d requests, want the 301 itself after 1", resp.StatusCode, len(srv.requests())-before)
		}
	})

	t.Run("StandardClient, a mutation without an operation", func(t *testing.T) {
		resp, err := c.StandardClient().Do(postTo(t, srv.URL+"/away", "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 307 || len(other.requests()) != 0 {
			t.Fatalf("status %d, other origin saw %v; want the 307 and nothing sent there", resp.StatusCode, other.requests())
		}
	})

	t.Run("StandardClient, a GET without an operation", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/away", nil)
		resp, err := c.StandardClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := other.requests()
		if resp.StatusCode != 200 || string(b) != "elsewhere" || len(got) != 1 || got[0] != (seen{"GET", "/landing", "", ""}) {
			t.Fatalf("status %d %q, other origin saw %v; want the redirect followed once, without a key", resp.StatusCode, b, got)
		}
		if fmt.Sprint(asked) != "[GET /landing]" {
			t.Fatalf("the caller's CheckRedirect was asked about %v, want the GET's one redirect", asked)
		}
	})

	t.Run("a plain http.Client around the RoundTripper", func(t *testing.T) {
		before := len(other.requests())
		_, err := (&http.Client{Transport: c.RoundTripper()}).Do(postTo(t, srv.URL+"/away", "x"))
		if !errors.Is(err, idem.ErrInvalidRequest) || len(other.requests()) != before {
			t.Fatalf("Do = %v, other origin saw %d requests; want the redirect refused and nothing sent there", err, len(other.requests())-before)
		}
	})
}

// conflictServer answers like a server whose first attempt stalled: the
// first request of a key is held until release is closed, then committed;
// while it is held, every request with the key gets a 409 without
// Retry-After; after the commit, the stored 201 is replayed. onConflict
// runs before each 409 is sent.
type conflictServer struct {
	*hostile
	release   chan struct{}
	committed chan struct{}
	mu        sync.Mutex
	state     map[string]string // key: "in flight" or "done"
	effects   int
}

func newConflictServer(t *testing.T, onConflict func(n int)) *conflictServer {
	s := &conflictServer{release: make(chan struct{}), committed: make(chan struct{}), state: map[string]string{}}
	conflicts := 0
	s.hostile = newHostile(t, func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		switch s.state[key] {
		case "":
			s.state[key] = "in flight"
			s.mu.Unlock()
			<-s.release
			s.mu.Lock()
			s.state[key] = "done"
			s.effects++
			s.mu.Unlock()
			close(s.committed)
			w.WriteHeader(http.StatusCreated) // to a client long gone
		case "in flight":
			conflicts++
			n := conflicts
			s.mu.Unlock()
			if onConflict != nil {
				onConflict(n)
			}
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"title":"a request with this key is being processed"}`)
		case "done":
			s.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
		}
	})
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
	})
	return s
}

// C7.3, C7.5, C1.2: a 409 without Retry-After while the first attempt is still being
// processed is not a refusal. Retried, it ends done in the first run once
// the server commits; when attempts run out first, the operation stays
// pending (unknown, never rejected) and the next run resumes it under the
// same key. Either way the server applied it once.
func TestHostileBareConflictWhileInFlight(t *testing.T) {
	quick := func(cfg *idem.Config) { cfg.AttemptTimeout = 100 * time.Millisecond }

	t.Run("done in the first run", func(t *testing.T) {
		var s *conflictServer
		s = newConflictServer(t, func(n int) {
			if n == 2 { // the server finishes while the client retries
				close(s.release)
				<-s.committed
			}
		})
		c, j := hostileClient(t, func(cfg *idem.Config) { quick(cfg); cfg.MaxAttempts = 10 })
		resp, err := c.Do("charge-1", postTo(t, s.URL+"/charges", "x"))
		if status := checkOutcome(t, resp, err, idem.OutcomeDone); status != 201 {
			t.Fatalf("status %d, want the replayed 201", status)
		}
		requireOneKeyOneEffect(t, s, j, 4) // stalled, 409, 409, replay
	})

	t.Run("unknown, then done on resume", func(t *testing.T) {
		s := newConflictServer(t, nil)
		c, j := hostileClient(t, func(cfg *idem.Config) { quick(cfg); cfg.MaxAttempts = 3 })
		_, err := c.Do("charge-1", postTo(t, s.URL+"/charges", "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Status != 409 || !errors.Is(err, idem.ErrAttemptsExhausted) {
			t.Fatalf("Do = %v, want unknown after attempts exhausted on 409s", err)
		}
		if op, _ := lookup(j, "charge-1"); op.State != journal.StatePending {
			t.Fatalf("journal holds %v, want pending", op.State)
		}
		close(s.release)
		<-s.committed
		resp, err := c.Do("charge-1", postTo(t, s.URL+"/charges", "x"))
		if status := checkOutcome(t, resp, err, idem.OutcomeDone); status != 201 {
			t.Fatalf("resumed: status %d, want the replayed 201", status)
		}
		requireOneKeyOneEffect(t, s, j, 4) // stalled, 409, 409, replay
	})
}

// requireOneKeyOneEffect checks that the server saw n requests, all under
// the key the journal holds as done, and applied the operation once.
func requireOneKeyOneEffect(t *testing.T, s *conflictServer, j *filejournal.Journal, n int) {
	t.Helper()
	op, _ := lookup(j, "charge-1")
	reqs := s.requests()
	for _, r := range reqs {
		if r.key != op.Key {
			t.Fatalf("a request carried key %q, the journal holds %q", r.key, op.Key)
		}
	}
	s.mu.Lock()
	effects := s.effects
	s.mu.Unlock()
	if len(reqs) != n || effects != 1 || op.State != journal.StateDone || op.Status != 201 {
		t.Fatalf("%d requests, %d effects, journal %v %d; want %d requests, 1 effect, done 201", len(reqs), effects, op.State, op.Status, n)
	}
}

// C7.4: a 409 that the server marks as its stored answer for the key is
// final: rejected after one attempt, recorded, not sent again.
func TestHostileStoredConflictIsRejected(t *testing.T) {
	srv := newHostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"title":"insufficient stock"}`)
	})
	c, j := hostileClient(t, nil)
	for run := range 2 {
		_, err := c.Do("reserve-1", postTo(t, srv.URL+"/reservations", "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeRejected || oe.Status != 409 || oe.Recorded != (run == 1) {
			t.Fatalf("run %d: Do = %v, want a rejection with 409 (recorded: %v)", run, err, run == 1)
		}
	}
	if op, _ := lookup(j, "reserve-1"); op.State != journal.StateRejected || len(srv.requests()) != 1 {
		t.Fatalf("journal %v after %d requests, want rejected after 1", op.State, len(srv.requests()))
	}
}

// J4: one writer per journal file, whatever name reaches it. A second
// writer through a symlink meets the lock; a file with a second hard link
// is refused by every name, with an error that says how to fix it.
func TestHostileSecondWriterThroughAnotherName(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.journal")
	j, err := filejournal.Open(real, filejournal.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	t.Run("symlink", func(t *testing.T) {
		other := t.TempDir()
		link := filepath.Join(other, "link.journal")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		chain := filepath.Join(other, "chain.journal")
		if err := os.Symlink("link.journal", chain); err != nil { // relative, through another link
			t.Fatal(err)
		}
		for _, name := range []string{link, chain} {
			if _, err := filejournal.Open(name, filejournal.Options{Logger: quietLog}); !errors.Is(err, filejournal.ErrLocked) {
				t.Fatalf("second writer through %s: %v, want ErrLocked", name, err)
			}
		}
	})

	t.Run("dot-dot after a symlink", func(t *testing.T) {
		// other/a/link -> dir/sub: "other/a/link/../real.journal" is
		// dir/real.journal, as the kernel reads it, not other/a/real.journal.
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		other := t.TempDir()
		if err := os.Mkdir(filepath.Join(other, "a"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "sub"), filepath.Join(other, "a", "link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("link/../real.journal", filepath.Join(other, "a", "rel.journal")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{other + "/a/link/../real.journal", filepath.Join(other, "a", "rel.journal")} {
			if _, err := filejournal.Open(name, filejournal.Options{Logger: quietLog}); !errors.Is(err, filejournal.ErrLocked) {
				t.Fatalf("second writer through %s: %v, want ErrLocked", name, err)
			}
		}
		if _, err := os.Stat(filepath.Join(other, "a", "real.journal")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a journal was created beside the link: %v", err)
		}
	})

	t.Run("relative path from a working directory reached through a symlink", func(t *testing.T) {
		// cwd is dir/sub, reached as other/cur: "../real.journal" is
		// dir/real.journal, whatever $PWD spells.
		other := t.TempDir()
		if err := os.Symlink(filepath.Join(dir, "sub"), filepath.Join(other, "cur")); err != nil {
			t.Fatal(err)
		}
		t.Chdir(filepath.Join(other, "cur"))
		if _, err := filejournal.Open("../real.journal", filejournal.Options{Logger: quietLog}); !errors.Is(err, filejournal.ErrLocked) {
			t.Fatalf("second writer through ../real.journal: %v, want ErrLocked", err)
		}
	})

	t.Run("hard link", func(t *testing.T) {
		alias := filepath.Join(dir, "alias.journal")
		if err := os.Link(real, alias); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(alias)
		_, err := filejournal.Open(alias, filejournal.Options{Logger: quietLog})
		if !errors.Is(err, filejournal.ErrHardLinked) || !strings.Contains(err.Error(), "-samefile") {
			t.Fatalf("second writer through a hard link: %v, want ErrHardLinked saying how to find the other names", err)
		}
		j.Close()
		for _, name := range []string{real, alias} {
			if _, err := filejournal.Open(name, filejournal.Options{Logger: quietLog}); !errors.Is(err, filejournal.ErrHardLinked) {
				t.Fatalf("opening %s while the file has two names: %v, want ErrHardLinked", filepath.Base(name), err)
			}
		}
		if err := os.Remove(alias); err != nil {
			t.Fatal(err)
		}
		j2, err := filejournal.Open(real, filejournal.Options{Logger: quietLog})
		if err != nil {
			t.Fatalf("with one name again: %v", err)
		}
		j2.Close()
	})
}

// J4, J7: compaction of a journal opened through a symlink writes and
// renames beside the real file: the link stays a link to the live journal,
// and the journal the real name holds is the compacted one.
func TestHostileCompactionThroughASymlink(t *testing.T) {
	realDir, linkDir := t.TempDir(), t.TempDir()
	real := filepath.Join(realDir, "real.journal")
	link := filepath.Join(linkDir, "link.journal")
	if err := os.Symlink(real, link); err != nil { // dangling until the journal is created
		t.Fatal(err)
	}
	j, err := filejournal.Open(link, filejournal.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprint("op-", i)
		if err := journalhelp.Begin(j, journal.Operation{ID: id, Key: fmt.Sprint("key-", i)}); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := journalhelp.Complete(j, journal.Operation{ID: id, State: journal.StateDone, Status: 201, Body: []byte("ok")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := journalhelp.Begin(j, journal.Operation{ID: "after", Key: "key-after"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(link); err != nil || target != real {
		t.Fatalf("after compaction the link points at %q (%v), want %q", target, err, real)
	}
	if entries, _ := os.ReadDir(linkDir); len(entries) != 1 {
		t.Fatalf("the link's directory holds %v, want the link alone", entries)
	}
	r, err := filejournal.Open(real, filejournal.Options{ReadOnly: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st := r.Stats(); st.Operations != 4 || st.Records != 6 {
		t.Fatalf("the real file holds %d operations in %d records, want 4 in 6 (compacted, then one appended)", st.Operations, st.Records)
	}
}

// C3.2: a response header of megabytes is returned to the caller whole, but
// the journal records a bounded part of it, flagged, so a hostile server
// cannot grow the journal (and the memory indexing it) without limit.
func TestHostileHugeResponseHeader(t *testing.T) {
	huge := strings.Repeat("h", 9<<20)
	srv := newHostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Huge", huge)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	})
	c, j := hostileClient(t, nil)
	const ops = 3
	for i := range ops {
		resp, err := c.Do(fmt.Sprint("op-", i), postTo(t, srv.URL+"/charges", "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(resp.Header.Get("X-Huge")) != len(huge) {
			t.Fatalf("the caller got %d bytes of X-Huge, want all %d", len(resp.Header.Get("X-Huge")), len(huge))
		}
	}
	bound := int64(ops * (idem.DefaultMaxRecordedHeader + 1024))
	if st := j.Stats(); st.FileSize > bound {
		t.Fatalf("journal is %d bytes after %d operations, want at most %d", st.FileSize, ops, bound)
	}
	r, err := filejournal.Open(j.Path(), filejournal.Options{ReadOnly: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	op, _ := lookup(r, "op-0") // as the next process reads it
	if !op.HeaderTruncated || op.Header.Get("X-Huge") != "" || op.Header.Get("Content-Type") != "application/json" || string(op.Body) != `{"id":"ch_1"}` {
		t.Fatalf("recorded: header truncated %v, header %v, body %q; want the fields that fit, flagged", op.HeaderTruncated, op.Header, op.Body)
	}
}

// S9: a client that stalls its body gets 408 and its connection closed,
// and nothing is committed for its key; an idle keep-alive connection is
// closed; neither holds up a graceful shutdown.
func TestHostileSlowClientsOfTheServer(t *testing.T) {
	in, err := testserver.Listen(testserver.Config{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	const charge = `{"customer":"cus_1","amount":100,"currency":"usd"}`
	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", in.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(20 * time.Second)) // fails the test instead of hanging it
		return conn, bufio.NewReader(conn)
	}
	requireClosed := func(t *testing.T, r *bufio.Reader) {
		t.Helper()
		if b, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("read %q, %v from the connection, want it closed by the server", b, err)
		}
	}

	t.Run("stalled body", func(t *testing.T) {
		conn, r := dial(t)
		fmt.Fprintf(conn, "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow-1\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n%s", len(charge), charge[:10])
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 408 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), "request-timeout") {
			t.Fatalf("answer %d %s %s, want a 408 problem document", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		requireClosed(t, r)

		// Nothing was stored under the key: sent whole, it is a first request.
		req, _ := http.NewRequest(http.MethodPost, in.URL+"/charges", strings.NewReader(charge))
		req.Header.Set("Idempotency-Key", "slow-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err = in.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get(testserver.HeaderReplayed) != "" {
			t.Fatalf("the key sent again: %d, replayed %q; want a first 201", resp.StatusCode, resp.Header.Get(testserver.HeaderReplayed))
		}
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		conn, r := dial(t)
		fmt.Fprint(conn, "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("answer %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		requireClosed(t, r)
	})

	t.Run("shutdown", func(t *testing.T) {
		conn, _ := dial(t)
		fmt.Fprint(conn, "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow-2\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := in.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with a stalled client: %v", err)
		}
	})
}
