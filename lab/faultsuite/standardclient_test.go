package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestChaosStandardClient is the chaos scenario for code that only takes
// an *http.Client: the operations go through Client.StandardClient, named
// by idem.WithOperation, with keys sent as quoted structured-field strings
// and a bearer token refreshed on every run of an operation (the scope is
// the client's account, X-Client-ID, whatever the token). 400 operations
// through the proxy at 30%: every one must end done with exactly one
// effect, every effect must be in the client's scope, and every key that
// reached the server must be quoted.
func TestChaosStandardClient(t *testing.T) {
	const ops, workers = 400, 16
	seed := seedOf(t)
	srv := startServer(t)
	w := Workload{ClientID: "standard", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, seed, 0.3)
	w.BaseURL = proxy.URL

	checker := NewChecker(w.IDs())
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	cfg := clientConfig(openJournal(t), &http.Client{Transport: tr})
	cfg.Dialect.QuotedKey = true
	Instrument(&cfg, checker)
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.StandardClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errs := runEach(ops, workers, func(i int) error { return runThroughStandardClient(ctx, hc, w, i, checker) })
	requireNoErrors(t, errs)
	t.Logf("proxy: %s", proxy.Counts())
	v := serverView(t, srv.URL, srv.DB, Workload{Ops: ops}, true, wire) // every scope's effects
	scoped, err := EffectsInScope(ctx, srv.DB, scopeOf(w.ClientID))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(scoped, v.Effects) {
		t.Errorf("%d references have effects in the client's scope, %d in every scope: effects went to another scope", len(scoped), len(v.Effects))
	}
	v.Effects = scoped
	if wv := v.Wire; wv.Bare != 0 || wv.Quoted != wv.Requests {
		t.Errorf("%d of %d keys reached the server bare, want every one quoted", wv.Bare, wv.Requests)
	}
	report(t, checker, "standard-client", v)
}

// runThroughStandardClient runs operation i through hc, re-running it
// while it ends unknown, each run with a bearer token of its own, as a
// restarted job fetches a new one.
func runThroughStandardClient(ctx context.Context, hc *http.Client, w Workload, i int, rec Recorder) error {
	id := OperationID(i)
	for run := 0; run < maxRuns; run++ {
		req, err := w.Request(idem.WithOperation(ctx, id), i)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", fmt.Sprintf("Bearer token-of-%s-run-%d", w.ClientID, run))
		resp, err := hc.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 300 { // the RoundTripper returns rejections as responses
				rec.Outcome(id, ResultRejected)
				return fmt.Errorf("%s: %s", id, resp.Status)
			}
			rec.Outcome(id, ResultDone)
			return err
		}
		res := ResultOf(err)
		rec.Outcome(id, res)
		if res != ResultUnknown {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(time.Duration(min(run+1, 25)) * 10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: not done after %d runs", id, maxRuns)
}
