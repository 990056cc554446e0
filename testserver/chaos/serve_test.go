package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCloseStopsServing: afterwards nothing listens on the URL, and Close
// may be called again, also concurrently.
func TestCloseStopsServing(t *testing.T) {
	up := newUpstream(t, nil)
	s := listen(t, up, Config{})
	c := newClient(t)
	resp, err := post(context.Background(), c, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	resp, err = post(context.Background(), c, s.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s after Close", resp.Status)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("got %v after Close, want connection refused", err)
	}
}

// TestCloseDoesNotWaitForASlowUpstream: the client's connection is closed,
// which ends the upstream exchange.
func TestCloseDoesNotWaitForASlowUpstream(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	})
	t.Cleanup(func() { close(release) }) // before the upstream closes: cleanups run last first
	s := listen(t, up, Config{})

	errc := make(chan error, 1)
	go func() {
		resp, err := post(context.Background(), newClient(t), s.URL)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	closeServer(t, s)
	if err := <-errc; err == nil {
		t.Fatal("client got a response although the upstream never answered")
	}
	// The exchange ended because the proxy closed, not because the upstream
	// failed: it is not an upstream error.
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1})
}

// TestAClosedProxyRefusesRequests with 503 and refuses to serve.
func TestAClosedProxyRefusesRequests(t *testing.T) {
	p, err := New(Config{Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/charges", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	assertCounts(t, p.Counts(), Counts{Requests: 1})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Close: %v, want http.ErrServerClosed", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after Close left the listener open: %v", err)
	}
}

// TestServeRunsOnTheCallersListener until Close.
func TestServeRunsOnTheCallersListener(t *testing.T) {
	up := newUpstream(t, nil)
	p, err := New(Config{Upstream: up.target(t), Rate: 1, Kinds: []Kind{Reset}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()

	_, err = post(context.Background(), newClient(t), "http://"+ln.Addr().String())
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want ECONNRESET", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

// TestAProxyMountedInAnotherServerInjectsFaults: the Proxy is an ordinary
// http.Handler; faults that hang up work in any HTTP/1 server.
func TestAProxyMountedInAnotherServerInjectsFaults(t *testing.T) {
	up := newUpstream(t, nil)
	p, err := New(Config{Upstream: up.target(t), Rate: 1, Kinds: []Kind{DropAfterCommit}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	defer p.Close() // before front.Close: no handler may still be running then

	_, err = post(context.Background(), newClient(t), front.URL)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
	if up.count() != 1 {
		t.Fatalf("upstream received %d requests, want 1", up.count())
	}
}

// TestKeepAliveResendsAreCountedAsRequests pins what the package doc says:
// net/http's Transport resends a request with an Idempotency-Key whose
// reused connection broke before any response, so the proxy sees (and
// faults) two requests where the client's code sent one.
func TestKeepAliveResendsAreCountedAsRequests(t *testing.T) {
	up := newUpstream(t, nil)
	cfg := oneKind(DropAfterCommit)
	cfg.Match = func(r *http.Request) bool { return r.URL.Path == "/charges" }
	s := listen(t, up, cfg)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	resp, err := post(context.Background(), c, s.URL+"/warm-up") // leaves an idle connection
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := post(context.Background(), c, s.URL); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), Counts{Requests: 3, Forwarded: 3, Faults: map[Kind]int{DropAfterCommit: 2}})
}

// TestCloseClosesTheOwnedTransportsConnections: the upstream sees the
// proxy's pooled connection close when the proxy closes, not when the
// upstream itself shuts down.
func TestCloseClosesTheOwnedTransportsConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	up.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateClosed {
			closed <- struct{}{}
		}
	}
	up.Start()
	defer up.Close()
	target, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen(Config{Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := post(context.Background(), newClient(t), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case <-closed:
		t.Fatal("the proxy's upstream connection closed while the proxy was open")
	default:
	}
	closeServer(t, s)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy's upstream connection is still open 10s after Close")
	}
}
