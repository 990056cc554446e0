package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/testserver"
	"github.com/idemkit/idem/testserver/chaos"
)

// keyPlace returns where d puts the key: a header, or a body member.
func keyPlace(d idem.Dialect) (header, field string) {
	switch {
	case d.KeyField != "":
		return "", d.KeyField
	case d.KeyHeader != "":
		return d.KeyHeader, ""
	}
	return "Idempotency-Key", ""
}

// serverDialect returns the reference server's dialect of the client's
// dialect d, which has the same name.
func serverDialect(t *testing.T, d idem.Dialect) testserver.Dialect {
	t.Helper()
	sd, ok := testserver.DialectNamed(d.Name)
	if !ok {
		t.Fatalf("the reference server speaks no dialect %q", d.Name)
	}
	return sd
}

// listenDialectProxy is listenProxy for a server speaking d: the
// mutations it faults (rate of them) suffer every kind of fault, the
// in-flight answer of d's server included, and its Wire looks for the key
// where d puts it. Its seed is inFlightSeed's, for a workload of ops.
func listenDialectProxy(t *testing.T, upstream string, d idem.Dialect, seed int64, rate float64, ops int) (*chaos.Server, *Wire) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	header, field := keyPlace(d)
	wire := NewWireFor(header, field)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, DisableCompression: true}
	status, h, body := serverDialect(t, d).InFlightResponse()
	// A third of the faults are the dialect's in-flight answer; the rest
	// are spread over every other kind.
	rates := map[chaos.Kind]float64{chaos.InFlight: rate / 3}
	for _, k := range chaos.AllKinds() {
		rates[k] = rate * 2 / 3 / float64(len(chaos.AllKinds()))
	}
	cfg := chaos.Config{
		Upstream: u, Seed: seed, Rates: rates,
		InFlight: chaos.Reply{Status: status, Header: h, Body: body}, KeyHeader: header,
		Transport: wire.Transport(tr),
	}
	cfg.Seed = inFlightSeed(t, cfg, ops)
	proxy, err := chaos.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Close()
		tr.CloseIdleConnections()
	})
	return proxy, wire
}

// startDialectServer starts the reference server speaking d, with
// charges that take a few milliseconds in the gateway, so that a retry
// may well find the first request still at work and get the server's own
// in-flight answer, and stocks its inventory.
func startDialectServer(t *testing.T, d idem.Dialect, clientID string, args ...string) *ServerProcess {
	t.Helper()
	srv := startServer(t, append([]string{"-dialect", d.Name, "-gateway-delay", "3ms"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	if err := stockSpeaking(ctx, d, &http.Client{Transport: tr}, srv.URL, clientID); err != nil {
		t.Fatal(err)
	}
	return srv
}

// stockSpeaking stocks Item on the server at baseURL through an idem
// Client speaking d. A server that faults may apply the request and lose
// its answer; the retry then gets the dialect's answer to a key already
// used, which for Primer is a 400 and never the 200 a plain client would
// wait for, and which the dialect reads as done.
func stockSpeaking(ctx context.Context, d idem.Dialect, hc *http.Client, baseURL, clientID string) error {
	c, err := idem.New(idem.Config{Dialect: d, HTTPClient: hc})
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"available": %d}`, InitialStock)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, baseURL+"/inventory/"+Item, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-ID", clientID)
	resp, err := c.Do("stock-"+Item, req)
	if err != nil {
		return fmt.Errorf("faultsuite: stocking %s: %w", Item, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && !idem.AlreadyApplied(resp) {
		return fmt.Errorf("faultsuite: stocking %s: status %s", Item, resp.Status)
	}
	return nil
}

// requireDialectAnswers checks what only some dialects do: an
// already-applied answer (recorded done, flagged) where the dialect has
// one, and none where it has not; and on the wire, the key where the
// dialect puts it.
func requireDialectAnswers(t *testing.T, d idem.Dialect, r Report, w WireView) {
	t.Helper()
	if hasApplied(d) != (r.Applied > 0) {
		t.Errorf("%d operations done on an already-applied answer; the dialect has such an answer: %v", r.Applied, hasApplied(d))
	}
	if w.Requests == 0 || w.Keyless != 0 || w.Misplaced != 0 {
		t.Errorf("the wire saw %d keyed requests, %d without the key in its place, %d with an Idempotency-Key header besides",
			w.Requests, w.Keyless, w.Misplaced)
	}
}

// hasApplied reports whether d has an already-applied answer.
func hasApplied(d idem.Dialect) bool {
	for _, s := range d.Signals {
		if s.Answer == idem.AnswerApplied {
			return true
		}
	}
	return false
}

// TestDialectsMatchTheServer: each of the client's built-in dialects has
// a server dialect of its name that puts the key in the same place, with
// the same length limit and retention.
func TestDialectsMatchTheServer(t *testing.T) {
	names := map[string]bool{}
	for _, d := range idem.Dialects() {
		names[d.Name] = true
		sd := serverDialect(t, d)
		header, field := keyPlace(d)
		sheader := sd.KeyHeader
		if sheader == "" && sd.KeyField == "" {
			sheader = testserver.HeaderIdempotencyKey
		}
		clientTTL, serverTTL := d.Retention, sd.Retention
		setDefault(&clientTTL, idem.DefaultKeyTTL)
		setDefault(&serverTTL, testserver.DefaultRetention)
		serverMax := sd.MaxKeyLength
		setDefault(&serverMax, testserver.MaxKeyLength)
		if !strings.EqualFold(sheader, header) || sd.KeyField != field || clientTTL != serverTTL ||
			d.MaxKeyLength != 0 && serverMax != d.MaxKeyLength {
			t.Errorf("%s: the client puts the key in %q/%q, up to %d, for %v; the server reads it from %q/%q, up to %d, for %v",
				d.Name, header, field, d.MaxKeyLength, clientTTL, sheader, sd.KeyField, serverMax, serverTTL)
		}
	}
	for _, name := range testserver.DialectNames() {
		if !names[name] {
			t.Errorf("the server speaks %q, which the client has no dialect for", name)
		}
	}
}

// setDefault sets *v to def when it is zero.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// inFlightSeed returns the first seed from cfg.Seed on whose proxy at
// least two of the first min(ops, 20) matched requests get the in-flight
// answer (one, for a workload of one operation). Every operation sends at
// least once, so every run draws them, whatever its seed; a kill can
// still cut one off before it is written upstream, when the proxy counts
// it, so two make the suite's "answered in flight" all but certain rather
// than one in 300 short. The same cfg gives the same seed.
func inFlightSeed(t *testing.T, cfg chaos.Config, ops int) int64 {
	t.Helper()
	within := min(ops, 20)
	want, from := min(within, 2), cfg.Seed
	for i := range int64(10000) {
		seed := from + i
		cfg.Seed = seed
		kinds, err := chaos.Faults(cfg, within)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range kinds {
			if k == chaos.InFlight {
				n++
			}
		}
		if n >= want {
			if seed != from {
				t.Logf("proxy seed %d, the first from %d to draw in-flight answers", seed, from)
			}
			return seed
		}
	}
	t.Fatalf("none of 10,000 proxy seeds from %d draws %d in-flight answers in %d requests", from, want, within)
	return 0
}

// TestDialectChaos runs the workload against the reference server speaking
// each built-in dialect, through the fault proxy faulting 30% of the
// attempts with every kind of fault and with the dialect's in-flight
// answer, sent while the server still works on the request (chaos.InFlight).
// Every operation must end done with exactly one effect, no in-flight
// answer may be taken for done or rejected, an already-applied answer must
// be taken for done, and the key must travel where the dialect puts it,
// one per operation (S4.10).
func TestDialectChaos(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvDialectOps, DefaultDialectOps)
	for _, d := range idem.Dialects() {
		t.Run(d.Name, func(t *testing.T) {
			w := Workload{ClientID: "dialect-" + d.Name, Ops: ops}
			srv := startDialectServer(t, d, w.ClientID)
			proxy, wire := listenDialectProxy(t, srv.URL, d, seed, 0.3, ops)
			w.BaseURL = proxy.URL

			j := openJournal(t)
			checker := NewChecker(w.IDs())
			tr := NewTransport()
			t.Cleanup(tr.CloseIdleConnections)
			cfg := clientConfig(j, &http.Client{Transport: tr})
			cfg.Dialect = d
			cfg.AttemptTimeout = time.Second // a stall costs a second, not two
			Instrument(&cfg, checker)
			c, err := idem.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			requireNoErrors(t, runWorkload(ctx, c, w, 8, checker))

			counts := proxy.Counts()
			t.Logf("proxy: %s", counts)
			if counts.Faults[chaos.InFlight] == 0 {
				t.Error("the proxy never answered in flight")
			}
			v := serverView(t, srv.URL, srv.DB, w, true, wire)
			r := report(t, checker, "dialect-chaos-"+d.Name, v)
			requireDialectAnswers(t, d, r, *v.Wire)
			requireJournalDone(t, j, w)
		})
	}
}

// TestDialectClientCrash is TestClientCrash for each built-in dialect: a
// batch client speaking it, SIGKILLed at random moments and resumed from
// its journal, against the server speaking it, which faults 10% of its
// requests, behind a proxy that answers 10% of them in flight. Every
// operation must end done with one effect, under one key across all the
// processes, found where the dialect puts it (S4.10).
func TestDialectClientCrash(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvDialectOps, DefaultDialectOps)
	kills := sizeOf(t, EnvDialectKills, DefaultDialectKills)
	for _, d := range idem.Dialects() {
		t.Run(d.Name, func(t *testing.T) {
			w := Workload{ClientID: "dialect-crash-" + d.Name, Ops: ops}
			srv := startDialectServer(t, d, w.ClientID, "-faults", "0.1", "-crash", "abort", "-lock-timeout", "1s",
				"-seed", strconv.FormatInt(seed, 10))
			header, field := keyPlace(d)
			u, err := url.Parse(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			wire := NewWireFor(header, field)
			tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}
			defer tr.CloseIdleConnections()
			status, h, body := serverDialect(t, d).InFlightResponse()
			pcfg := chaos.Config{Upstream: u, Seed: seed, Rates: map[chaos.Kind]float64{chaos.InFlight: 0.1},
				InFlight: chaos.Reply{Status: status, Header: h, Body: body}, KeyHeader: header, Transport: wire.Transport(tr)}
			pcfg.Seed = inFlightSeed(t, pcfg, ops)
			proxy, err := chaos.Listen(pcfg)
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			w.BaseURL = proxy.URL

			cfg := batchChildConfig{
				Journal: filepath.Join(t.TempDir(), "batch.journal"), URL: w.BaseURL, ClientID: w.ClientID,
				Ops: ops, Concurrency: 8, CompactEvery: 25, Rounds: 200, Dialect: d.Name,
			}
			checker := NewChecker(w.IDs())
			rng := rngOf(seed, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			created := false
			for k := 1; k <= kills; k++ {
				b := startBatch(t, cfg, checker)
				// After some outcomes, with others under way: never before
				// the work starts, so that each kill cuts operations off.
				running, err := b.waitOutcomes(ctx, 1+rng.IntN(max(ops/(kills+2), 1)))
				if err != nil {
					t.Fatal(err)
				}
				if !running {
					t.Fatalf("the batch ended (%v) before kill %d: %s", b.err, k, b.stderr.String())
				}
				b.kill()
				wire.ClientKilled()
				if msg := b.journalError(); msg != "" {
					t.Fatalf("after %d kills the journal did not open: %s", k-1, msg)
				}
				created = created || b.opened()
				requireJournalOpens(t, cfg.Journal, k, created)
			}
			b := startBatch(t, cfg, checker)
			if err := b.wait(ctx); err != nil {
				lines, _ := b.outputLines()
				t.Fatalf("the last run ended with %v: %q\n%s", err, lines, b.stderr.String())
			}
			if n := proxy.Counts().Faults[chaos.InFlight]; n == 0 {
				t.Error("the proxy never answered in flight")
			}
			v := serverView(t, srv.URL, srv.DB, w, true, wire)
			r := report(t, checker, "dialect-crash-"+d.Name, v)
			if r.ClientCrashes == 0 {
				t.Error("no operation was found pending after a kill: the kills missed the work")
			}
			if v.Wire.Requests == 0 || v.Wire.Keyless != 0 || v.Wire.Misplaced != 0 {
				t.Errorf("the wire saw %d keyed requests, %d without the key in its place, %d with an Idempotency-Key header besides",
					v.Wire.Requests, v.Wire.Keyless, v.Wire.Misplaced)
			}
			j, err := filejournal.Open(cfg.Journal, filejournal.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			requireJournalDone(t, j, w)
		})
	}
}

// TestDialectRetention: a client speaking each built-in dialect keeps a
// pending key for the dialect's retention (24 hours where it publishes
// none), on a clock the test moves: resumed one attempt timeout and a
// second before the retention ends, an operation is sent and ends done;
// resumed a second after, another is refused with ErrKeyExpired and
// nothing is sent for it (S6.7).
func TestDialectRetention(t *testing.T) {
	for _, d := range idem.Dialects() {
		t.Run(d.Name, func(t *testing.T) {
			w := Workload{ClientID: "dialect-retention-" + d.Name, Ops: 2}
			srv := startDialectServer(t, d, w.ClientID)
			upstream, err := url.Parse(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			drop, err := chaos.Listen(chaos.Config{Upstream: upstream, Rates: map[chaos.Kind]float64{chaos.DropAfterCommit: 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer drop.Close()

			clock := newFakeClock()
			j, err := filejournal.Open(filepath.Join(t.TempDir(), "client.journal"), filejournal.Options{Logger: quietLog, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			// The requests name the proxy, which drops every answer, until
			// resumed is set; then they go to the server itself.
			var sent atomic.Int64
			var resumed atomic.Bool
			tr := NewTransport()
			tr.DisableKeepAlives = true
			defer tr.CloseIdleConnections()
			cfg := clientConfig(j, &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent.Add(1)
				if resumed.Load() {
					r = r.Clone(r.Context())
					r.URL.Host, r.Host = upstream.Host, ""
				}
				return tr.RoundTrip(r)
			})})
			cfg.Dialect, cfg.MaxAttempts = d, 1
			c, err := idem.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.BaseURL = drop.URL
			do := func(i int) (*http.Response, error) {
				req, err := w.Request(context.Background(), i)
				if err != nil {
					t.Fatal(err)
				}
				return c.Do(OperationID(i), req)
			}
			for i := range 2 {
				if _, err := do(i); !errors.Is(err, idem.ErrUnknown) {
					t.Fatalf("first Do of %d = %v, want unknown (the answer was dropped)", i, err)
				}
			}
			ttl := d.Retention
			if ttl == 0 {
				ttl = idem.DefaultKeyTTL
			}
			clock.Advance(ttl - cfg.AttemptTimeout - time.Second)
			resumed.Store(true)
			resp, err := do(0)
			if err != nil {
				t.Fatalf("resumed within the retention: %v, want done", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated && !idem.AlreadyApplied(resp) {
				t.Fatalf("resumed within the retention: %s, want the answer or an already-applied one", resp.Status)
			}
			clock.Advance(cfg.AttemptTimeout + 2*time.Second)
			before := sent.Load()
			if _, err := do(1); !errors.Is(err, idem.ErrKeyExpired) {
				t.Fatalf("resumed after the retention: %v, want ErrKeyExpired", err)
			}
			if n := sent.Load() - before; n != 0 {
				t.Fatalf("a key past the retention was sent %d times", n)
			}
		})
	}
}
