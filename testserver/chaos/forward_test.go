package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// exchange is what a client sees of one response.
type exchange struct {
	Status int
	Header http.Header
	Body   []byte
}

// send performs a request with everything a client of idem sends, and some
// awkward extras, and returns the response as seen.
func send(t *testing.T, c *http.Client, base string) exchange {
	t.Helper()
	body := []byte("{\"customer\":\"c1\",\"amount\":1200}\x00\xff\r\n")
	req, err := http.NewRequest(http.MethodPost, base+"/v1/charges?expand=customer&a=1;b=2&q=%20x&empty=", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "5b0c8d1e-7f0a-4d7e-9f43-2f6a1c0e9b11")
	req.Header.Set("X-Client-ID", "client-1")
	req.Header.Set("Authorization", "Bearer tok_123")
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header["X-Multi"] = []string{"one", "two"}
	req.Header.Set("User-Agent", "idem-test/1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return exchange{resp.StatusCode, resp.Header, got}
}

// TestUnfaultedRequestsPassByteIdentical: the upstream receives through
// the proxy exactly what it receives directly, and the client receives
// through the proxy exactly what it receives directly.
func TestUnfaultedRequestsPassByteIdentical(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT") // not the clock: both paths must agree
		h.Set("Content-Type", "application/json")
		h.Set("Idempotent-Replayed", "true")
		h["Set-Cookie"] = []string{"a=1", "b=2"}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, upstreamBody)
	})
	s := listen(t, up, Config{Seed: 1}) // no rates: nothing faulted
	// Keep-alive on: a client without it sends "Connection: close", which
	// as a hop-by-hop header is rightly not forwarded.
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	direct := send(t, c, up.URL)
	proxied := send(t, c, s.URL)
	if !reflect.DeepEqual(proxied, direct) {
		t.Errorf("response through the proxy\n%+v\ndiffers from the direct one\n%+v", proxied, direct)
	}
	got := up.requests()
	if len(got) != 2 {
		t.Fatalf("upstream received %d requests, want 2", len(got))
	}
	if !reflect.DeepEqual(got[1], got[0]) {
		t.Errorf("upstream received through the proxy\n%+v\nbut directly\n%+v", got[1], got[0])
	}
	assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1})
}

// TestUpstreamPathAndQueryArePrefixed: an upstream URL with a path and a
// query is joined with the request's.
func TestUpstreamPathAndQueryArePrefixed(t *testing.T) {
	up := newUpstream(t, nil)
	target := up.target(t)
	target.Path, target.RawQuery = "/api", "tenant=t1"
	s, err := Listen(Config{Upstream: target})
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer(t, s)
	resp, err := post(context.Background(), newClient(t), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := up.requests()[0].RequestURI; got != "/api/charges?tenant=t1" {
		t.Fatalf("upstream saw %q, want /api/charges?tenant=t1", got)
	}
}

// TestMatchDecidesWhichRequestsMayBeFaulted covers the default (mutating
// methods only), Every, and a custom matcher.
func TestMatchDecidesWhichRequestsMayBeFaulted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match func(*http.Request) bool
		want  map[string]int // "METHOD path" -> status
	}{
		{"default", nil, map[string]int{
			"GET /stats": 201, "HEAD /stats": 201, "OPTIONS /charges": 201,
			"POST /charges": 429, "PUT /charges": 429, "DELETE /charges": 429, "PATCH /charges": 429,
		}},
		{"every", Every, map[string]int{"GET /stats": 429, "POST /charges": 429}},
		{"custom", func(r *http.Request) bool { return r.URL.Path == "/charges" }, map[string]int{
			"GET /stats": 201, "POST /stats": 201, "GET /charges": 429, "POST /charges": 429,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil)
			cfg := oneKind(TooManyRequests)
			cfg.Match = tc.match
			s := listen(t, up, cfg)
			c := newClient(t)
			faulted := 0
			for call, want := range tc.want {
				method, path, _ := strings.Cut(call, " ")
				req, err := http.NewRequest(method, s.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("%s: status %d, want %d", call, resp.StatusCode, want)
				}
				if want == 429 {
					faulted++
				}
			}
			n := len(tc.want)
			assertCounts(t, s.Counts(), Counts{
				Requests:  n,
				Forwarded: n - faulted,
				Faults:    map[Kind]int{TooManyRequests: faulted},
			})
		})
	}
}

// TestUnreachableUpstreamIsA502NotAFault: when the upstream cannot be
// reached, the client gets 502 whether or not a fault was picked, and only
// an upstream error is counted.
func TestUnreachableUpstreamIsA502NotAFault(t *testing.T) {
	for _, cfg := range []Config{{}, oneKind(DropAfterCommit), oneKind(PartialBody)} {
		up := newUpstream(t, nil)
		s := listen(t, up, cfg)
		up.Close()

		resp, err := post(context.Background(), newClient(t), s.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%v: status %d, want 502", cfg.Kinds, resp.StatusCode)
		}
		assertCounts(t, s.Counts(), Counts{Requests: 1, Forwarded: 1, UpstreamErrors: 1})
	}
}

// outcome names what a client saw, in the terms of the fault that caused
// it: the fault's kind, or noFault for the upstream's own 201.
func outcome(t *testing.T, resp *http.Response, err error) Kind {
	t.Helper()
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return Reset
	case errors.Is(err, io.EOF):
		return DropAfterCommit
	case err != nil:
		t.Fatalf("unexpected error %v", err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return PartialBody
	case err != nil:
		t.Fatalf("unexpected error reading body: %v", err)
	}
	switch resp.StatusCode {
	case http.StatusCreated:
		return noFault
	case http.StatusBadGateway:
		return BadGatewayAfterCommit
	case http.StatusTooManyRequests:
		return TooManyRequests
	case http.StatusServiceUnavailable:
		return Unavailable
	}
	t.Fatalf("unexpected status %d", resp.StatusCode)
	return noFault
}

// TestClientsSeeTheFaultsTheSeedPicks: over 300 requests, each client sees
// exactly the fault a chooser with the same seed picks for that position,
// so a run is reproduced by its seed; and the counts add up to it.
func TestClientsSeeTheFaultsTheSeedPicks(t *testing.T) {
	cfg := Config{
		Seed: 2024, Rate: 0.6,
		Kinds: []Kind{Reset, DropAfterCommit, BadGatewayAfterCommit, PartialBody, TooManyRequests, Unavailable},
	}
	const n = 300
	want := draws(cfg, n)
	up := newUpstream(t, nil)
	s := listen(t, up, cfg)
	c := newClient(t)

	wantCounts := Counts{Requests: n, Faults: map[Kind]int{}}
	for i, w := range want {
		resp, err := post(context.Background(), c, s.URL)
		if got := outcome(t, resp, err); got != w {
			t.Fatalf("request %d: client saw %v, want %v", i, got, w)
		}
		if w == noFault || forwards(w) {
			wantCounts.Forwarded++
		}
		if w != noFault {
			wantCounts.Faults[w]++
		}
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), wantCounts)
	if up.count() != wantCounts.Forwarded {
		t.Fatalf("upstream received %d requests, the proxy counted %d forwarded", up.count(), wantCounts.Forwarded)
	}
}

// forwards reports whether a fault of kind k sends the request upstream
// before it strikes.
func forwards(k Kind) bool {
	switch k {
	case DropAfterCommit, BadGatewayAfterCommit, Stall, PartialBody:
		return true
	}
	return false
}
