package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/filefaults"
	"github.com/idemkit/idem/internal/leakcheck"
	"github.com/idemkit/idem/journal"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// uuidV4 matches the canonical form of a random UUID.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// attemptRecord is what the scripted server saw of one attempt.
type attemptRecord struct {
	Key  string
	Body []byte
}

// script is a server that answers attempt i with steps[i] (the last step
// repeats) and records every attempt it receives.
type script struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []step
	seen  []attemptRecord
}

// step answers one attempt. A nil step answers 200 "ok".
type step func(w http.ResponseWriter, r *http.Request)

func status(code int, body string, header ...string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hangUp drops the connection without a response: the request reached the
// server, the answer never comes back.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func newScript(t *testing.T, steps ...step) *script {
	t.Helper()
	s := &script{t: t, steps: steps}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *script) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	i := len(s.seen)
	s.seen = append(s.seen, attemptRecord{Key: r.Header.Get("Idempotency-Key"), Body: body})
	var st step
	if len(s.steps) > 0 {
		st = s.steps[min(i, len(s.steps)-1)]
	}
	s.mu.Unlock()
	if st == nil {
		st = status(200, "ok")
	}
	st(w, r)
}

func (s *script) attempts() []attemptRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attemptRecord(nil), s.seen...)
}

func (s *script) count() int { return len(s.attempts()) }

// fast is a Config that retries at once, deterministically.
func fast(cfg idem.Config) idem.Config {
	if cfg.InitialWait == 0 {
		cfg.InitialWait = time.Millisecond
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = -1
	}
	return cfg
}

func newClient(t *testing.T, cfg idem.Config) *idem.Client {
	t.Helper()
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newClientAt is newClient for a Client without a journal whose clock is
// now.
func newClientAt(t *testing.T, cfg idem.Config, now func() time.Time) *idem.Client {
	t.Helper()
	c, err := idem.NewWithClock(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func openJournal(t *testing.T, path string) *filejournal.Journal {
	t.Helper()
	j, err := filejournal.Open(path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// C1.1: every attempt of an operation carries the same key, a UUIDv4.
func TestSameKeyOnEveryAttempt(t *testing.T) {
	s := newScript(t, status(503, "busy"), hangUp, status(502, "bad gateway"), status(201, "created"))
	c := newClient(t, fast(idem.Config{}))
	resp, err := c.Do("op-1", post(t, context.Background(), s.srv.URL, `{"amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 201 || got != "created" {
		t.Fatalf("got %d %q, want 201 created", resp.StatusCode, got)
	}
	seen := s.attempts()
	if len(seen) != 4 {
		t.Fatalf("server saw %d attempts, want 4", len(seen))
	}
	if !uuidV4.MatchString(seen[0].Key) {
		t.Fatalf("key %q is not a UUIDv4", seen[0].Key)
	}
	for i, a := range seen {
		if a.Key != seen[0].Key {
			t.Fatalf("attempt %d carried key %q, attempt 1 carried %q", i+1, a.Key, seen[0].Key)
		}
	}
}

// C1.2, C1.4 across a restart: a pending operation resumes under its journaled key,
// and a new operation gets a new key.
func TestKeySurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	s := newScript(t, status(503, ""), status(503, ""), status(200, "ok"))

	j := openJournal(t, path)
	c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 2}))
	_, err := c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first run: err = %v, want ErrUnknown", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = openJournal(t, path)
	defer j.Close()
	op, ok := lookup(j, "op-1")
	if !ok || op.State != journal.StatePending {
		t.Fatalf("after reopen: Lookup = %+v, %v; want pending", op, ok)
	}
	c = newClient(t, fast(idem.Config{Journal: j}))
	resp, err := c.Do("op-1", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.attempts()
	if len(seen) != 3 {
		t.Fatalf("server saw %d attempts, want 3", len(seen))
	}
	for i, a := range seen {
		if a.Key != op.Key {
			t.Fatalf("attempt %d carried %q, journal holds %q", i+1, a.Key, op.Key)
		}
	}
	resp, err = c.Do("op-2", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if k := s.attempts()[3].Key; k == op.Key || !uuidV4.MatchString(k) {
		t.Fatalf("op-2 key %q: want a fresh UUIDv4", k)
	}
}

// C4.1, C4.3: a completed operation is answered from the journal after a restart,
// with no network call, for done and for rejected.
func TestCompletedOperationNotSentAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	s := newScript(t)
	s.steps = []step{status(201, `{"id":"ch_1"}`, "Content-Type", "application/json"), status(422, `{"error":"bad currency"}`)}

	j := openJournal(t, path)
	c := newClient(t, fast(idem.Config{Journal: j}))
	resp, err := c.Do("charge", post(t, context.Background(), s.srv.URL, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if Recorded := idem.Recorded(resp); Recorded {
		t.Fatal("a fresh response reported as recorded")
	}
	resp.Body.Close()
	if _, err := c.Do("refund", post(t, context.Background(), s.srv.URL, "b")); !errors.Is(err, idem.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	j.Close()

	j = openJournal(t, path)
	defer j.Close()
	c = newClient(t, fast(idem.Config{Journal: j}))
	resp, err = c.Do("charge", post(t, context.Background(), s.srv.URL, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !idem.Recorded(resp) {
		t.Fatal("recorded response not reported as recorded")
	}
	if got := readAll(t, resp); resp.StatusCode != 201 || got != `{"id":"ch_1"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("recorded response = %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	_, err = c.Do("refund", post(t, context.Background(), s.srv.URL, "b"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeRejected || oe.Status != 422 || string(oe.Body) != `{"error":"bad currency"}` || oe.Attempts != 0 || !oe.Recorded {
		t.Fatalf("recorded rejection = %#v", err)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("server saw %d attempts, want 2 (none after the restart)", n)
	}
}

// C5.1: the same ID with a different method, URL or body is refused before
// anything is sent.
func TestMismatchRefusedWithoutSending(t *testing.T) {
	s := newScript(t, status(503, ""), status(200, "ok"))
	c := newClient(t, fast(idem.Config{MaxAttempts: 1}))
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "body-1")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
	for _, req := range []*http.Request{
		post(t, context.Background(), s.srv.URL, "body-2"),
		post(t, context.Background(), s.srv.URL+"/other", "body-1"),
		func() *http.Request {
			r := post(t, context.Background(), s.srv.URL, "body-1")
			r.Method = http.MethodPut
			return r
		}(),
	} {
		if _, err := c.Do("op", req); !errors.Is(err, idem.ErrMismatch) {
			t.Fatalf("%s %s: err = %v, want ErrMismatch", req.Method, req.URL, err)
		}
	}
	if n := s.count(); n != 1 {
		t.Fatalf("server saw %d attempts, want 1", n)
	}
}

// C6.1, C6.4: a pending operation older than KeyTTL is refused, nothing is sent,
// and the journal lists it as expired.
func TestExpiredKeyRefusedWithoutSending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	s := newScript(t, hangUp)
	now := newTestClock()
	clock := now.Now

	j, err := filejournal.Open(path, filejournal.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.Dialect{Retention: time.Hour}, MaxAttempts: 1}))
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
	now.Advance(time.Hour - time.Nanosecond)
	if len(list(j, journal.ListExpired)) != 0 {
		t.Fatal("listed as expired before KeyTTL")
	}
	now.Advance(time.Nanosecond)
	_, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("err = %v, want ErrKeyExpired", err)
	}
	if n := s.count(); n != 1 {
		t.Fatalf("server saw %d attempts, want 1", n)
	}
	if exp := list(j, journal.ListExpired); len(exp) != 1 || exp[0].ID != "op" {
		t.Fatalf("Expired() = %+v, want op", exp)
	}
}

// C7.1-C7.7: the retry classification.
func TestRetryClassification(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	redirectLoop := func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect)
	}
	tests := []struct {
		name     string
		first    step
		attempts int           // attempts the server sees
		outcome  idem.Outcome  // with a 200 as the second answer
		timeout  time.Duration // AttemptTimeout; default 10s, which no other row reaches
	}{
		{"connection dropped", hangUp, 2, idem.OutcomeDone, 0},
		{"attempt timeout", slow, 2, idem.OutcomeDone, 300 * time.Millisecond},
		{"408", status(408, ""), 2, idem.OutcomeDone, 0},
		{"409 key in flight", status(409, "", "Retry-After", "0"), 2, idem.OutcomeDone, 0},
		{"429", status(429, ""), 2, idem.OutcomeDone, 0},
		{"500", status(500, ""), 2, idem.OutcomeDone, 0},
		{"502", status(502, ""), 2, idem.OutcomeDone, 0},
		{"503", status(503, ""), 2, idem.OutcomeDone, 0},
		{"504", status(504, ""), 2, idem.OutcomeDone, 0},
		{"200", status(200, ""), 1, idem.OutcomeDone, 0},
		{"201", status(201, ""), 1, idem.OutcomeDone, 0},
		{"400", status(400, ""), 1, idem.OutcomeRejected, 0},
		{"401", status(401, ""), 1, idem.OutcomeRejected, 0},
		{"404", status(404, ""), 1, idem.OutcomeRejected, 0},
		{"409 without Retry-After", status(409, ""), 2, idem.OutcomeDone, 0},
		{"409 replayed", status(409, "", "Idempotent-Replayed", "true"), 1, idem.OutcomeRejected, 0},
		{"422", status(422, ""), 1, idem.OutcomeRejected, 0},
		{"501", status(501, ""), 1, idem.OutcomeRejected, 0},
		{"too many redirects", redirectLoop, 10, idem.OutcomeUnknown, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(t, tt.first, status(200, ""))
			if tt.outcome == idem.OutcomeUnknown {
				s.steps = []step{tt.first}
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			c := newClient(t, fast(idem.Config{AttemptTimeout: timeout}))
			resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
			got := idem.OutcomeDone
			if err != nil {
				var oe *idem.OutcomeError
				if !errors.As(err, &oe) {
					t.Fatalf("err = %v, want an *OutcomeError", err)
				}
				got = oe.Outcome
				if oe.Attempts != 1 {
					t.Fatalf("Attempts = %d, want 1", oe.Attempts)
				}
			} else {
				resp.Body.Close()
			}
			if got != tt.outcome || s.count() != tt.attempts {
				t.Fatalf("outcome %v after %d server attempts, want %v after %d", got, s.count(), tt.outcome, tt.attempts)
			}
		})
	}
}

// C7.7, C7.8: the caller's context ending is not retried, and the outcome is
// unknown; a malformed request is refused before anything is sent.
func TestNotRetried(t *testing.T) {
	t.Run("caller's context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := newScript(t, func(w http.ResponseWriter, r *http.Request) { cancel(); <-r.Context().Done() })
		c := newClient(t, fast(idem.Config{}))
		_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, context.Canceled) || oe.Attempts != 1 {
			t.Fatalf("err = %v, want Unknown after 1 attempt wrapping context.Canceled", err)
		}
		if n := s.count(); n != 1 {
			t.Fatalf("server saw %d attempts, want 1", n)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		c := newClient(t, fast(idem.Config{}))
		for _, url := range []string{"ftp://example.test/x", "/relative", "http:///nohost"} {
			req, err := http.NewRequest(http.MethodPost, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Do("op-"+url, req); !errors.Is(err, idem.ErrInvalidRequest) {
				t.Fatalf("%s: err = %v, want ErrInvalidRequest", url, err)
			}
		}
		if _, err := c.Do("", post(t, context.Background(), "http://example.test", "")); !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("empty ID: err = %v, want ErrInvalidRequest", err)
		}
	})
	t.Run("certificate", func(t *testing.T) {
		var handled atomic.Int32
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled.Add(1) }))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake failure is the point
		srv.StartTLS()
		defer srv.Close()
		c := newClient(t, fast(idem.Config{})) // does not trust the test certificate
		_, err := c.Do("op", post(t, context.Background(), srv.URL, "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 1 || oe.Status != 0 {
			t.Fatalf("err = %v, want Unknown after 1 attempt with no status", err)
		}
		if handled.Load() != 0 {
			t.Fatal("the server handled a request")
		}
	})
}

// Retry-After is honoured in both forms and capped by MaxWait. The waits
// are observed through OnAttempt, which ends the Do instead of waiting.
func TestRetryAfter(t *testing.T) {
	date := func() string { return time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat) }
	tests := []struct {
		name     string
		header   func() string
		maxWait  time.Duration
		min, max time.Duration
	}{
		{"seconds", func() string { return "3" }, 0, 3 * time.Second, 3 * time.Second},
		{"http date", date, 0, 3 * time.Second, 5 * time.Second},
		{"484289 hours", func() string { return strconv.Itoa(484289 * 3600) }, 7 * time.Second, 7 * time.Second, 7 * time.Second},
		{"below backoff", func() string { return "0" }, 0, time.Millisecond, time.Millisecond},
		{"unparseable", func() string { return "soon" }, 0, time.Millisecond, time.Millisecond},
		{"beyond time.Duration", func() string { return "99999999999999" }, 7 * time.Second, 7 * time.Second, 7 * time.Second},
	}
	for _, tt := range tests {
		for _, code := range []int{429, 503, 409} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, code), func(t *testing.T) {
				s := newScript(t, func(w http.ResponseWriter, r *http.Request) {
					status(code, "", "Retry-After", tt.header())(w, r)
				})
				ctx, cancel := context.WithCancel(context.Background())
				var waits []time.Duration
				c := newClient(t, fast(idem.Config{MaxWait: tt.maxWait, OnAttempt: func(a idem.Attempt) {
					waits = append(waits, a.Wait)
					cancel()
				}}))
				_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
				if len(waits) != 1 || waits[0] < tt.min || waits[0] > tt.max {
					t.Fatalf("waits = %v, want one in [%v, %v]", waits, tt.min, tt.max)
				}
			})
		}
	}
}

// C8.4: the caller's context ends a wait at once, and the operation stays
// pending under its key.
func TestContextEndsWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	j := openJournal(t, path)
	defer j.Close()
	s := newScript(t, status(503, "busy", "Retry-After", "3600"))
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	c := newClient(t, idem.Config{Journal: j, MaxWait: time.Hour, MaxElapsed: 2 * time.Hour, OnAttempt: func(a idem.Attempt) {
		if a.Retry && a.Wait == time.Hour {
			close(waiting)
		}
	}})
	done := make(chan error, 1)
	go func() {
		_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
		done <- err
	}()
	<-waiting
	cancel()
	select {
	case err := <-done:
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, context.Canceled) || oe.Status != 503 || string(oe.Body) != "busy" {
			t.Fatalf("err = %v, want Unknown, canceled, last status 503 busy", err)
		}
		if op, _ := lookup(j, "op"); op.State != journal.StatePending || op.Key != oe.Key {
			t.Fatalf("journal holds %+v, want pending under %s", op, oe.Key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do still waiting 10s after its context was canceled, in a wait of an hour")
	}
}

// C8.3: MaxAttempts and MaxElapsed bound the retries.
func TestRetryBounds(t *testing.T) {
	t.Run("MaxAttempts", func(t *testing.T) {
		s := newScript(t, status(503, "down"))
		c := newClient(t, fast(idem.Config{MaxAttempts: 3}))
		_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 3 || s.count() != 3 {
			t.Fatalf("err = %v after %d server attempts, want Unknown after 3", err, s.count())
		}
	})
	t.Run("MaxElapsed", func(t *testing.T) {
		s := newScript(t, status(503, "", "Retry-After", "1"))
		c := newClient(t, fast(idem.Config{MaxElapsed: 500 * time.Millisecond}))
		_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 1 || !strings.Contains(err.Error(), "maximum elapsed time") {
			t.Fatalf("err = %v, want Unknown after 1 attempt, stopped by MaxElapsed", err)
		}
	})
}

// The default backoff is jittered; Jitter < 0 turns it off.
func TestDefaultJitter(t *testing.T) {
	firstWaits := func(cfg idem.Config, n int) map[time.Duration]int {
		s := newScript(t, status(503, ""))
		waits := map[time.Duration]int{}
		for i := range n {
			ctx, cancel := context.WithCancel(context.Background())
			cfg.OnAttempt = func(a idem.Attempt) { waits[a.Wait]++; cancel() }
			c := newClient(t, cfg)
			c.Do(fmt.Sprint("op-", i), post(t, ctx, s.srv.URL, "x"))
		}
		return waits
	}
	jittered := firstWaits(idem.Config{InitialWait: 100 * time.Millisecond}, 50)
	for w := range jittered {
		if w < 50*time.Millisecond || w > 150*time.Millisecond {
			t.Fatalf("wait %v outside [50ms, 150ms]", w)
		}
	}
	if len(jittered) < 2 {
		t.Fatalf("50 first waits took %d distinct values, want jitter", len(jittered))
	}
	if plain := firstWaits(idem.Config{InitialWait: 100 * time.Millisecond, Jitter: -1}, 5); len(plain) != 1 || plain[100*time.Millisecond] != 5 {
		t.Fatalf("without jitter the first waits were %v, want 100ms five times", plain)
	}
}

// C9.3: an Unknown outcome's error says the attempts, the last status, a
// bounded prefix of the last body, the key, and the cause.
func TestOutcomeErrorContents(t *testing.T) {
	long := strings.Repeat("x", 10000)
	s := newScript(t, status(502, "upstream timed out"), status(503, long))
	c := newClient(t, fast(idem.Config{MaxAttempts: 2}))
	_, err := c.Do("invoice-7", post(t, context.Background(), s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v, want *OutcomeError", err)
	}
	key := s.attempts()[0].Key
	if oe.ID != "invoice-7" || oe.Key != key || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 2 || oe.Status != 503 {
		t.Fatalf("OutcomeError = %+v", oe)
	}
	if string(oe.Body) != long[:4096] || !oe.BodyTruncated {
		t.Fatalf("Body is %d bytes (truncated %v), want the first 4096 of the last body", len(oe.Body), oe.BodyTruncated)
	}
	if !errors.Is(err, idem.ErrUnknown) || errors.Is(err, idem.ErrRejected) {
		t.Fatal("errors.Is does not follow the outcome")
	}
	for _, want := range []string{`"invoice-7"`, "unknown", "2 attempt(s)", key, "last status 503", "attempts exhausted"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q lacks %q", err.Error(), want)
		}
	}
}

// C10.1: the body goes out byte-identical on every attempt, whether it was
// buffered or streamed through GetBody.
func TestBodyReplayedByteIdentical(t *testing.T) {
	payload := make([]byte, 3<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	tests := []struct {
		name string
		req  func(url string) *http.Request
		want []byte
	}{
		{"GetBody", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
			return r
		}, payload},
		{"buffered reader", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, io.NopCloser(bytes.NewReader(payload[:1<<20])))
			return r
		}, payload[:1<<20]},
		{"no body", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodDelete, url, nil)
			return r
		}, []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(t, status(500, ""), hangUp, status(200, ""))
			c := newClient(t, fast(idem.Config{}))
			resp, err := c.Do("op", tt.req(s.srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := s.attempts()
			if len(seen) != 3 {
				t.Fatalf("%d attempts, want 3", len(seen))
			}
			for i, a := range seen {
				if sha256.Sum256(a.Body) != sha256.Sum256(tt.want) {
					t.Fatalf("attempt %d sent %d bytes, not the %d of the request", i+1, len(a.Body), len(tt.want))
				}
			}
		})
	}
}

// A body without GetBody is buffered up to MaxBufferedBody, and refused
// beyond it before anything is sent.
func TestBufferedBodyLimit(t *testing.T) {
	s := newScript(t)
	c := newClient(t, fast(idem.Config{MaxBufferedBody: 1000}))
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL, io.NopCloser(strings.NewReader(strings.Repeat("a", 1001))))
	if _, err := c.Do("big", req); !errors.Is(err, idem.ErrBodyTooLarge) || !errors.Is(err, idem.ErrInvalidRequest) {
		t.Fatalf("err = %v, want ErrBodyTooLarge", err)
	}
	req, _ = http.NewRequest(http.MethodPost, s.srv.URL, io.NopCloser(strings.NewReader(strings.Repeat("a", 1000))))
	resp, err := c.Do("fits", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.count() != 1 || len(s.attempts()[0].Body) != 1000 {
		t.Fatalf("server saw %d attempts", s.count())
	}
}

// C3.3: a response body larger than MaxRecordedBody reaches the caller in
// full; the recorded outcome keeps status and header, and its body says it
// was not recorded.
func TestRecordedBodyLimit(t *testing.T) {
	big := strings.Repeat("b", 5000)
	s := newScript(t, status(200, big, "X-Charge", "ch_9"))
	c := newClient(t, fast(idem.Config{MaxRecordedBody: 1000}))
	resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != big {
		t.Fatalf("caller read %d bytes, want %d", len(got), len(big))
	}
	resp, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !idem.Recorded(resp) || resp.StatusCode != 200 || resp.Header.Get("X-Charge") != "ch_9" {
		t.Fatalf("recorded response %d %v", resp.StatusCode, resp.Header)
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, idem.ErrBodyNotRecorded) || !strings.HasPrefix(err.Error(), "idem: response body not recorded: it was larger than") {
		t.Fatalf("reading the recorded body: %v, want ErrBodyNotRecorded saying it was larger than the limit", err)
	}
	if s.count() != 1 {
		t.Fatalf("server saw %d attempts, want 1", s.count())
	}
}

// C3.2: a response header larger than MaxRecordedHeader reaches the caller in
// full; the recorded outcome keeps the fields that fit, in name order, and
// says that some are missing.
func TestRecordedHeaderLimit(t *testing.T) {
	big := strings.Repeat("m", 3000)
	s := newScript(t, status(422, "no", "A-Small", "1", "M-Big", big, "Z-Small", "2"))
	c := newClient(t, fast(idem.Config{MaxRecordedHeader: 1000}))
	var live, recorded *idem.OutcomeError
	_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.As(err, &live) || live.Header.Get("M-Big") != big || live.HeaderTruncated {
		t.Fatalf("first Do: %v, want a rejection with the whole header", err)
	}
	_, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.As(err, &recorded) || !recorded.Recorded || !recorded.HeaderTruncated {
		t.Fatalf("second Do: %v, want the recorded rejection, its header truncated", err)
	}
	h := recorded.Header
	if h.Get("M-Big") != "" || h.Get("A-Small") != "1" || h.Get("Z-Small") != "2" || string(recorded.Body) != "no" || s.count() != 1 {
		t.Fatalf("recorded header %v, body %q after %d attempts; want the small fields, the body, 1 attempt", h, recorded.Body, s.count())
	}
}

// C3.2: over MaxRecordedHeader, the fields that say what became of the
// request are kept before any other: the padding here would fit beside
// all of them but one, and sorts first.
func TestRecordedHeaderKeepsWhatSaysWhatBecameOfTheRequest(t *testing.T) {
	first := []string{"Location", "/charges/1", "Content-Location", "/charges/1", "Content-Type", "application/json",
		"Retry-After", "5", "Idempotent-Replayed", "false"}
	s := newScript(t, status(201, "made", append([]string{"A-Padding", strings.Repeat("p", 870)}, first...)...))
	c := newClient(t, fast(idem.Config{MaxRecordedHeader: 1000}))
	resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i := 0; i < len(first); i += 2 {
		if got := resp.Header.Get(first[i]); got != first[i+1] {
			t.Errorf("recorded %s = %q, want %q", first[i], got, first[i+1])
		}
	}
	if !idem.Recorded(resp) || resp.Header.Get("A-Padding") != "" || s.count() != 1 {
		t.Fatalf("recorded %v, header %v after %d requests: want the padding left out", idem.Recorded(resp), resp.Header, s.count())
	}
}

// C10.2: every response body of a discarded attempt is closed.
func TestDiscardedBodiesClosed(t *testing.T) {
	s := newScript(t, status(503, "a"), status(500, strings.Repeat("b", 100000)), status(429, "c"), status(200, "d"))
	tr := &closeTracker{base: http.DefaultTransport}
	c := newClient(t, fast(idem.Config{HTTPClient: &http.Client{Transport: tr}}))
	resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "d" {
		t.Fatalf("body %q", got)
	}
	if opened, closed := tr.counts(); opened != 4 || closed != 4 {
		t.Fatalf("%d bodies opened, %d closed; want 4 and 4", opened, closed)
	}

	// The last response of an unknown outcome, and a rejection's.
	s2 := newScript(t, status(503, strings.Repeat("u", 100000)), status(503, "v"), status(422, strings.Repeat("r", 100000)))
	tr2 := &closeTracker{base: http.DefaultTransport}
	c = newClient(t, fast(idem.Config{MaxAttempts: 2, HTTPClient: &http.Client{Transport: tr2}}))
	if _, err := c.Do("a", post(t, context.Background(), s2.srv.URL, "x")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
	if _, err := c.Do("b", post(t, context.Background(), s2.srv.URL, "x")); !errors.Is(err, idem.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	if opened, closed := tr2.counts(); opened != 3 || closed != 3 {
		t.Fatalf("%d bodies opened, %d closed; want 3 and 3", opened, closed)
	}
}

type closeTracker struct {
	base           http.RoundTripper
	opened, closed atomic.Int32
}

func (t *closeTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		t.opened.Add(1)
		resp.Body = &trackedBody{ReadCloser: resp.Body, t: t}
	}
	return resp, err
}

func (t *closeTracker) counts() (int32, int32) { return t.opened.Load(), t.closed.Load() }

type trackedBody struct {
	io.ReadCloser
	t    *closeTracker
	once sync.Once
}

func (b *trackedBody) Close() error {
	b.once.Do(func() { b.t.closed.Add(1) })
	return b.ReadCloser.Close()
}

// The retry budget drains under failures, stopping retries (not first
// attempts), and refills with final answers.
func TestRetryBudget(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if fail.Load() {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	c := newClient(t, fast(idem.Config{MaxAttempts: 10, RetryBudget: idem.RetryBudget{MaxTokens: 4, Refund: 0.1}}))
	do := func(id string) (int, error) {
		before := n.Load()
		resp, err := c.Do(id, post(t, context.Background(), srv.URL, "x"))
		if err == nil {
			resp.Body.Close()
		}
		return int(n.Load() - before), err
	}

	// Tokens 4 → 3 (a retry is allowed above 2) → 2 (no more).
	if got, err := do("a"); got != 2 || !errors.Is(err, idem.ErrRetryBudgetExhausted) || !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first op: %d attempts, err %v; want 2, budget exhausted", got, err)
	}
	if got, err := do("b"); got != 1 || !errors.Is(err, idem.ErrRetryBudgetExhausted) {
		t.Fatalf("second op: %d attempts, err %v; want 1 (first attempts are not throttled)", got, err)
	}
	// Tokens 1. Ten final answers refund 1: still no retry above 2.
	fail.Store(false)
	for i := range 10 {
		if got, err := do(fmt.Sprint("ok-", i)); got != 1 || err != nil {
			t.Fatalf("ok-%d: %d attempts, err %v", i, got, err)
		}
	}
	fail.Store(true)
	if got, _ := do("c"); got != 1 {
		t.Fatalf("after 10 refunds: %d attempts, want 1", got)
	}
	// Tokens 1. Twenty more refunds: 3, and a retry is allowed again.
	fail.Store(false)
	for i := range 20 {
		do(fmt.Sprint("ok2-", i))
	}
	fail.Store(true)
	if got, _ := do("d"); got != 2 {
		t.Fatalf("after refilling: %d attempts, want 2", got)
	}

	unlimited := newClient(t, fast(idem.Config{MaxAttempts: 10, RetryBudget: idem.RetryBudget{MaxTokens: 4, Disabled: true}}))
	before := n.Load()
	unlimited.Do("e", post(t, context.Background(), srv.URL, "x"))
	if got := n.Load() - before; got != 10 {
		t.Fatalf("disabled budget: %d attempts, want 10", got)
	}
}

// C11.2: concurrent Do calls with the same ID send once.
func TestConcurrentSameOperationSendsOnce(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		<-release
		w.WriteHeader(201)
		io.WriteString(w, "once")
	}))
	defer srv.Close()
	c := newClient(t, fast(idem.Config{}))
	const callers = 20
	var wg sync.WaitGroup
	bodies := make(chan string, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Do("op", post(t, context.Background(), srv.URL, "x"))
			if err != nil {
				t.Error(err)
				return
			}
			bodies <- fmt.Sprint(resp.StatusCode, " ", readAll(t, resp))
		}()
	}
	for n.Load() == 0 {
		time.Sleep(time.Millisecond) // until the first attempt is in the handler
	}
	close(release)
	wg.Wait()
	close(bodies)
	for b := range bodies {
		if b != "201 once" {
			t.Fatalf("a caller got %q", b)
		}
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("server saw %d requests, want 1", got)
	}
}

// aDoUnderWay returns a Client whose Do of operation "op" is under way:
// its request has reached srv, which holds it until the test ends.
func aDoUnderWay(t *testing.T) (*idem.Client, *httptest.Server) {
	t.Helper()
	c := newClient(t, fast(idem.Config{}))
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	// Cleanups run last first: the held request ends, then the server,
	// then the Client.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	go func() {
		if resp, err := c.Do("op", post(t, context.Background(), srv.URL, "x")); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	return c, srv
}

// C11.3: a waiting Do gives up when its own context ends.
func TestConcurrentWaiterHonoursContext(t *testing.T) {
	c, srv := aDoUnderWay(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Do("op", post(t, ctx, srv.URL, "x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// A deadline that ends while the second Do waits for the first: were
	// the wait deaf to it, this Do would wait for the first to end, which
	// only the end of the test allows.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Do("op", post(t, ctx, srv.URL, "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

// C11.1: 100 goroutines with distinct IDs, each sent under its own key,
// its retry under the same one.
func TestManyConcurrentOperations(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]string{}
	attempts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := keys[string(body)]; ok && prev != key {
			t.Errorf("%s: key changed from %s to %s", body, prev, key)
		}
		keys[string(body)] = key
		if attempts[string(body)]++; attempts[string(body)] == 1 {
			w.WriteHeader(503) // every operation's first attempt fails
		}
	}))
	defer srv.Close()
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j, RetryBudget: idem.RetryBudget{Disabled: true}}))
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("op-", i)
			resp, err := c.Do(id, post(t, context.Background(), srv.URL, id))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	if len(keys) != 100 || len(distinct) != 100 || len(list(j, journal.ListCompleted)) != 100 {
		t.Fatalf("%d operations answered under %d distinct keys, %d completed; want 100", len(keys), len(distinct), len(list(j, journal.ListCompleted)))
	}
	for body, n := range attempts {
		if n != 2 {
			t.Errorf("%s: %d attempts, want 2 (a 503, then its retry)", body, n)
		}
	}
}

// The key header's name and form are options.
func TestKeyHeaderOptions(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("X-Request-Key") + "|" + r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	c := newClient(t, idem.Config{Dialect: idem.Dialect{KeyHeader: "X-Request-Key", QuotedKey: true}})
	resp, err := c.Do("op", post(t, context.Background(), srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	v := got.Load().(string)
	if !strings.HasPrefix(v, `"`) || !strings.HasSuffix(v, `"|`) || !uuidV4.MatchString(v[1:len(v)-2]) {
		t.Fatalf("headers %q, want a quoted UUID in X-Request-Key only", v)
	}
}

// C12.1, C12.2: the *http.Client form.
func TestStandardClient(t *testing.T) {
	s := newScript(t, status(503, ""), status(422, "invalid"), status(200, "fine"))
	c := newClient(t, fast(idem.Config{}))
	hc := c.StandardClient()

	// With an operation: a rejection is the server's response, and the
	// operation is recorded.
	ctx := idem.WithOperation(context.Background(), "op")
	resp, err := hc.Do(post(t, ctx, s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 422 || got != "invalid" {
		t.Fatalf("got %d %q", resp.StatusCode, got)
	}
	resp, err = hc.Do(post(t, ctx, s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 422 || got != "invalid" || s.count() != 2 {
		t.Fatalf("replayed %d %q after %d attempts", resp.StatusCode, got, s.count())
	}
	if _, err := hc.Do(post(t, ctx, s.srv.URL, "y")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}

	// Without one: a key per request, the same on its retries.
	s2 := newScript(t, status(503, ""), status(200, ""), status(200, ""))
	for range 2 {
		resp, err := hc.Do(post(t, context.Background(), s2.srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	seen := s2.attempts()
	if len(seen) != 3 || seen[0].Key != seen[1].Key || seen[1].Key == seen[2].Key {
		t.Fatalf("keys %v: want the first request's two attempts under one key, the second request under another", seen)
	}
}

// C2.1: the intent is written and fsync'd before the first attempt is sent,
// and what is on disk when the server sees the request holds its key. The
// test holds the intent's fsync: while it is held, nothing reaches the
// server and Do does not return; once it returns, the request goes out.
func TestIntentDurableBeforeFirstAttempt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	arrived := make(chan string, 1) // the key on disk when the request arrived
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ro, err := filejournal.Open(path, filejournal.Options{ReadOnly: true})
		if err != nil {
			t.Error(err)
			return
		}
		defer ro.Close()
		op, _ := lookup(ro, "op")
		arrived <- op.Key
		w.WriteHeader(201)
	}))
	defer srv.Close()
	hold := &heldSync{entered: make(chan struct{}), release: make(chan struct{})}
	j, err := filejournal.Open(path, filefaults.WrapFiles(filejournal.Options{}, func(f fileengine.File) fileengine.File {
		return &heldSyncFile{File: f, hold: hold}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	hold.armed.Store(true) // creating the file is not the point

	c := newClient(t, idem.Config{Journal: j})
	req := post(t, context.Background(), srv.URL, "x")
	var (
		resp  *http.Response
		doErr error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, doErr = c.Do("op", req)
	}()
	defer func() { <-done }()
	release := sync.OnceFunc(func() { close(hold.release) })
	defer release()

	<-hold.entered // the intent is written; its fsync waits for release
	select {
	case <-arrived:
		t.Fatal("the request reached the server before the intent's fsync returned")
	case <-done:
		t.Fatalf("Do returned (%v) before the intent's fsync returned", doErr)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	<-done
	if doErr != nil {
		t.Fatal(doErr)
	}
	resp.Body.Close()
	select {
	case onDisk := <-arrived:
		if op, _ := lookup(j, "op"); onDisk == "" || onDisk != op.Key {
			t.Fatalf("on disk at send time: key %q; journal: %q", onDisk, op.Key)
		}
	default:
		t.Fatal("Do returned without the request reaching the server")
	}
}

// heldSync holds the first Sync after armed is set until release is
// closed; entered is closed when that Sync starts.
type heldSync struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type heldSyncFile struct {
	fileengine.File
	hold *heldSync
}

func (f *heldSyncFile) Sync() error {
	if f.hold.armed.CompareAndSwap(true, false) {
		close(f.hold.entered)
		<-f.hold.release
	}
	return f.File.Sync()
}

// C2.2: when the intent cannot be made durable, nothing is sent and the
// caller gets the error.
func TestIntentNotDurableNothingSent(t *testing.T) {
	s := newScript(t)
	broken := errors.New("injected fsync failure")
	var armed atomic.Bool
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filefaults.WrapFiles(filejournal.Options{},
		func(f fileengine.File) fileengine.File { return &syncFailer{File: f, armed: &armed, err: broken} }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	armed.Store(true)
	c := newClient(t, idem.Config{Journal: j})
	for _, id := range []string{"a", "b"} { // the failure latches
		if _, err := c.Do(id, post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, broken) {
			t.Fatalf("%s: err = %v, want the fsync failure", id, err)
		}
	}
	if n := s.count(); n != 0 {
		t.Fatalf("server saw %d attempts, want 0", n)
	}
}

type syncFailer struct {
	fileengine.File
	armed *atomic.Bool
	err   error
}

func (f *syncFailer) Sync() error {
	if f.armed.Load() {
		return f.err
	}
	return f.File.Sync()
}

// C9.3: the cause of an unknown outcome is kept beside why retrying stopped.
func TestOutcomeErrorKeepsCause(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	c := newClient(t, fast(idem.Config{MaxAttempts: 2}))
	_, err := c.Do("refused", post(t, context.Background(), url, "x"))
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, idem.ErrAttemptsExhausted) || !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want unknown, attempts exhausted, connection refused", err)
	}
	s := newScript(t, hangUp)
	_, err = c.Do("hung up", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.Is(err, io.EOF) || !errors.Is(err, idem.ErrAttemptsExhausted) {
		t.Fatalf("err = %v, want attempts exhausted after EOF", err)
	}
}

// A final status whose body breaks off is a failed attempt: it is retried,
// and only the whole answer is returned and recorded.
func TestBrokenBodyRetried(t *testing.T) {
	broken := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(201)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		hangUp(w, r)
	}
	s := newScript(t, broken, status(201, "whole"))
	c := newClient(t, fast(idem.Config{}))
	resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "whole" || s.count() != 2 {
		t.Fatalf("got %q after %d attempts, want whole after 2", got, s.count())
	}
	resp, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "whole" || !idem.Recorded(resp) {
		t.Fatalf("recorded %q", got)
	}
}

// A fresh rejection's error carries the server's answer.
func TestRejectionCarriesAnswer(t *testing.T) {
	s := newScript(t, status(422, `{"detail":"amount must be positive"}`, "Content-Type", "application/problem+json"))
	c := newClient(t, fast(idem.Config{}))
	_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeRejected || oe.Recorded || oe.Attempts != 1 || oe.Status != 422 ||
		string(oe.Body) != `{"detail":"amount must be positive"}` || oe.BodyTruncated || oe.Header.Get("Content-Type") != "application/problem+json" || oe.Err != nil {
		t.Fatalf("err = %#v", err)
	}
}

// C6.3: retrying stops before an attempt would carry a key older than KeyTTL.
func TestKeyTTLCrossedWhileRetrying(t *testing.T) {
	now := newTestClock()
	clock := now.Now
	s := newScript(t, func(w http.ResponseWriter, r *http.Request) {
		now.Advance(25 * time.Minute) // every attempt takes 25 minutes
		w.WriteHeader(503)
	})
	c := newClientAt(t, fast(idem.Config{Dialect: idem.Dialect{Retention: time.Hour}, MaxElapsed: 24 * time.Hour}), clock)
	_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, idem.ErrKeyExpired) || oe.Attempts != 3 || s.count() != 3 {
		t.Fatalf("err = %v after %d attempts; want unknown, key expired, after 3 (at 0, 25 and 50 minutes)", err, s.count())
	}
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrKeyExpired) || s.count() != 3 {
		t.Fatalf("resume: err = %v, want ErrKeyExpired and nothing sent", err)
	}
}

// C6.3: the wait before the next attempt counts against the key's age. A
// Retry-After that would carry the next attempt past KeyTTL stops the
// retries at once, Unknown with ErrKeyExpired: sent after the wait, the
// attempt could reach a server that has forgotten the key. (OnAttempt
// ends the Do if it would wait instead.)
func TestRetryAfterPastKeyTTLStopsTheRetries(t *testing.T) {
	s := newScript(t, status(503, "busy", "Retry-After", "3600"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []idem.Attempt
	c := newClient(t, fast(idem.Config{Dialect: idem.Dialect{Retention: 30 * time.Minute}, MaxWait: 2 * time.Hour, MaxElapsed: 3 * time.Hour,
		OnAttempt: func(a idem.Attempt) {
			seen = append(seen, a)
			if a.Retry {
				cancel() // it would wait: end it rather than wait an hour
			}
		}}))
	_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, idem.ErrKeyExpired) || oe.Attempts != 1 {
		t.Fatalf("err = %v, want Unknown with ErrKeyExpired after 1 attempt", err)
	}
	if len(seen) != 1 || seen[0].Retry || s.count() != 1 {
		t.Fatalf("attempts %+v, server saw %d; want one attempt, not to be retried", seen, s.count())
	}
}

// Bad input gets a typed error, never a panic.
func TestBadInputNoPanic(t *testing.T) {
	s := newScript(t)
	c := newClient(t, fast(idem.Config{}))
	u := s.srv.URL
	noHeader := &http.Request{Method: http.MethodPost, URL: mustParse(t, u)}
	resp, err := c.Do("no header", noHeader)
	if err != nil {
		t.Fatalf("a request without Header: %v", err)
	}
	resp.Body.Close()

	nilBody := post(t, context.Background(), u, "x")
	nilBody.GetBody = func() (io.ReadCloser, error) { return nil, nil }
	if _, err := c.Do("nil body", nilBody); !errors.Is(err, idem.ErrInvalidRequest) {
		t.Fatalf("GetBody returning nothing: %v, want ErrInvalidRequest", err)
	}
	if _, err := c.Do("nil", nil); !errors.Is(err, idem.ErrInvalidRequest) {
		t.Fatalf("nil request: %v", err)
	}
	if _, err := c.Do(strings.Repeat("x", 5000), post(t, context.Background(), u, "x")); !errors.Is(err, idem.ErrInvalidRequest) {
		t.Fatalf("5000-byte ID: %v", err)
	}
	if idem.Recorded(nil) {
		t.Fatal("Recorded(nil)")
	}
	if s.count() != 1 {
		t.Fatalf("server saw %d attempts, want 1", s.count())
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// New refuses a Config it cannot use.
func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []idem.Config{
		{MaxAttempts: -1},
		{AttemptTimeout: -time.Second},
		{Jitter: math.NaN()},
		{Jitter: 1.5},
		{Dialect: idem.Dialect{KeyHeader: "Bad Header"}},
		{Dialect: idem.Dialect{KeyHeader: "X-Key\n"}},
		{MaxRecordedBody: -1},
		{Journal: (*filejournal.Journal)(nil)}, // a nil journal of any type, not a panic on its first call
	} {
		if _, err := idem.New(cfg); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// Limits at their maximum mean no limit.
func TestMaximalLimits(t *testing.T) {
	s := newScript(t, status(201, "created"))
	c := newClient(t, fast(idem.Config{MaxBufferedBody: math.MaxInt64, MaxRecordedBody: math.MaxInt64}))
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL, io.NopCloser(strings.NewReader("payload")))
	resp, err := c.Do("op", req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "created" || string(s.attempts()[0].Body) != "payload" {
		t.Fatalf("sent %q, got %q", s.attempts()[0].Body, got)
	}
}

// The journal keeps the URL without its user info; the fingerprint covers
// all of it.
func TestJournalURLRedacted(t *testing.T) {
	s := newScript(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j}))
	u := strings.Replace(s.srv.URL, "http://", "http://user:secret@", 1)
	resp, err := c.Do("op", post(t, context.Background(), u, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if op, _ := lookup(j, "op"); op.URL != s.srv.URL {
		t.Fatalf("journal URL %q", op.URL)
	}
	other := strings.Replace(u, "secret", "other", 1)
	if _, err := c.Do("op", post(t, context.Background(), other, "x")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
}

// C14.4: a fragment is never sent, and OAuth's implicit flow puts a token
// there: the journal and the errors hold none, with or without a query.
func TestJournalURLHasNoFragment(t *testing.T) {
	s := newScript(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j}))
	for i, suffix := range []string{"/charges", "/charges?amount=10"} {
		id := "op-" + strconv.Itoa(i)
		resp, err := c.Do(id, post(t, context.Background(), s.srv.URL+suffix+"#access_token=secret-token", "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if op, _ := lookup(j, id); op.URL != s.srv.URL+suffix {
			t.Fatalf("journal URL %q, want %q", op.URL, s.srv.URL+suffix)
		}
	}
	down := "http://127.0.0.1:1/charges#access_token=secret-token"
	if _, err := c.Do("op-down", post(t, context.Background(), down, "x")); err == nil || strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("error of an unreachable URL with a fragment: %v", err)
	}
	if op, _ := lookup(j, "op-down"); strings.Contains(op.URL, "secret-token") {
		t.Fatalf("journal URL %q holds the fragment", op.URL)
	}
}

// C11.2 across Clients: two Clients sharing a journal still send an
// operation once.
func TestClientsSharingAJournalSendOnce(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		entered <- struct{}{}
		<-release
		w.WriteHeader(201)
	}))
	defer srv.Close()
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	a, b := newClient(t, idem.Config{Journal: j}), newClient(t, idem.Config{Journal: j})
	var wg sync.WaitGroup
	for _, c := range []*idem.Client{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Do("op", post(t, context.Background(), srv.URL, "x"))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}()
	}
	<-entered
	close(release)
	wg.Wait()
	if got := n.Load(); got != 1 {
		t.Fatalf("server saw %d requests, want 1", got)
	}
}

// TestAKeyIsJudgedByTheLifetimeRecordedWithIt is C6.7: a Client whose
// Dialect keeps keys an hour leaves an operation pending; two hours later
// another Client on the same journal, whose Dialect keeps them a day, does
// not send it under the key the server forgot an hour ago: it gets
// ErrKeyExpired, nothing sent, and the journal lists it expired. The two
// Clients cannot act as if they agreed.
func TestAKeyIsJudgedByTheLifetimeRecordedWithIt(t *testing.T) {
	now := newTestClock()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{Now: now.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s := newScript(t, status(503, ""))
	hour := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.Dialect{Retention: time.Hour}, MaxAttempts: 1}))
	day := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.Dialect{Retention: 24 * time.Hour}, MaxAttempts: 1}))
	if _, err := hour.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do: %v, want ErrUnknown", err)
	}
	now.Advance(2 * time.Hour)
	if _, err := day.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("the day-retention Client two hours later: %v, want ErrKeyExpired by the operation's one-hour lifetime", err)
	}
	if n := s.count(); n != 1 {
		t.Fatalf("server saw %d requests, want the first only", n)
	}
	if ops := list(j, journal.ListExpired); len(ops) != 1 || ops[0].ID != "op" || ops[0].KeyTTL != time.Hour {
		t.Fatalf("expired listing %+v, want op with its one-hour KeyTTL", ops)
	}
}

// TestTheIntentRecordsTheDialectsRetention is C6.6: each operation's
// intent records the Client's key lifetime, its Dialect's Retention or
// DefaultKeyTTL.
func TestTheIntentRecordsTheDialectsRetention(t *testing.T) {
	for _, tc := range []struct {
		dialect idem.Dialect
		want    time.Duration
	}{
		{idem.Dialect{}, idem.DefaultKeyTTL},
		{idem.Dialect{Retention: 90 * time.Minute}, 90 * time.Minute},
		{idem.Dialect{Name: "long", Retention: 31 * 24 * time.Hour}, 31 * 24 * time.Hour},
	} {
		j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := newScript(t, status(503, ""))
		c := newClient(t, fast(idem.Config{Journal: j, Dialect: tc.dialect, MaxAttempts: 1}))
		c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		if op, ok := lookup(j, "op"); !ok || op.KeyTTL != tc.want {
			t.Errorf("retention %v: recorded KeyTTL %v (found %v), want %v", tc.dialect.Retention, op.KeyTTL, ok, tc.want)
		}
		j.Close()
	}
}

// A completed operation past KeyTTL survives compaction as a summary: its
// ID is answered from the journal, never sent again under a new key.
func TestCompletedOperationAnsweredAfterCompaction(t *testing.T) {
	now := newTestClock()
	clock := now.Now
	path := filepath.Join(t.TempDir(), "ops.journal")
	s := newScript(t, status(201, "charged", "X-Charge", "ch_1"))
	j, err := filejournal.Open(path, filejournal.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fast(idem.Config{Journal: j}))
	resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	now.Advance(30 * 24 * time.Hour)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, err = filejournal.Open(path, filejournal.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	c = newClient(t, fast(idem.Config{Journal: j}))
	resp, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, rerr := io.ReadAll(resp.Body)
	if !idem.Recorded(resp) || resp.StatusCode != 201 || !errors.Is(rerr, idem.ErrBodyNotRecorded) || !strings.HasPrefix(rerr.Error(), "idem: response body not recorded: compaction summarized") {
		t.Fatalf("after compaction: %d, recorded %v, body error %v; want 201 and a body that says compaction dropped it", resp.StatusCode, idem.Recorded(resp), rerr)
	}
	if op, _ := lookup(j, "op"); !op.Summarized || !op.HeaderTruncated || !op.BodyTruncated || op.Header != nil {
		t.Fatalf("summary %+v, want it marked summarized, header and body dropped", op)
	}
	if s.count() != 1 {
		t.Fatalf("server saw %d attempts, want 1", s.count())
	}
}

// C6.2: an attempt must be over before its key is KeyTTL old, so none is
// sent within AttemptTimeout of that age.
func TestNoAttemptWithinAttemptTimeoutOfKeyTTL(t *testing.T) {
	now := newTestClock()
	clock := now.Now
	s := newScript(t, status(503, ""))
	c := newClientAt(t, fast(idem.Config{Dialect: idem.Dialect{Retention: time.Hour}, AttemptTimeout: 10 * time.Second, MaxAttempts: 1}), clock)
	c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	now.Advance(time.Hour - 10*time.Second - time.Nanosecond)
	c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if s.count() != 2 {
		t.Fatalf("%d attempts; want the resume just outside the margin sent", s.count())
	}
	now.Advance(time.Nanosecond)
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrKeyExpired) || s.count() != 2 {
		t.Fatalf("err = %v after %d attempts; want ErrKeyExpired and nothing sent", err, s.count())
	}
}

// testClock is a clock a test moves by hand.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// Now returns the clock's time.
func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward by d.
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// C13.3, C13.6, C13.7, C3.2, in detail: an operation follows nothing but a 307 or 308 to its own
// origin, the Host header included; a caller's CheckRedirect that refuses
// a redirect makes the 3xx the answer, not a retried error; a header padded
// past MaxRecordedHeader keeps the Location the rejection names.
func TestRedirectRuleDetails(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Host+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/found":
			http.Redirect(w, r, "/new", http.StatusFound)
		case "/absolute":
			http.Redirect(w, r, "http://"+r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()+"/new", http.StatusTemporaryRedirect)
		case "/relative":
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
		case "/padded":
			w.Header().Set("A-Padding", strings.Repeat("p", 2000))
			http.Redirect(w, r, "/new", http.StatusMovedPermanently)
		default:
			io.WriteString(w, "here")
		}
	}))
	defer srv.Close()
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	do := func(t *testing.T, c *idem.Client, id, method, path, hostHeader string) (int, error) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = hostHeader
		resp, err := c.Do(id, req)
		if err != nil {
			var oe *idem.OutcomeError
			if !errors.As(err, &oe) {
				t.Fatalf("Do: %v", err)
			}
			return oe.Status, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	t.Run("a GET operation answered 302", func(t *testing.T) {
		c := newClient(t, fast(idem.Config{}))
		status, err := do(t, c, "get", http.MethodGet, "/found", "")
		if !errors.Is(err, idem.ErrRejected) || status != 302 || len(requests()) != 1 {
			t.Fatalf("status %d, %v; want the 302 rejected and nothing more sent", status, err)
		}
	})

	t.Run("the Host header is part of the origin", func(t *testing.T) {
		c := newClient(t, fast(idem.Config{}))
		status, err := do(t, c, "absolute", http.MethodPost, "/absolute", "tenant-a.test")
		if !errors.Is(err, idem.ErrRejected) || status != 307 {
			t.Fatalf("307 to the same address, another host: status %d, %v; want rejected", status, err)
		}
		if got := requests(); len(got) != 1 {
			t.Fatalf("sent %q, want the first request alone", got)
		}
		if status, err := do(t, c, "relative", http.MethodPost, "/relative", "tenant-a.test"); err != nil || status != 200 {
			t.Fatalf("relative 307 under the same Host: status %d, %v; want it followed", status, err)
		}
		if got, want := requests(), []string{"POST tenant-a.test/relative", "POST tenant-a.test/new"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("sent %q, want %q", got, want)
		}
	})

	t.Run("a CheckRedirect that refuses", func(t *testing.T) {
		refuse := func(*http.Request, []*http.Request) error { return errors.New("no redirects here") }
		c := newClient(t, fast(idem.Config{HTTPClient: &http.Client{CheckRedirect: refuse}}))
		status, err := do(t, c, "refused", http.MethodPost, "/relative", "")
		if !errors.Is(err, idem.ErrRejected) || status != 307 || len(requests()) != 1 {
			t.Fatalf("status %d, %v; want the 307 as a rejection after one request", status, err)
		}
	})

	t.Run("a padded header keeps the Location", func(t *testing.T) {
		c := newClient(t, fast(idem.Config{MaxRecordedHeader: 1000}))
		do(t, c, "padded", http.MethodPost, "/padded", "")
		_, err := do(t, c, "padded", http.MethodPost, "/padded", "")
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || !oe.Recorded || !oe.HeaderTruncated || oe.Header.Get("Location") != "/new" || !strings.Contains(err.Error(), `"/new"`) {
			t.Fatalf("recorded rejection %v; want it to keep and name the Location", err)
		}
		requests()
	})
}

// C2.3 across processes: an intent a killed process wrote but never made
// durable is found by the next process that opens the journal, which must
// make it durable before it resends under its key. Otherwise a power cut
// after the resend loses the intent, and a third process sends the same
// operation under a new key.
func TestResumedIntentIsDurableBeforeItIsSent(t *testing.T) {
	s := newScript(t, status(503, ""), status(201, "made"))
	path := filepath.Join(t.TempDir(), "ops.journal")
	var synced atomic.Int64 // the file's length at its last successful fsync
	open := func(failSync bool) *filejournal.Journal {
		t.Helper()
		fault := &filefaults.SyncFault{}
		fault.Armed.Store(failSync)
		j, err := filejournal.Open(path, filefaults.WrapFiles(filejournal.Options{Logger: slog.New(slog.DiscardHandler)},
			func(f fileengine.File) fileengine.File {
				return filefaults.SyncedFile{File: f, Size: &synced, Fault: fault}
			}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	do := func(j *filejournal.Journal) error {
		c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
		resp, err := c.Do("x", post(t, context.Background(), s.srv.URL, "x"))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	j := open(false) // created: its header is durable
	j.Close()
	j = open(true) // the first process: its intent's fsync fails, as a kill inside it would leave it
	if err := do(j); err == nil || s.count() != 0 {
		t.Fatalf("Do on a failing fsync = %v after %d requests; want the failure and nothing sent", err, s.count())
	}
	j.Close()

	j = open(false) // the second process finds the intent and resends it (503: still pending)
	do(j)
	j.Close()
	if err := os.Truncate(path, synced.Load()); err != nil { // a power cut
		t.Fatal(err)
	}
	j = open(false) // the third process
	defer j.Close()
	if err := do(j); err != nil {
		t.Fatal(err)
	}
	if got := s.attempts(); len(got) != 2 || got[0].Key != got[1].Key {
		t.Fatalf("the server saw %d requests under keys %v; want 2 under one key", len(got), got)
	}
}

// C8.1: without jitter the waits grow by backoff's multiplier (1.5) from
// InitialWait, each capped by MaxWait.
func TestBackoffGrowsExponentially(t *testing.T) {
	s := newScript(t, status(503, ""))
	var waits []time.Duration
	c := newClient(t, idem.Config{InitialWait: 4 * time.Millisecond, MaxWait: 10 * time.Millisecond, Jitter: -1, MaxAttempts: 5,
		OnAttempt: func(a idem.Attempt) {
			if a.Retry {
				waits = append(waits, a.Wait)
			}
		}})
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrAttemptsExhausted) {
		t.Fatalf("err = %v, want attempts exhausted", err)
	}
	want := []time.Duration{4 * time.Millisecond, 6 * time.Millisecond, 9 * time.Millisecond, 10 * time.Millisecond}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
}

// C3.5: Do does not wait for its completion to be durable, and losing it
// costs a resend under the same key, nothing more: after a power cut that
// takes the completion of a done operation, the next process finds the
// operation pending and resends it under its journaled key.
func TestALostCompletionIsResentUnderTheSameKey(t *testing.T) {
	s := newScript(t, status(201, "made"), status(201, "made", "Idempotent-Replayed", "true"))
	dir := t.TempDir()
	path := filepath.Join(dir, "ops.journal")
	var synced atomic.Int64 // the file's length at its last fsync
	j, err := filejournal.Open(path, filefaults.WrapFiles(filejournal.Options{},
		func(f fileengine.File) fileengine.File {
			return filefaults.SyncedFile{File: f, Size: &synced, Fault: &filefaults.SyncFault{}}
		}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t, fast(idem.Config{Journal: j})).Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	image, err := os.ReadFile(path) // the power cut: the file as its last fsync left it
	if err != nil {
		t.Fatal(err)
	}
	image = image[:synced.Load()]
	j.Close() // its fsync comes after the cut
	cut := filepath.Join(dir, "after-the-cut.journal")
	if err := os.WriteFile(cut, image, 0o600); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, cut)
	defer j.Close()
	if op, _ := lookup(j, "op"); op.State != journal.StatePending {
		t.Fatalf("after the cut the operation is %v, want pending: the completion was made durable before Do returned", op.State)
	}
	resp, err = newClient(t, fast(idem.Config{Journal: j})).Do("op", post(t, context.Background(), s.srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	op, _ := lookup(j, "op")
	if got := s.attempts(); len(got) != 2 || got[0].Key != op.Key || got[1].Key != op.Key || op.State != journal.StateDone {
		t.Fatalf("requests %v, journal %v under %s: want two requests under the journaled key, then done", got, op.State, op.Key)
	}
}

// C2.2: a Begin that fails sends nothing, whatever the claim reports
// holding after it: an intent the journal wrote but could not confirm
// durable is not sent on the strength of the claim's Operation, and an
// ErrOperationExists with nothing held is reported as such, not judged
// against an empty operation. The next Do resumes the journaled intent.
func TestABeginThatFailsSendsNothingWhateverTheClaimHolds(t *testing.T) {
	unconfirmed := errors.New("injected: the intent's commit was not confirmed")
	for _, tc := range []struct {
		name  string
		begin func(inner journal.Claim, ctx context.Context, op journal.Operation) error
		want  error
	}{
		{"written, then an error", func(inner journal.Claim, ctx context.Context, op journal.Operation) error {
			if err := inner.Begin(ctx, op); err != nil {
				return err
			}
			return unconfirmed
		}, unconfirmed},
		{"ErrOperationExists, nothing held", func(journal.Claim, context.Context, journal.Operation) error {
			return fmt.Errorf("injected: %w", journal.ErrOperationExists)
		}, journal.ErrOperationExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t)
			fj := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
			defer fj.Close()
			j := &failingBeginJournal{Journal: fj, begin: tc.begin}
			c := newClient(t, fast(idem.Config{Journal: j}))
			_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
			if !errors.Is(err, tc.want) || errors.Is(err, idem.ErrMismatch) || s.count() != 0 {
				t.Fatalf("Do = %v after %d attempts, want %v and nothing sent", err, s.count(), tc.want)
			}
			j.begin = nil
			resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			op, _ := lookup(fj, "op")
			if seen := s.attempts(); len(seen) != 1 || seen[0].Key != op.Key || op.State != journal.StateDone {
				t.Fatalf("the next Do sent %v, journal holds %+v; want one attempt under the journaled key, done", seen, op)
			}
		})
	}
}

// failingBeginJournal is a journal whose claims' Begin runs begin in
// place of the journal's own, while begin is set.
type failingBeginJournal struct {
	journal.Journal
	begin func(inner journal.Claim, ctx context.Context, op journal.Operation) error
}

func (j *failingBeginJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	claim, err := j.Journal.Claim(ctx, id)
	if err != nil || j.begin == nil {
		return claim, err
	}
	return failingBeginClaim{claim, j.begin}, nil
}

type failingBeginClaim struct {
	journal.Claim
	begin func(inner journal.Claim, ctx context.Context, op journal.Operation) error
}

func (c failingBeginClaim) Begin(ctx context.Context, op journal.Operation) error {
	return c.begin(c.Claim, ctx, op)
}

// C1.5: a key header the caller wrote into the header map under a name
// Set does not replace is left out of the attempts, and only it: every
// other field of the caller's header goes out on every attempt. Map order
// is random, so several operations each put the dropped name at a new
// place among the others.
func TestACallersOwnKeyHeaderIsTheOnlyFieldLeftOut(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		n := len(seen)
		mu.Unlock()
		if n%2 == 1 {
			w.WriteHeader(503) // each operation's first attempt: retried
		}
	}))
	defer srv.Close()
	c := newClient(t, fast(idem.Config{}))
	const fields = 32
	for i := range 8 {
		req := post(t, context.Background(), srv.URL, "x")
		req.Header["idempotency-key"] = []string{"vendor-key"}
		for f := range fields {
			req.Header.Set(fmt.Sprintf("X-Field-%02d", f), fmt.Sprint("value-", f))
		}
		resp, err := c.Do(fmt.Sprint("op-", i), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 16 {
		t.Fatalf("%d attempts, want 16", len(seen))
	}
	for i, h := range seen {
		if keys := h.Values("Idempotency-Key"); len(keys) != 1 || !uuidV4.MatchString(keys[0]) {
			t.Fatalf("attempt %d carried the keys %q, want the minted one alone", i+1, keys)
		}
		for f := range fields {
			if name, want := fmt.Sprintf("X-Field-%02d", f), fmt.Sprint("value-", f); h.Get(name) != want {
				t.Fatalf("attempt %d carried %s %q, want %q", i+1, name, h.Get(name), want)
			}
		}
	}
}

// C12.3: an empty operation ID in a request's context names no operation:
// OperationFrom reports none, and a GET passes through once without a key,
// as a GET without WithOperation does.
func TestAnEmptyOperationIDNamesNoOperation(t *testing.T) {
	ctx := idem.WithOperation(context.Background(), "")
	if id, ok := idem.OperationFrom(ctx); ok || id != "" {
		t.Fatalf("OperationFrom = %q, %v; want none", id, ok)
	}
	if id, ok := idem.OperationFrom(idem.WithOperation(context.Background(), "op")); !ok || id != "op" {
		t.Fatalf("OperationFrom = %q, %v; want op", id, ok)
	}
	s := newScript(t, status(503, ""), status(200, ""))
	j := openJournal(t, filepath.Join(t.TempDir(), "j"))
	defer j.Close()
	hc := newClient(t, fast(idem.Config{Journal: j})).StandardClient()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen := s.attempts(); resp.StatusCode != 503 || len(seen) != 1 || seen[0].Key != "" {
		t.Fatalf("%d after %d requests, keys %v: want the 503, sent once without a key", resp.StatusCode, len(seen), seen)
	}
	if ops := list(j, journal.ListAll); len(ops) != 0 {
		t.Fatalf("the journal holds %v, want nothing: no operation was named", ops)
	}
}

// C13.8: an *http.Client around the RoundTripper that follows every
// redirect, as a plain one does, cannot follow one the redirect rule left
// unfollowed after a request that carried a key: the follow is refused
// with ErrInvalidRequest and nothing reaches the Location.
func TestAPlainClientAroundTheRoundTripperCannotFollowAKeyedRedirect(t *testing.T) {
	var landed atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { landed.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/landing", http.StatusFound)
		case "/away":
			http.Redirect(w, r, other.URL+"/landing", http.StatusTemporaryRedirect)
		default:
			landed.Add(1)
		}
	}))
	defer srv.Close()
	c := newClient(t, fast(idem.Config{}))
	hc := &http.Client{Transport: c.RoundTripper()}
	for _, tc := range []struct{ name, path, id string }{
		{"a 302 of an operation", "/moved", "op"},
		{"a 307 to another origin, a mutation without an operation", "/away", ""},
	} {
		ctx := context.Background()
		if tc.id != "" {
			ctx = idem.WithOperation(ctx, tc.id)
		}
		resp, err := hc.Do(post(t, ctx, srv.URL+tc.path, "x"))
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, idem.ErrInvalidRequest) || landed.Load() != 0 {
			t.Fatalf("%s: Do = %v, the Location reached %d times; want ErrInvalidRequest and nothing sent there", tc.name, err, landed.Load())
		}
	}
}

// C1.2, C4.1, C5.1 through a journal that claims and begins in one step
// (journal.ClaimBeginner, as a shared journal does): a new operation is sent
// under the key journaled for it; an unknown one is resumed under it; a
// completed one is answered from the journal; another request under its ID
// is refused with ErrMismatch; a Do whose context has ended journals and
// sends nothing; a claim that holds nothing after ClaimBegin is refused.
func TestAJournalThatClaimsAndBeginsInOneStepIsJudgedAsAnyOther(t *testing.T) {
	s := newScript(t, status(503, "busy"), status(201, "made"))
	fj := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer fj.Close()
	j := &claimBeginJournal{Journal: fj}
	c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
	do := func(ctx context.Context, id, body string) (*http.Response, error) {
		return c.Do(id, post(t, ctx, s.srv.URL, body))
	}

	if _, err := do(context.Background(), "op", "x"); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do = %v, want unknown after the 503", err)
	}
	pending, _ := lookup(fj, "op")
	resp, err := do(context.Background(), "op", "x")
	if err != nil {
		t.Fatalf("resumed Do = %v, want the 201", err)
	}
	if got := readAll(t, resp); resp.StatusCode != 201 || got != "made" {
		t.Fatalf("resumed Do = %d %q, want 201 made", resp.StatusCode, got)
	}
	if seen := s.attempts(); len(seen) != 2 || seen[0].Key != pending.Key || seen[1].Key != pending.Key || !uuidV4.MatchString(pending.Key) {
		t.Fatalf("attempts %v, journaled key %q: want both under it", seen, pending.Key)
	}
	resp, err = do(context.Background(), "op", "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 201 || got != "made" || !idem.Recorded(resp) || s.count() != 2 {
		t.Fatalf("completed Do = %d %q, recorded %v, after %d attempts; want the recorded 201 without sending", resp.StatusCode, got, idem.Recorded(resp), s.count())
	}
	if _, err := do(context.Background(), "op", "y"); !errors.Is(err, idem.ErrMismatch) || s.count() != 2 {
		t.Fatalf("another body = %v after %d attempts, want ErrMismatch without sending", err, s.count())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := do(ctx, "given-up", "x"); !errors.Is(err, context.Canceled) || s.count() != 2 {
		t.Fatalf("ended context = %v after %d attempts, want context.Canceled without sending", err, s.count())
	}
	if _, ok := lookup(fj, "given-up"); ok {
		t.Fatal("a Do whose context had ended journaled its intent")
	}

	j.empty = true
	if _, err := do(context.Background(), "empty", "x"); !errors.Is(err, journal.ErrNoSuchOperation) || s.count() != 2 {
		t.Fatalf("a claim holding nothing = %v after %d attempts, want ErrNoSuchOperation without sending", err, s.count())
	}
}

// D1.6 through a journal that claims and begins in one step: a pending
// key journaled earlier that the dialect cannot take is refused before it
// is sent, as it is through Claim.
func TestAClaimBeginJournalsKeyTheDialectCannotTakeIsNotSent(t *testing.T) {
	s := newScript(t, status(201, "made"))
	fj := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer fj.Close()
	long := strings.Repeat("k", 41)
	claim, err := fj.Claim(context.Background(), "op")
	if err != nil {
		t.Fatal(err)
	}
	err = claim.Begin(context.Background(), journal.Operation{ID: "op", Key: long, Fingerprint: journal.FingerprintOf(http.MethodPost, s.srv.URL, []byte("{}")),
		Method: http.MethodPost, URL: s.srv.URL, KeyTTL: idem.DefaultKeyTTL, State: journal.StatePending})
	claim.Release()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fast(idem.Config{Journal: &claimBeginJournal{Journal: fj}, Dialect: idem.Dialect{Name: "short keys", MaxKeyLength: 40}}))
	if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "{}")); !errors.Is(err, idem.ErrInvalidRequest) || !strings.Contains(err.Error(), long) {
		t.Fatalf("Do = %v, want ErrInvalidRequest naming the key", err)
	}
	if s.count() != 0 {
		t.Fatalf("server saw %d attempts, want none", s.count())
	}
	if op, _ := lookup(fj, "op"); op.State != journal.StatePending || op.Key != long {
		t.Fatalf("journal holds %s under %q, want pending under the journaled key", op.State, op.Key)
	}
}

// claimBeginJournal makes a journal an journal.ClaimBeginner: Claim, then
// Begin when the journal holds nothing. With empty set, its claims say
// they hold nothing.
type claimBeginJournal struct {
	journal.Journal
	empty bool
}

func (j *claimBeginJournal) ClaimBegin(ctx context.Context, op journal.Operation) (journal.Claim, error) {
	claim, err := j.Journal.Claim(ctx, op.ID)
	if err != nil {
		return nil, err
	}
	if _, ok := claim.Operation(); !ok && !j.empty {
		if err := claim.Begin(ctx, op); err != nil {
			claim.Release()
			return nil, err
		}
	}
	if j.empty {
		return emptyClaim{claim}, nil
	}
	return claim, nil
}

type emptyClaim struct{ journal.Claim }

func (emptyClaim) Operation() (journal.Operation, bool) { return journal.Operation{}, false }

// C8.5: a Config that leaves the waits zero waits by the defaults: the
// first wait is DefaultInitialWait (250ms), a Retry-After is capped at
// DefaultMaxWait (30s), and one that ends exactly at DefaultMaxElapsed (2
// minutes) is still waited for while one a second longer stops the
// retries. The waits are
// observed through OnAttempt, which ends the Do instead of waiting; the
// clock stands still, so the elapsed time is exact.
func TestAZeroConfigWaitsByTheDefaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        idem.Config
		retryAfter string
		retry      bool
		wait       time.Duration
	}{
		{"the first wait", idem.Config{}, "", true, 250 * time.Millisecond},
		{"a Retry-After past the longest wait", idem.Config{}, "3600", true, 30 * time.Second},
		{"a Retry-After ending at the elapsed bound", idem.Config{MaxWait: time.Hour}, "120", true, 2 * time.Minute},
		{"a Retry-After past the elapsed bound", idem.Config{MaxWait: time.Hour}, "121", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var header []string
			if tc.retryAfter != "" {
				header = []string{"Retry-After", tc.retryAfter}
			}
			s := newScript(t, status(503, "", header...))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var seen []idem.Attempt
			cfg := tc.cfg
			cfg.Jitter = -1
			cfg.OnAttempt = func(a idem.Attempt) { seen = append(seen, a); cancel() }
			_, err := newClientAt(t, cfg, newTestClock().Now).Do("op", post(t, ctx, s.srv.URL, "x"))
			if len(seen) != 1 || seen[0].Retry != tc.retry || seen[0].Wait != tc.wait {
				t.Fatalf("Do = %v, attempts %+v; want one, retry %v after %v", err, seen, tc.retry, tc.wait)
			}
			if tc.retry && !errors.Is(err, context.Canceled) || !tc.retry && !errors.Is(err, idem.ErrMaxElapsed) {
				t.Fatalf("Do = %v, want it ended by its context after a retry, or by MaxElapsed without one", err)
			}
		})
	}
}

// C11.4: a Do that fails to claim its operation says what the claim was
// doing: waiting for a concurrent Do when its context ended in that wait,
// and claiming it in the journal when the journal failed, also as the
// context ended.
func TestAFailedClaimSaysWhatItWasDoing(t *testing.T) {
	t.Run("waiting for a concurrent Do", func(t *testing.T) {
		c, srv := aDoUnderWay(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Do("op", post(t, ctx, srv.URL, "x"))
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a concurrent Do") {
			t.Fatalf("err = %v, want the deadline, waiting for a concurrent Do", err)
		}
	})
	t.Run("claiming it in the journal", func(t *testing.T) {
		s := newScript(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		broken := errors.New("injected: the journal is gone")
		j := &brokenClaimJournal{Journal: openJournal(t, filepath.Join(t.TempDir(), "ops.journal")), cancel: cancel, err: broken}
		defer j.Journal.(*filejournal.Journal).Close()
		_, err := newClient(t, fast(idem.Config{Journal: j})).Do("op", post(t, ctx, s.srv.URL, "x"))
		if !errors.Is(err, broken) || !strings.Contains(err.Error(), "claiming it in the journal") || s.count() != 0 {
			t.Fatalf("err = %v after %d attempts, want the journal's error, claiming it in the journal, nothing sent", err, s.count())
		}
	})
}

// brokenClaimJournal is a journal whose Claim ends the caller's context
// and fails with an error of its own.
type brokenClaimJournal struct {
	journal.Journal
	cancel context.CancelFunc
	err    error
}

func (j *brokenClaimJournal) Claim(context.Context, string) (journal.Claim, error) {
	j.cancel()
	return nil, j.err
}
