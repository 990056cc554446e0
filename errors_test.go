package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

// TestErrorsSayTheirPackageOnce collects the errors a user meets (refusals
// before sending, outcomes, the file journal's, Settle's) and checks that
// each begins with the name of the package that returned it, "idem: " or
// "filejournal: ", and says it once: a wrapped error does not repeat the
// prefix of the one that wraps it.
func TestErrorsSayTheirPackageOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ops.journal")
	j, err := filejournal.Open(path, filejournal.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refuse":
			http.Error(w, "bad token", http.StatusUnauthorized)
		case "/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 2, InitialWait: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(id, method, path, body string) error {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := c.Do(id, req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	errs := map[string]error{}
	_, errs["New"] = idem.New(idem.Config{MaxAttempts: -1})
	errs["empty ID"] = do("", "POST", "/", "")
	bad, _ := http.NewRequest("POST", "ftp://example.test/", nil)
	_, errs["scheme"] = c.Do("x", bad)
	do("op", "POST", "/", "a")
	errs["mismatch"] = do("op", "POST", "/", "b")
	errs["rejected"] = do("refused", "POST", "/refuse", "")
	errs["recorded rejection"] = do("refused", "POST", "/refuse", "")
	errs["unknown"] = do("busy", "POST", "/busy", "")
	_, errs["locked"] = filejournal.Open(path, filejournal.Options{})
	notJournal := filepath.Join(dir, "not.journal")
	os.WriteFile(notJournal, []byte("hello, this is not a journal at all"), 0o600)
	_, errs["not a journal"] = filejournal.Open(notJournal, filejournal.Options{})
	errs["settle unknown ID"] = idem.Settle(ctx, j, "nope", idem.Settlement{State: journal.StateDone, Status: 200})
	errs["settle completed"] = idem.Settle(ctx, j, "op", idem.Settlement{State: journal.StateDone, Status: 200})
	errs["settle invalid"] = idem.Settle(ctx, j, "op", idem.Settlement{})
	errs["forget completed"] = idem.Settle(ctx, j, "op", idem.Settlement{Forget: true})
	errs["forget unknown"] = j.Forget(ctx, "nope")
	errs["begin invalid"] = journalhelp.Begin(j, journal.Operation{ID: "no-key"})
	errs["begin twice"] = journalhelp.Begin(j, journal.Operation{ID: "op", Key: "k"})
	_, errs["batch"] = c.RunBatch(ctx, []idem.BatchOp{{ID: ""}}, idem.BatchOptions{})
	// The file journal's own errors, returned as they are.
	fromFile := map[string]bool{"locked": true, "not a journal": true, "forget unknown": true, "begin invalid": true, "begin twice": true}
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		prefix := "idem: "
		if fromFile[name] {
			prefix = "filejournal: "
		}
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || strings.Count(msg, "idem: ") != strings.Count(prefix, "idem: ") || strings.Count(msg, "filejournal: ") > 1 {
			t.Errorf("%s: %q, want one %q, in front, and no other package's", name, msg, prefix)
		}
	}
	if !errors.Is(errs["mismatch"], idem.ErrMismatch) || !errors.Is(errs["locked"], filejournal.ErrLocked) {
		t.Errorf("the errors lost their sentinels: %v; %v", errs["mismatch"], errs["locked"])
	}
}

// C5: the mismatch error says what differs from the request the operation
// was journaled with: the method, the URL, or else the body.
func TestMismatchSaysWhatDiffers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer srv.Close()
	c, err := idem.New(idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, url, body string) error {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := c.Do("op", req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do("POST", srv.URL+"/charges", "a"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, url, body, want string }{
		{"PUT", srv.URL + "/charges", "a", "the method differs (journaled POST, now PUT)"},
		{"POST", srv.URL + "/other", "a", `the URL differs (journaled "` + srv.URL + `/charges", now "` + srv.URL + `/other")`},
		{"POST", srv.URL + "/charges", "b", "the body differs"},
	} {
		err := do(tc.method, tc.url, tc.body)
		if !errors.Is(err, idem.ErrMismatch) || !strings.HasSuffix(err.Error(), ": "+tc.want) {
			t.Errorf("%s %s %q: %v, want ErrMismatch saying %q", tc.method, tc.url, tc.body, err, tc.want)
		}
	}
}

// TestRoundTripperErrorsAreNotRetryable checks that what the RoundTripper
// returns as an error tells an SDK's retry loop not to retry it, by the
// method the AWS SDK for Go's retryer asks for: an unknown outcome (idem
// retried already), and a refusal before sending.
func TestRoundTripperErrorsAreNotRetryable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := idem.New(idem.Config{HTTPClient: srv.Client(), MaxAttempts: 2, InitialWait: time.Millisecond, MaxWait: time.Millisecond,
		Dialect: idem.AWSCloudControl()})
	if err != nil {
		t.Fatal(err)
	}
	hc := c.StandardClient()
	for _, tc := range []struct {
		body string
		want error
	}{
		{`{"a":1}`, idem.ErrUnknown},
		{`{"ClientToken":"x"}`, idem.ErrBodyNotObject},
	} {
		req, _ := http.NewRequestWithContext(idem.WithOperation(context.Background(), "op-"+tc.body), "POST", srv.URL, strings.NewReader(tc.body))
		_, err := hc.Do(req)
		var r interface{ RetryableError() bool }
		if !errors.Is(err, tc.want) || !errors.As(err, &r) || r.RetryableError() {
			t.Errorf("body %s: err = %v; want %v, not retryable", tc.body, err, tc.want)
		}
	}
}
