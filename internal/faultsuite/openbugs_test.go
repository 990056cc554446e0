package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/testserver"
)

// envKnownBugs runs the tests in this file, which reproduce bugs not fixed
// yet: they fail until their bug is fixed, so they are skipped unless
// IDEM_KNOWN_BUGS=1. A fix moves its test to regressions_test.go.
const envKnownBugs = "IDEM_KNOWN_BUGS"

// knownBug skips the test unless envKnownBugs is set.
func knownBug(t *testing.T, what string) {
	t.Helper()
	if os.Getenv(envKnownBugs) == "" {
		t.Skipf("known bug, not fixed yet: %s (run with %s=1 to reproduce)", what, envKnownBugs)
	}
}

// C6: no key the server has forgotten is sent. The client refuses to send
// an attempt whose key is already KeyTTL old, but sends one that is a
// moment younger, and that attempt may still be on its way (in a queue, in
// a proxy, waiting for the server's write lock) when the key turns KeyTTL
// old and the server sweeps it: the server then applies it as a new
// request. The attempt needs a margin: at least its own timeout, within
// which the client is still waiting for it to be processed.
func TestNoAttemptCanReachTheServerAfterKeyTTL(t *testing.T) {
	knownBug(t, "an attempt sent just before KeyTTL can reach the server after it")
	const ttl = time.Hour
	clock := newFakeClock()
	srv := testserver.Start(t, testserver.Config{Now: clock.Now, Retention: ttl})
	w := Workload{BaseURL: srv.URL, ClientID: "in-flight", Ops: 1}
	j, err := idem.OpenJournalWithOptions(filepath.Join(t.TempDir(), "client.journal"),
		idem.JournalOptions{Now: clock.Now, KeyTTL: ttl, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	var attempts atomic.Int32
	network := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch attempts.Add(1) {
		case 1: // applied; the answer is lost
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
		case 2: // sent 1ms before KeyTTL, 2ms on the way; meanwhile the server sweeps
			clock.Advance(2 * time.Millisecond)
			if _, err := srv.Server.Sweep(context.Background()); err != nil {
				t.Error(err)
			}
		}
		return tr.RoundTrip(req)
	})
	cfg := clientConfig(j, &http.Client{Transport: network})
	cfg.Now, cfg.KeyTTL, cfg.MaxAttempts = clock.Now, ttl, 1
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	do := func() error {
		req, err := w.Request(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(OperationID(0), req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do = %v, want unknown", err)
	}
	clock.Advance(ttl - time.Millisecond)
	err = do()
	st, serr := srv.Server.Stats(context.Background())
	if serr != nil {
		t.Fatal(serr)
	}
	if st.Effects.Charges != 1 || !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("a Do 1ms before KeyTTL (attempt timeout %s) returned %v after %d attempts; the server holds %d charges, want 1 and ErrKeyExpired",
			cfg.AttemptTimeout, err, attempts.Load()-1, st.Effects.Charges)
	}
}
