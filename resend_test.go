package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// refusingServer answers 401 to a request without the good token, 302 on
// /moved, and 201 otherwise; it counts the requests by path and the keys
// it applied.
type refusingServer struct {
	*httptest.Server
	mu      sync.Mutex
	hits    map[string]int
	applied map[string]string // key -> path
}

func newRefusingServer(t *testing.T) *refusingServer {
	s := &refusingServer{hits: map[string]int{}, applied: map[string]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hits[r.URL.Path]++
		switch {
		case r.URL.Path == "/moved":
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		case r.Header.Get("Authorization") != "Bearer good":
			http.Error(w, "token expired", http.StatusUnauthorized)
		default:
			s.applied[r.Header.Get("Idempotency-Key")] = r.URL.Path
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// Stumble: a batch refused 401 with an expired token is sent again, under
// new keys, once the token is fixed and BatchOptions.Resend chooses the
// refusals; a redirect it recorded as rejected is never sent again.
func TestBatchResendsARefusalUnderANewKey(t *testing.T) {
	srv := newRefusingServer(t)
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	c, err := idem.New(idem.Config{Journal: j, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	token := "expired"
	op := func(id, path string) idem.BatchOp {
		return idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(id))
			req.Header.Set("Authorization", "Bearer "+token)
			return req, err
		}}
	}
	ops := []idem.BatchOp{op("a", "/charges"), op("b", "/charges"), op("m", "/moved")}
	run := func(opts idem.BatchOptions) (idem.BatchSummary, map[string]bool) {
		resent := map[string]bool{}
		opts.Progress = func(r idem.BatchResult, _ idem.BatchSummary) {
			if r.Resent {
				resent[r.ID] = true
			}
		}
		sum, err := c.RunBatch(context.Background(), ops, opts)
		if err != nil {
			t.Fatal(err)
		}
		return sum, resent
	}
	if sum, _ := run(idem.BatchOptions{}); sum.Rejected != 3 {
		t.Fatalf("first run: %+v, want 3 rejected", sum)
	}
	firstKey, _ := lookup(j, "a")
	token = "good"
	if sum, _ := run(idem.BatchOptions{}); sum.Rejected != 3 || sum.Recorded != 3 {
		t.Fatalf("rerun without Resend: %+v, want the 3 rejections from the journal", sum)
	}
	sum, resent := run(idem.BatchOptions{Resend: journal.Operation.RefusedWithoutEffect})
	if sum.Done != 2 || sum.Rejected != 1 || !resent["a"] || !resent["b"] || resent["m"] {
		t.Fatalf("rerun with Resend: %+v, resent %v; want a and b resent and done, m rejected", sum, resent)
	}
	a, _ := lookup(j, "a")
	if a.State != journal.StateDone || a.Key == firstKey.Key || srv.applied[a.Key] != "/charges" {
		t.Fatalf("a after the resend: %+v, want done under a new key the server applied (first key %s)", a, firstKey.Key)
	}
	if srv.hits["/moved"] != 1 || len(srv.applied) != 2 {
		t.Fatalf("server saw /moved %d times and applied %d keys, want 1 and 2", srv.hits["/moved"], len(srv.applied))
	}
}

// Stumble: one call sends a recorded refusal again under CallOptions.Resend.
func TestDoResendsARefusalWithCallOptions(t *testing.T) {
	srv := newRefusingServer(t)
	c, err := idem.New(idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(ctx context.Context, token string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+token)
		return c.Do("op", req)
	}
	if _, err := do(context.Background(), "expired"); err == nil {
		t.Fatal("the first call was not refused")
	}
	if _, err := do(context.Background(), "good"); err == nil {
		t.Fatal("a recorded refusal was sent again without Resend")
	}
	ctx := idem.WithCallOptions(context.Background(), idem.CallOptions{Resend: journal.Operation.RefusedWithoutEffect})
	resp, err := do(ctx, "good")
	if err != nil || resp.StatusCode != http.StatusCreated || idem.Recorded(resp) {
		t.Fatalf("call with Resend: %v, %v; want 201 from the server", resp, err)
	}
	resp.Body.Close()
	if srv.hits["/charges"] != 2 || len(srv.applied) != 1 {
		t.Fatalf("server saw %d requests and applied %d keys, want 2 and 1", srv.hits["/charges"], len(srv.applied))
	}
}

// Resend is asked only about refusals that cannot have had an effect: a
// Resend that chooses every operation still leaves a recorded redirect
// (which may follow an applied POST) and a done operation as they are,
// answered from the journal under their keys, nothing sent.
func TestResendIsOfferedOnlyRefusalsWithoutEffect(t *testing.T) {
	srv := newRefusingServer(t)
	c, err := idem.New(idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(ctx context.Context, id, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(id))
		req.Header.Set("Authorization", "Bearer good")
		return c.Do(id, req)
	}
	if _, err := do(context.Background(), "moved", "/moved"); !errors.Is(err, idem.ErrRejected) {
		t.Fatalf("the redirect: err = %v, want it rejected", err)
	}
	resp, err := do(context.Background(), "done", "/charges")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var asked []string
	ctx := idem.WithCallOptions(context.Background(), idem.CallOptions{Resend: func(op journal.Operation) bool {
		asked = append(asked, op.ID)
		return true
	}})
	var oe *idem.OutcomeError
	if _, err := do(ctx, "moved", "/moved"); !errors.As(err, &oe) || oe.Outcome != idem.OutcomeRejected || !oe.Recorded {
		t.Fatalf("the redirect under Resend: err = %v, want the recorded rejection", err)
	}
	if resp, err = do(ctx, "done", "/charges"); err != nil || !idem.Recorded(resp) {
		t.Fatalf("the done operation under Resend: %v, %v; want the recorded answer", resp, err)
	}
	resp.Body.Close()
	if len(asked) != 0 || srv.hits["/moved"] != 1 || srv.hits["/charges"] != 1 {
		t.Fatalf("Resend asked about %v; server saw /moved %d and /charges %d times; want nothing asked and one request each",
			asked, srv.hits["/moved"], srv.hits["/charges"])
	}
}
