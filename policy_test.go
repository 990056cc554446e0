package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// CallOptions bound one call's retrying in place of the Config's, and
// options out of range are refused before anything is journaled or sent.
func TestCallOptionsOverrideTheConfig(t *testing.T) {
	s := newScript(t, status(503, ""))
	c := newClient(t, fast(idem.Config{MaxAttempts: 5}))

	ctx := idem.WithCallOptions(context.Background(), idem.CallOptions{MaxAttempts: 2})
	_, err := c.Do("two", post(t, ctx, s.srv.URL, "x"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Attempts != 2 || !errors.Is(err, idem.ErrAttemptsExhausted) || s.count() != 2 {
		t.Fatalf("Do = %v after %d attempts; want unknown after the call's 2", err, s.count())
	}

	_, err = c.Do("five", post(t, context.Background(), s.srv.URL, "x"))
	if !errors.As(err, &oe) || oe.Attempts != 5 {
		t.Fatalf("Do without options = %v; want the Config's 5 attempts", err)
	}

	bad := idem.WithCallOptions(context.Background(), idem.CallOptions{MaxElapsed: -time.Second})
	before := s.count()
	if _, err := c.Do("bad", post(t, bad, s.srv.URL, "x")); !errors.Is(err, idem.ErrInvalidRequest) || s.count() != before {
		t.Fatalf("Do with a negative MaxElapsed = %v after %d attempts; want ErrInvalidRequest and nothing sent", err, s.count()-before)
	}
}

// A CallOptions MaxElapsed stops retrying when the next wait would pass it.
func TestCallOptionsMaxElapsed(t *testing.T) {
	s := newScript(t, status(503, ""))
	c := newClient(t, fast(idem.Config{InitialWait: 100 * time.Millisecond, Jitter: -1}))
	ctx := idem.WithCallOptions(context.Background(), idem.CallOptions{MaxElapsed: 200 * time.Millisecond})
	_, err := c.Do("op", post(t, ctx, s.srv.URL, "x"))
	if !errors.Is(err, idem.ErrMaxElapsed) || s.count() != 2 {
		t.Fatalf("Do = %v after %d attempts; want ErrMaxElapsed after 2 (the second wait, 150ms, would end past 200ms)", err, s.count())
	}
}

// Config.CheckRetry can retry an answer the rule takes for final, and stop
// retrying one the rule would retry; the latter ends unknown, never
// recorded, and the next Do resumes it under the same key.
func TestCheckRetry(t *testing.T) {
	shouldRetry := func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if resp != nil && resp.Header.Get("Should-Retry") != "" {
			return resp.Header.Get("Should-Retry") == "true", errors.New("the server said not to")
		}
		return idem.DefaultCheckRetry(ctx, resp, err)
	}

	t.Run("a final answer retried", func(t *testing.T) {
		s := newScript(t, status(400, "busy", "Should-Retry", "true"), status(201, "made"))
		c := newClient(t, fast(idem.Config{CheckRetry: shouldRetry}))
		resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || s.count() != 2 || s.attempts()[0].Key != s.attempts()[1].Key {
			t.Fatalf("status %d after %d attempts; want 201 after 2 under one key", resp.StatusCode, s.count())
		}
	})

	t.Run("a retry declined", func(t *testing.T) {
		j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		s := newScript(t, status(503, "", "Should-Retry", "false"), status(201, "made"))
		c := newClient(t, fast(idem.Config{Journal: j, CheckRetry: shouldRetry}))
		_, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		var oe *idem.OutcomeError
		if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || !errors.Is(err, idem.ErrRetryDeclined) ||
			!strings.Contains(err.Error(), "the server said not to") || s.count() != 1 {
			t.Fatalf("Do = %v after %d attempts; want unknown, ErrRetryDeclined, after 1", err, s.count())
		}
		if op, _ := lookup(j, "op"); op.State != journal.StatePending {
			t.Fatalf("journal holds %v, want pending", op.State)
		}
		resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || s.attempts()[0].Key != s.attempts()[1].Key {
			t.Fatalf("resumed: status %d; want 201 under the first key", resp.StatusCode)
		}
	})
}

// Config.OnOperation hears once of every call: its outcome, whether the
// journal answered it, and why a refused call sent nothing.
func TestOnOperation(t *testing.T) {
	s := newScript(t, status(201, "made"), status(422, "no"), status(503, ""))
	var ends []idem.OperationEnd
	c := newClient(t, fast(idem.Config{MaxAttempts: 2, OnOperation: func(e idem.OperationEnd) { ends = append(ends, e) }}))
	do := func(id, body string) {
		resp, err := c.Do(id, post(t, context.Background(), s.srv.URL, body))
		if err == nil {
			resp.Body.Close()
		}
	}
	do("a", "x") // 201
	do("a", "x") // from the journal
	do("b", "x") // 422
	do("c", "x") // 503, 503: unknown
	do("a", "y") // another body: refused
	got := make([]string, len(ends))
	for i, e := range ends {
		got[i] = fmt.Sprintf("%s %v recorded=%v attempts=%d status=%d err=%v key=%v", e.ID, e.Outcome, e.Recorded,
			e.Attempts, e.Status, e.Err != nil, e.Key != "")
	}
	want := []string{
		"a done recorded=false attempts=1 status=201 err=false key=true",
		"a done recorded=true attempts=0 status=201 err=false key=true",
		"b rejected recorded=false attempts=1 status=422 err=false key=true",
		"c unknown recorded=false attempts=2 status=503 err=true key=true",
		"a Outcome(0) recorded=false attempts=0 status=0 err=true key=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ends:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !errors.Is(ends[4].Err, idem.ErrMismatch) || ends[0].Elapsed <= 0 {
		t.Fatalf("refusal err %v, elapsed %v; want ErrMismatch and a duration", ends[4].Err, ends[0].Elapsed)
	}
}

// The logging rule: routine work (outcomes, answers from the journal,
// compactions) logs below Info, so a default logger shows none of it; a
// torn tail cut on open is a warning.
func TestLoggingRule(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	path := filepath.Join(t.TempDir(), "ops.journal")
	j, err := filejournal.Open(path, filejournal.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s := newScript(t, status(201, "made"), status(503, ""))
	c := newClient(t, fast(idem.Config{Journal: j, Logger: log, MaxAttempts: 1}))
	for _, id := range []string{"done", "done", "unknown"} {
		if resp, err := c.Do(id, post(t, context.Background(), s.srv.URL, "x")); err == nil {
			resp.Body.Close()
		}
	}
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("routine work logged at Info or above:\n%s", buf.String())
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{7, 0, 0}) // a torn record
	f.Close()
	j, err = filejournal.Open(path, filejournal.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=WARN") || !strings.Contains(got, "torn journal tail") {
		t.Fatalf("opening a torn journal logged:\n%s\nwant one warning of the cut", got)
	}
}
