package faultsuite

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The wire sees keys by operation, quoted or bare, and an exchange is open
// until its response body has been read to its end; one whose client gave
// up does not count.
func TestWireRecordsKeysAndOverlaps(t *testing.T) {
	rig := newWireRig(t)
	wire, hc, srv, send, arrived, release := rig.wire, rig.hc, rig.srv, rig.send, rig.arrived, rig.release
	read := func(resp *http.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}

	read(send(context.Background(), "/", "k1", "a"))
	read(send(context.Background(), "/", "k1", "a")) // after the first ended: no overlap
	read(send(context.Background(), "/", "", "a"))   // a mutation without a key
	get, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	read(hc.Do(get)) // a read needs none
	read(send(context.Background(), "/", `"k2"`, "b"))
	read(send(context.Background(), "/", "k3", "b"))

	// A client that gives up while the server still works does not count;
	// one that still waits does.
	gaveUp, cancel := context.WithCancel(context.Background())
	go send(gaveUp, "/slow", "k4", "c")
	<-arrived // the wire opened the exchange before sending it
	cancel()
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		resp, err := send(context.Background(), "/slow", "k4", "c")
		if err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
	}()
	<-arrived
	read(send(context.Background(), "/", "k4", "c")) // sent while the second still waits
	close(release)
	<-waiting

	v := wire.View()
	if got := strings.Join(v.Keys["a"], ","); got != "k1" {
		t.Errorf("keys of a: %s, want k1", got)
	}
	if got := strings.Join(v.Keys["b"], ","); got != "k2,k3" {
		t.Errorf("keys of b: %s, want k2,k3 (the quoted one unquoted)", got)
	}
	if v.Requests != 7 || v.Quoted != 1 || v.Bare != 6 || v.Keyless != 1 {
		t.Errorf("requests %d, quoted %d, bare %d, keyless %d; want 7, 1, 6, 1", v.Requests, v.Quoted, v.Bare, v.Keyless)
	}
	if len(v.Overlaps) != 1 || !strings.Contains(v.Overlaps[0], "key k4") {
		t.Errorf("overlaps %q, want one, of k4", v.Overlaps)
	}
}

// A request sent again after its first sender's process was killed is no
// overlap, even if the proxy has not yet seen that process's connection
// close.
func TestWireForgivesTheRequestsOfAKilledClient(t *testing.T) {
	rig := newWireRig(t)
	wire, arrived, release := rig.wire, rig.arrived, rig.release
	send := func() {
		if resp, err := rig.send(context.Background(), "/slow", "k1", "a"); err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); send() }() // the process about to be killed
	<-arrived
	wire.ClientKilled()
	go func() { <-arrived; close(release) }()
	send() // the next process
	<-done
	if v := wire.View(); len(v.Overlaps) != 0 || v.Requests != 2 {
		t.Fatalf("overlaps %q after %d requests; want none after 2", v.Overlaps, v.Requests)
	}
}

// wireRig is a server behind a Wire's transport. A request to /slow is
// announced on arrived and held until release is closed.
type wireRig struct {
	wire             *Wire
	srv              *httptest.Server
	hc               *http.Client
	arrived, release chan struct{}
}

func newWireRig(t *testing.T) *wireRig {
	r := &wireRig{wire: NewWire(), arrived: make(chan struct{}), release: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/slow" {
			r.arrived <- struct{}{}
			<-r.release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(r.srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r.hc = &http.Client{Transport: r.wire.Transport(tr)}
	return r
}

// send posts to path with the key (none when "") and a body naming ref.
func (r *wireRig) send(ctx context.Context, path, key, ref string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+path, strings.NewReader(`{"reference":"`+ref+`"}`))
	req.Header.Set("Idempotency-Key", key)
	return r.hc.Do(req)
}

// A Wire for a body-key dialect reads the key from the body's member, and
// counts a request that carries an Idempotency-Key header as well.
func TestWireFindsTheKeyWhereTheDialectPutsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	wire := NewWireFor("", "idempotency_key")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: wire.Transport(tr)}
	send := func(body, header string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if header != "" {
			req.Header.Set("Idempotency-Key", header)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	send(`{"idempotency_key":"k1","reference":"a"}`, "")
	send(`{"reference":"a","idempotency_key":"k1"}`, "k1")
	send(`{"reference":"a"}`, "k2") // the key in the header only: keyless
	v := wire.View()
	if got := strings.Join(v.Keys["a"], ","); got != "k1" || v.Requests != 2 || v.Misplaced != 1 || v.Keyless != 1 {
		t.Fatalf("keys of a %q, requests %d, misplaced %d, keyless %d; want k1, 2, 1, 1", got, v.Requests, v.Misplaced, v.Keyless)
	}
}
