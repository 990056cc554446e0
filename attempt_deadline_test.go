package idem_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// deadlineRecorder is a transport that answers from a script and records
// the context of every request it is given.
type deadlineRecorder struct {
	mu      sync.Mutex
	ctxs    []context.Context
	answers []func(*http.Request) *http.Response
}

func (d *deadlineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctxs = append(d.ctxs, r.Context())
	answer := d.answers[0]
	d.answers = d.answers[1:]
	resp := answer(r)
	resp.Request = r
	return resp, nil
}

func answer(status int, header http.Header, body string) func(*http.Request) *http.Response {
	return func(*http.Request) *http.Response {
		if header == nil {
			header = http.Header{}
		}
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: header, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
	}
}

// One deadline bounds the whole attempt, redirects included, measured from
// the attempt's start; it is released once the body is read and closed.
func TestAttemptTimeoutSpansRedirects(t *testing.T) {
	rec := &deadlineRecorder{answers: []func(*http.Request) *http.Response{
		answer(http.StatusTemporaryRedirect, http.Header{"Location": {"/elsewhere"}}, ""),
		answer(http.StatusCreated, nil, "made"),
	}}
	c := newClient(t, idem.Config{HTTPClient: &http.Client{Transport: rec}, AttemptTimeout: time.Hour})
	before := time.Now()
	resp, err := c.Do("op", post(t, context.Background(), "http://api.example.test/things", "x"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if len(rec.ctxs) != 2 {
		t.Fatalf("%d requests, want the first and its redirect", len(rec.ctxs))
	}
	first, ok1 := rec.ctxs[0].Deadline()
	second, ok2 := rec.ctxs[1].Deadline()
	if !ok1 || !ok2 || !first.Equal(second) {
		t.Fatalf("deadlines %v (%v) and %v (%v), want one deadline for both", first, ok1, second, ok2)
	}
	if first.Before(before.Add(time.Hour)) || first.After(after.Add(time.Hour)) {
		t.Fatalf("deadline %v, want an hour after the attempt began (between %v and %v)", first, before, after)
	}
	// The body fits MaxRecordedBody: idem read and closed it, which
	// released the deadline.
	if err := rec.ctxs[1].Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("once the body is read, the attempt's context has %v, want it released (context.Canceled)", err)
	}
	if got := readAll(t, resp); got != "made" {
		t.Fatalf("body %q, want %q", got, "made")
	}
}

// A body too large to record is read by the caller under the same deadline.
func TestAttemptTimeoutCoversTheCallersRead(t *testing.T) {
	large := strings.Repeat("b", 100)
	rec := &deadlineRecorder{answers: []func(*http.Request) *http.Response{answer(http.StatusOK, nil, large)}}
	c := newClient(t, idem.Config{HTTPClient: &http.Client{Transport: rec}, MaxRecordedBody: 10})
	resp, err := c.Do("op", post(t, context.Background(), "http://api.example.test/things", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.ctxs[0].Deadline(); !ok || rec.ctxs[0].Err() != nil {
		t.Fatalf("while the caller reads: deadline set %v, err %v; want a running deadline", ok, rec.ctxs[0].Err())
	}
	if got := readAll(t, resp); got != large {
		t.Fatalf("body %q, want %q", got, large)
	}
	if err := rec.ctxs[0].Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("after Close: %v, want context.Canceled", err)
	}
}

// A body that stops arriving after the headers fails the attempt when the
// deadline passes, and the next attempt is made.
func TestAttemptTimeoutWhileReadingTheBody(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusCreated)
		if n == 1 {
			w.Write([]byte("ha"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the client gives up on the rest
			return
		}
		w.Write([]byte("done"))
	}))
	defer srv.Close()
	var seen []idem.Attempt
	c := newClient(t, fast(idem.Config{AttemptTimeout: 500 * time.Millisecond, OnAttempt: func(a idem.Attempt) { seen = append(seen, a) }}))
	resp, err := c.Do("op", post(t, context.Background(), srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "done" {
		t.Fatalf("body %q, want %q", got, "done")
	}
	if len(seen) != 2 || !seen[0].Retry || !errors.Is(seen[0].Err, context.DeadlineExceeded) || seen[1].Err != nil {
		t.Fatalf("attempts %+v: want a first one that timed out reading the body, then a second one", seen)
	}
}
