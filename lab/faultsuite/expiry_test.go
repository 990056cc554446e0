package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver"
	"github.com/idemkit/idem/testserver/chaos"
)

// TestExpiryEndToEnd leaves an operation pending for longer than the
// server keeps keys, with the real clock: the server binary keeps keys for
// 2 seconds, the client's KeyTTL (and its journal's) is the same. The
// first attempt reaches the server and takes effect, but its answer is
// dropped by the proxy, so the operation stays pending. A resume, on a
// clock the test moves, retries through a front end answering 503 until
// the next attempt would start within its timeout of KeyTTL; it stops
// there (ErrKeyExpired) and does not send that attempt. Once the server
// has swept the key (a condition read from GET /stats, not a sleep), the
// client must refuse to resend (ErrKeyExpired) and send nothing, the
// server must hold one effect, and the journal must list the operation as
// expired, also after it is reopened and in a batch. Last, a resend under
// the same key, made by hand, shows what the refusal prevented: the server
// applies it as new.
func TestExpiryEndToEnd(t *testing.T) {
	const retention = 2 * time.Second
	srv := startServer(t, "-retention", retention.String(), "-sweep-interval", "100ms")
	w := Workload{ClientID: "expiry", Ops: 1}
	upstream, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := chaos.Listen(chaos.Config{Upstream: upstream, Rates: map[chaos.Kind]float64{chaos.DropAfterCommit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	w.BaseURL = proxy.URL

	path := filepath.Join(t.TempDir(), "client.journal")
	opts := filejournal.Options{Logger: quietLog}
	j, err := filejournal.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	// Without keep-alive, net/http never resends a request on its own, so
	// the proxy's count is the client's.
	tr := NewTransport()
	tr.DisableKeepAlives = true
	cfg := clientConfig(j, &http.Client{Transport: tr})
	cfg.Dialect.Retention, cfg.MaxAttempts = retention, 1
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := OperationID(0)
	do := func(c *idem.Client, w Workload) error {
		req, err := w.Request(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(id, req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	if err := do(c, w); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do = %v, want unknown (the answer was dropped)", err)
	}
	op, ok := lookup(j, id)
	if !ok || op.State != journal.StatePending {
		t.Fatalf("journal: %s is %v (found %v), want pending", id, op.State, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats := &http.Client{Transport: NewTransport()}
	defer stats.CloseIdleConnections()

	// The resume starts 750ms before KeyTTL on its clock. Every attempt
	// gets 503 in 90ms and waits 10ms, so the fourth would start 450ms
	// before KeyTTL, within the attempt timeout of 500ms. Sent anyway, it
	// is still on its way when the server sweeps the key, and arrives
	// after: the client's timeout does not call it back.
	busy, err := chaos.Listen(chaos.Config{Upstream: upstream, Rates: map[chaos.Kind]float64{chaos.Unavailable: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	front, err := url.Parse(busy.URL)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	clock.Advance(op.Created.Add(retention - 750*time.Millisecond).Sub(clock.Now()))
	var attempts []time.Duration // when the attempts went, as time left before KeyTTL
	// The resume is the next process, its journal's clock the fake one.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Now = clock.Now
	if j, err = filejournal.Open(path, opts); err != nil {
		t.Fatal(err)
	}
	resume := cfg
	resume.Journal, resume.AttemptTimeout, resume.MaxAttempts = j, 500*time.Millisecond, 10
	resume.InitialWait, resume.MaxWait, resume.Jitter = 10*time.Millisecond, 10*time.Millisecond, -1
	resume.OnAttempt = func(a idem.Attempt) {
		if a.Retry {
			clock.Advance(a.Wait)
		}
	}
	resume.HTTPClient = &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		left := retention - clock.Now().Sub(op.Created)
		attempts = append(attempts, left)
		to := req.Clone(req.Context())
		to.Host = ""
		if left > resume.AttemptTimeout {
			to.URL.Host = front.Host
			resp, err := tr.RoundTrip(to)
			clock.Advance(90 * time.Millisecond)
			return resp, err
		}
		waitForStats(t, ctx, stats, srv.URL, "the key swept", func(st testserver.Stats) bool { return st.Keys == 0 })
		to = to.WithContext(context.WithoutCancel(req.Context()))
		to.URL.Host = upstream.Host
		return tr.RoundTrip(to)
	})}
	rc, err := idem.New(resume)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{750 * time.Millisecond, 650 * time.Millisecond, 550 * time.Millisecond}
	err = do(rc, w)
	resumed, serr := FetchStats(ctx, stats, srv.URL)
	if serr != nil {
		t.Fatal(serr)
	}
	var oe *idem.OutcomeError
	if !slices.Equal(attempts, want) || !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, idem.ErrKeyExpired) ||
		!errors.As(err, &oe) || oe.Attempts != len(want) || oe.Status != http.StatusServiceUnavailable || resumed.Effects.Charges != 1 {
		t.Fatalf("the resume sent attempts %v before KeyTTL, want %v, and returned %v, want unknown with ErrKeyExpired after %d answers of 503; the server holds %d charges, want 1",
			attempts, want, err, len(want), resumed.Effects.Charges)
	}
	if n := busy.Counts(); n.Requests != len(want) || n.Faults[chaos.Unavailable] != len(want) || n.Forwarded != 0 {
		t.Fatalf("the front end saw %s; want %d requests, each answered 503", n, len(want))
	}

	before := waitForStats(t, ctx, stats, srv.URL, "the key swept", func(st testserver.Stats) bool { return st.Keys == 0 })
	if before.Effects.Charges != 1 {
		t.Fatalf("the server holds %d charges, want the first attempt's 1", before.Effects.Charges)
	}
	sent := proxy.Counts().Requests

	if err := do(rc, w); !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("Do after the server forgot the key = %v, want ErrKeyExpired", err)
	}
	st, err := FetchStats(ctx, stats, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if n := proxy.Counts().Requests; n != sent || st.Requests != before.Requests || st.Effects.Charges != 1 {
		t.Fatalf("after the refusal: %d requests through the proxy (want %d), %d at the server (want %d), %d charges (want 1)",
			n, sent, st.Requests, before.Requests, st.Effects.Charges)
	}
	// The journal's clock, the fake one, reaches the key's lifetime: the
	// server swept it already.
	clock.Advance(op.Created.Add(retention).Sub(clock.Now()))
	requireExpired(t, j, id, op.Key)

	// Reopened, as a person reconciling would, and resumed as a batch.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j, err = filejournal.Open(path, opts); err != nil {
		t.Fatal(err)
	}
	requireExpired(t, j, id, op.Key)
	cfg.Journal = j
	if c, err = idem.New(cfg); err != nil {
		t.Fatal(err)
	}
	sum, err := c.RunBatch(ctx, []idem.BatchOp{{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
		return w.Request(ctx, 0)
	}}}, idem.BatchOptions{})
	if err != nil || sum.Expired != 1 || sum.Total() != 1 {
		t.Fatalf("RunBatch = %+v, %v; want the operation expired", sum, err)
	}
	if n := proxy.Counts().Requests; n != sent {
		t.Fatalf("the batch sent %d requests, want none", n-sent)
	}

	// What the refusal prevented: the same request under the same key is,
	// for the server, a new request.
	req, err := w.Request(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	raw, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+req.URL.Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw.Header = req.Header.Clone()
	raw.Header.Set("Idempotency-Key", op.Key)
	resp, err := stats.Do(raw)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(testserver.HeaderReplayed) != "" {
		t.Fatalf("a resend under the expired key got %s (replayed %q), want a new 201", resp.Status, resp.Header.Get(testserver.HeaderReplayed))
	}
	if st, err := FetchStats(ctx, stats, srv.URL); err != nil || st.Effects.Charges != 2 {
		t.Fatalf("after the resend by hand: %+v, %v; want 2 charges: the duplicate the client refused to make", st.Effects, err)
	}
}

// requireExpired checks that the journal lists the operation, with its
// key, as expired, and not as pending.
func requireExpired(t *testing.T, j *filejournal.Journal, id, key string) {
	t.Helper()
	exp := list(j, journal.ListExpired)
	if len(exp) != 1 || exp[0].ID != id || exp[0].Key != key {
		t.Errorf("Expired() = %+v, want %s with key %s", exp, id, key)
	}
	if p := list(j, journal.ListPending); len(p) != 0 {
		t.Errorf("Pending() = %+v, want none", p)
	}
}

// waitForStats polls GET /stats until cond holds or ctx ends, and returns
// the stats that satisfied it.
func waitForStats(t *testing.T, ctx context.Context, hc *http.Client, url, what string, cond func(testserver.Stats) bool) testserver.Stats {
	t.Helper()
	for {
		st, err := FetchStats(ctx, hc, url)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if cond(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last %+v)", what, ctx.Err(), st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
