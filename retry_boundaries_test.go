package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// The wait before the next attempt: a Retry-After longer than the
// backoff's wait replaces it, a shorter or equal one changes nothing, and a
// Retry-After that ends exactly at MaxElapsed is still waited for. The
// waits are observed through OnAttempt, which ends the Do instead of
// waiting; the clock stands still, so the elapsed time is exact.
func TestRetryAfterAgainstTheBackoffsWait(t *testing.T) {
	tests := []struct {
		name                 string
		retryAfter           string
		initial, max, within time.Duration
		want                 time.Duration
	}{
		{"shorter than the backoff's wait", "1", 2 * time.Second, time.Minute, time.Minute, 2 * time.Second},
		{"equal to the backoff's wait, past MaxWait", "3", 3 * time.Second, time.Second, time.Minute, 3 * time.Second},
		{"ending exactly at MaxElapsed", "10", time.Second, time.Minute, 10 * time.Second, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(t, status(503, "", "Retry-After", tt.retryAfter))
			now := newTestClock()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var seen []idem.Attempt
			c := newClientAt(t, idem.Config{
				InitialWait: tt.initial, MaxWait: tt.max, MaxElapsed: tt.within, Jitter: -1,
				OnAttempt: func(a idem.Attempt) { seen = append(seen, a); cancel() },
			}, now.Now)
			_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
			if !errors.Is(err, context.Canceled) || len(seen) != 1 || !seen[0].Retry || seen[0].Wait != tt.want {
				t.Fatalf("Do = %v, attempts %+v; want one retry after %v, then canceled", err, seen, tt.want)
			}
		})
	}
}

// Config.CheckRetry declining a retry ends the operation there, unknown:
// the declined answer's body is not read as a final answer's, so a body
// that breaks off does not turn it back into a retried failure.
func TestADeclinedRetryIsNotReadAsAFinalAnswer(t *testing.T) {
	broken := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(500)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		hangUp(w, r)
	}
	s := newScript(t, broken, status(201, "made"))
	var asked atomic.Int32
	c := newClient(t, fast(idem.Config{CheckRetry: func(context.Context, *http.Response, error) (bool, error) {
		asked.Add(1)
		return false, nil
	}}))
	_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, idem.ErrRetryDeclined) || s.count() != 1 || asked.Load() != 1 {
		t.Fatalf("Do = %v after %d attempts, CheckRetry asked %d times; want unknown, ErrRetryDeclined, after 1 attempt and 1 question",
			err, s.count(), asked.Load())
	}
}

// The retry budget is refunded by final answers only: an operation that
// stops unknown without retrying (CheckRetry declines) refunds nothing.
func TestAStopWithoutAFinalAnswerRefundsNoBudget(t *testing.T) {
	s := newScript(t, status(503, ""))
	var decline atomic.Bool
	c := newClient(t, fast(idem.Config{MaxAttempts: 2, RetryBudget: idem.RetryBudget{MaxTokens: 4, Refund: 0.5},
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			if decline.Load() {
				return false, nil
			}
			return idem.DefaultCheckRetry(ctx, resp, err)
		}}))
	if _, err := c.Do("a", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrAttemptsExhausted) {
		t.Fatalf("first Do = %v, want attempts exhausted", err)
	}
	if got := c.RetryBudgetTokens(); got != 2 {
		t.Fatalf("budget tokens %v after two failures, want 2", got)
	}
	decline.Store(true)
	if _, err := c.Do("b", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrRetryDeclined) {
		t.Fatalf("second Do = %v, want ErrRetryDeclined", err)
	}
	if got := c.RetryBudgetTokens(); got != 2 || s.count() != 3 {
		t.Fatalf("budget tokens %v after %d attempts, the last declined; want 2 after 3", got, s.count())
	}
}

// The error of an operation whose retries ran out says why the last
// attempt was retried, as well as why retrying stopped.
func TestRetryingStoppedSaysWhyTheLastAttemptWasRetried(t *testing.T) {
	s := newScript(t, status(503, "down"))
	c := newClient(t, fast(idem.Config{MaxAttempts: 2}))
	_, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Err == nil {
		t.Fatalf("Do = %v, want an OutcomeError", err)
	}
	if got, want := oe.Err.Error(), "attempts exhausted: unexpected HTTP status 503 Service Unavailable"; got != want {
		t.Fatalf("OutcomeError.Err = %q, want %q", got, want)
	}
}

// A redirect loop ends the operation unknown after one attempt, at
// net/http's limit, whatever the dialect: a dialect whose signals read
// every answer's body does not read the loop's last 3xx, whose body
// net/http has closed, as a broken answer to retry.
func TestARedirectLoopIsOneAttemptUnderABodyReadingDialect(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", r.URL.Path)
		w.WriteHeader(http.StatusTemporaryRedirect)
		io.WriteString(w, `{"error":{"code":"moved"}}`)
	}))
	defer srv.Close()
	d := idem.Dialect{Name: "field reader", Signals: []idem.Signal{{Field: "error.code", Value: "busy", Answer: idem.AnswerInFlight}}}
	c := newClient(t, fast(idem.Config{Dialect: d, MaxAttempts: 3}))
	_, err := c.Do("op", post(t, context.Background(), srv.URL+"/loop", "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 1 || requests.Load() != 10 ||
		!strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Fatalf("Do = %v after %d requests; want unknown, stopped after 10 redirects, one attempt of 10 requests", err, requests.Load())
	}
}

// cancelingTransport answers every request with resp, after canceling the
// request's context: an answer that arrives as the caller gives up.
type cancelingTransport struct {
	cancel context.CancelFunc
	resp   func(*http.Request) *http.Response
}

func (t cancelingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	t.cancel()
	return t.resp(r), nil
}

// An answer that arrives once the caller's context has ended leaves the
// operation unknown and pending, whatever the dialect says of it: as the
// retry rule does for an answer it would take for final.
func TestAnAnswerAfterTheContextEndedIsUnknownWhateverTheDialectSays(t *testing.T) {
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	d := idem.Dialect{Name: "applied header", Signals: []idem.Signal{{Status: 202, Header: "X-Applied", Answer: idem.AnswerApplied}}}
	for _, answer := range []struct {
		status int
		header string
	}{{202, "X-Applied"}, {201, "X-Other"}} {
		t.Run(fmt.Sprint(answer.status), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr := cancelingTransport{cancel: cancel, resp: func(r *http.Request) *http.Response {
				return &http.Response{StatusCode: answer.status, Status: http.StatusText(answer.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: http.Header{answer.header: {"true"}}, Body: io.NopCloser(strings.NewReader("made")), ContentLength: 4, Request: r}
			}}
			c := newClient(t, fast(idem.Config{Journal: j, Dialect: d, HTTPClient: &http.Client{Transport: tr}}))
			id := fmt.Sprint("op-", answer.status)
			_, err := c.Do(id, post(t, ctx, "http://api.example.test/charges", "x"))
			var oe *idem.OutcomeError
			if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, context.Canceled) || oe.Attempts != 1 {
				t.Fatalf("Do = %v, want unknown, canceled, after 1 attempt", err)
			}
			if op, ok := lookup(j, id); !ok || op.State != journal.StatePending {
				t.Fatalf("journal holds %+v, want the operation pending", op)
			}
		})
	}
}

// OnAttempt hears of the last attempt why retrying stopped, or, when the
// attempt failed in transport, that failure.
func TestTheLastAttemptSaysWhyRetryingStopped(t *testing.T) {
	for _, tt := range []struct {
		name      string
		step      step
		exhausted bool
	}{{"503", status(503, ""), true}, {"hung up", hangUp, false}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(t, tt.step)
			var seen []idem.Attempt
			c := newClient(t, fast(idem.Config{MaxAttempts: 2, OnAttempt: func(a idem.Attempt) { seen = append(seen, a) }}))
			if _, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x")); !errors.Is(err, idem.ErrAttemptsExhausted) {
				t.Fatalf("Do = %v, want attempts exhausted", err)
			}
			if len(seen) != 2 || !seen[0].Retry || seen[1].Retry || seen[1].Err == nil ||
				errors.Is(seen[1].Err, idem.ErrAttemptsExhausted) != tt.exhausted || errors.Is(seen[1].Err, io.EOF) == tt.exhausted {
				t.Fatalf("attempts %+v; want a retry, then a last attempt whose Err is ErrAttemptsExhausted: %v, the transport's EOF: %v",
					seen, tt.exhausted, !tt.exhausted)
			}
		})
	}
}
