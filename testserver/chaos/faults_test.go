package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestResetSendsNothingUpstream: the client's connection is reset before
// anything is forwarded.
func TestResetSendsNothingUpstream(t *testing.T) {
	up := newUpstream(t, nil)
	s := listen(t, up, oneKind(Reset))

	resp, err := post(context.Background(), newClient(t), s.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want a connection reset", resp.Status)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want ECONNRESET", err)
	}
	closeServer(t, s)
	if n := up.count(); n != 0 {
		t.Fatalf("upstream received %d requests, want 0", n)
	}
	want := Counts{Requests: 1, Faults: map[Kind]int{Reset: 1}}
	assertCounts(t, s.Counts(), want)
}

// TestDropAfterCommitHangsUpAfterTheUpstreamAnswered: the upstream applied
// the request; the client sees EOF and no response.
func TestDropAfterCommitHangsUpAfterTheUpstreamAnswered(t *testing.T) {
	up := newUpstream(t, nil)
	s := listen(t, up, oneKind(DropAfterCommit))

	resp, err := post(context.Background(), newClient(t), s.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want EOF before any response", resp.Status)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, Faults: map[Kind]int{DropAfterCommit: 1}})
}

// TestBadGatewayAfterCommitAnswers502AfterTheUpstreamAnswered.
func TestBadGatewayAfterCommitAnswers502AfterTheUpstreamAnswered(t *testing.T) {
	up := newUpstream(t, nil)
	s := listen(t, up, oneKind(BadGatewayAfterCommit))

	resp, err := post(context.Background(), newClient(t), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if string(body) != "chaos: injected fault bad-gateway-after-commit\n" {
		t.Fatalf("body %q carries the upstream's response or nothing recognisable", body)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, Faults: map[Kind]int{BadGatewayAfterCommit: 1}})
}

// TestStallEndsWhenTheClientGivesUp: with a stall far longer than the
// test, the client's cancel ends the exchange, and the proxy's handler
// ends with it (goleak in TestMain checks nothing is left behind).
func TestStallEndsWhenTheClientGivesUp(t *testing.T) {
	up := newUpstream(t, nil)
	logs := make(records, 16)
	cfg := oneKind(Stall)
	cfg.MaxStall = time.Hour
	cfg.Logger = slog.New(logs)
	s := listen(t, up, cfg)

	// The client gives up once the stall has begun, whatever the upstream
	// round trip before it took.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		resp, err := post(ctx, newClient(t), s.URL)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("got %s", resp.Status)
		}
		errc <- err
	}()
	logs.waitFor(t, "chaos: injected fault")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the client's context.Canceled", err)
	}
	if got := logs.waitFor(t, "chaos: stall ended")["reason"]; got != "client gave up" {
		t.Fatalf("stall ended because %q, want client gave up", got)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, Faults: map[Kind]int{Stall: 1}})
}

// TestStallEndsAfterMaxStall: a client that never gives up is hung up on
// once MaxStall has elapsed.
func TestStallEndsAfterMaxStall(t *testing.T) {
	up := newUpstream(t, nil)
	logs := make(records, 16)
	cfg := oneKind(Stall)
	cfg.MaxStall = 50 * time.Millisecond
	cfg.Logger = slog.New(logs)
	s := listen(t, up, cfg)

	start := time.Now()
	resp, err := post(context.Background(), newClient(t), s.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want EOF", resp.Status)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
	if waited := time.Since(start); waited < cfg.MaxStall {
		t.Fatalf("hung up after %v, before MaxStall %v", waited, cfg.MaxStall)
	}
	if got := logs.waitFor(t, "chaos: stall ended")["reason"]; got != "max stall elapsed" {
		t.Fatalf("stall ended because %q, want max stall elapsed", got)
	}
}

// TestStallEndsOnClose: Close does not wait out a stall.
func TestStallEndsOnClose(t *testing.T) {
	up := newUpstream(t, nil)
	logs := make(records, 16)
	cfg := oneKind(Stall)
	cfg.MaxStall = time.Hour
	cfg.Logger = slog.New(logs)
	s := listen(t, up, cfg)

	errc := make(chan error, 1)
	go func() {
		resp, err := post(context.Background(), newClient(t), s.URL)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	logs.waitFor(t, "chaos: injected fault")
	closeServer(t, s)
	if err := <-errc; err == nil {
		t.Fatal("client got a response from a stalled exchange")
	}
	if got := logs.waitFor(t, "chaos: stall ended")["reason"]; got != "proxy closed" {
		t.Fatalf("stall ended because %q, want proxy closed", got)
	}
}

// TestPartialBodyCutsTheBodyInHalf: status and headers arrive with the
// whole body's length, then half the body, then unexpected EOF.
func TestPartialBodyCutsTheBodyInHalf(t *testing.T) {
	whole := bytes.Repeat([]byte("0123456789"), 101) // 1010 bytes
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(whole)
	})
	s := listen(t, up, oneKind(PartialBody))

	resp, err := post(context.Background(), newClient(t), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("got %s with %v, want the upstream's 201 and headers", resp.Status, resp.Header)
	}
	if resp.ContentLength != int64(len(whole)) {
		t.Fatalf("Content-Length %d, want %d", resp.ContentLength, len(whole))
	}
	got, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading the body: %v, want io.ErrUnexpectedEOF", err)
	}
	if !bytes.Equal(got, whole[:505]) {
		t.Fatalf("read %d bytes, want the first 505 of the upstream body", len(got))
	}
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, Faults: map[Kind]int{PartialBody: 1}})
}

// TestPartialBodyOfAnEmptyBodyRelaysNothing: no prefix is shorter than an
// empty body, so the client sees EOF before any response.
func TestPartialBodyOfAnEmptyBodyRelaysNothing(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	s := listen(t, up, oneKind(PartialBody))

	resp, err := post(context.Background(), newClient(t), s.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want EOF before any response", resp.Status)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream received %d requests, want 1", n)
	}
}

// TestRefusalsForwardNothingAndSayWhenToRetry: 429 and 503 carry exactly
// the configured Retry-After, and the upstream sees nothing.
func TestRefusalsForwardNothingAndSayWhenToRetry(t *testing.T) {
	for _, tc := range []struct {
		kind       Kind
		retryAfter time.Duration
		status     int
		header     string
	}{
		{TooManyRequests, 0, http.StatusTooManyRequests, "0"},
		{TooManyRequests, 3 * time.Second, http.StatusTooManyRequests, "3"},
		{Unavailable, 0, http.StatusServiceUnavailable, "0"},
		{Unavailable, 2 * time.Minute, http.StatusServiceUnavailable, "120"},
	} {
		t.Run(tc.kind.String()+"/"+tc.header, func(t *testing.T) {
			up := newUpstream(t, nil)
			cfg := oneKind(tc.kind)
			cfg.RetryAfter = tc.retryAfter
			s := listen(t, up, cfg)

			resp, err := post(context.Background(), newClient(t), s.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Values("Retry-After"); len(got) != 1 || got[0] != tc.header {
				t.Fatalf("Retry-After %q, want exactly %q", got, tc.header)
			}
			if !strings.Contains(string(body), tc.kind.String()) {
				t.Fatalf("body %q does not name the fault", body)
			}
			closeServer(t, s)
			if n := up.count(); n != 0 {
				t.Fatalf("upstream received %d requests, want 0", n)
			}
			assertCounts(t, s.Counts(), Counts{Requests: 1, Faults: map[Kind]int{tc.kind: 1}})
		})
	}
}

// closeServer closes s, failing the test on error. The cleanup registered
// by listen closes it again, which is allowed.
func closeServer(t *testing.T, s *Server) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// assertCounts fails the test unless got equals want field by field;
// got.Upstreams is compared only when want.Upstreams is set.
func assertCounts(t *testing.T, got, want Counts) {
	t.Helper()
	if want.Faults == nil {
		want.Faults = map[Kind]int{}
	}
	if want.Upstreams == nil { // the test looks at the totals only
		got.Upstreams = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
}

// TestInFlightAnswersWhileTheUpstreamStillWorks (S4.9): the upstream has the
// request and has not answered; the client gets the configured in-flight
// answer with Retry-After; then the proxy hangs up on the upstream.
func TestInFlightAnswersWhileTheUpstreamStillWorks(t *testing.T) {
	started, gone := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // the proxy hangs up; the upstream never answers
		close(gone)
	})
	logs := make(records, 16)
	cfg := Config{Rates: map[Kind]float64{InFlight: 1}, RetryAfter: 2 * time.Second, KeyHeader: "Cko-Idempotency-Key",
		InFlight: Reply{Status: http.StatusAlreadyReported, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"in":"flight"}`)},
		Logger:   slog.New(logs)}
	s := listen(t, up, cfg)

	req, err := http.NewRequest(http.MethodPost, s.URL+"/payments", strings.NewReader(`{"amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cko-Idempotency-Key", "k-1")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAlreadyReported || string(body) != `{"in":"flight"}` ||
		resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %v %q (%v), want the in-flight answer", resp.StatusCode, resp.Header, body, err)
	}
	<-started
	<-gone
	if attrs := logs.waitFor(t, "chaos: injected fault"); attrs["kind"] != "in-flight" || attrs["idempotency_key"] != "k-1" {
		t.Fatalf("logged %v, want the in-flight fault and the key from Cko-Idempotency-Key", attrs)
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, Faults: map[Kind]int{InFlight: 1}})
}

// TestInFlightDefaultsTo409AndIsNoDefaultKind: without an answer the
// in-flight fault answers 409; Rate alone never injects it.
func TestInFlightDefaultsTo409AndIsNoDefaultKind(t *testing.T) {
	up := newUpstream(t, nil)
	s := listen(t, up, oneKind(InFlight))
	resp, err := post(context.Background(), newClient(t), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") != "0" {
		t.Fatalf("got %d %v, want 409 with Retry-After: 0", resp.StatusCode, resp.Header)
	}
	if slices.Contains(AllKinds(), InFlight) {
		t.Fatal("AllKinds lists InFlight, whose answer depends on the upstream")
	}
	if k, err := ParseKind("In-Flight"); err != nil || k != InFlight {
		t.Fatalf(`ParseKind("In-Flight") = %v, %v`, k, err)
	}
}
