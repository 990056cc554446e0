package idem_test

// A foreign server: one that keeps none of the reference server's habits.
// The client's rules are promised for any server, so these tests speak
// https, answer 409 with an Idempotent-Replayed other than "true", and
// redirect to origins that differ from the request's in one component
// only; their callers set a key header of their own, as vendor SDKs do.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

// hop is one request as the client's transport sent it: each redirect the
// client follows is a hop of its own.
type hop struct {
	Method, URL, Host string
	Keys              []string // the values of Idempotency-Key
}

// foreign is an https test server answering with handle, and a transport
// that records every hop and dials the server whatever host and port a
// hop names, so that redirects may name any origin and still arrive.
type foreign struct {
	srv  *httptest.Server
	tr   *http.Transport
	mu   sync.Mutex
	hops []hop
}

func newForeign(t *testing.T, handle http.HandlerFunc) *foreign {
	t.Helper()
	f := &foreign{srv: httptest.NewTLSServer(handle)}
	t.Cleanup(f.srv.Close)
	f.tr = f.srv.Client().Transport.(*http.Transport).Clone()
	addr := f.srv.Listener.Addr().String()
	f.tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	// The test certificate names example.com: verify every host against it.
	f.tr.TLSClientConfig = f.tr.TLSClientConfig.Clone()
	f.tr.TLSClientConfig.ServerName = "example.com"
	t.Cleanup(f.tr.CloseIdleConnections)
	return f
}

// RoundTrip records the hop and sends it.
func (f *foreign) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.hops = append(f.hops, hop{r.Method, r.URL.String(), r.Host, r.Header.Values("Idempotency-Key")})
	f.mu.Unlock()
	return f.tr.RoundTrip(r)
}

// sent returns the hops so far and forgets them.
func (f *foreign) sent() []hop {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hops
	f.hops = nil
	return h
}

// port is the server's port.
func (f *foreign) port() string {
	_, p, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	return p
}

// client is a Client sending through f, with quick retries.
func (f *foreign) client(t *testing.T, cfg idem.Config) *idem.Client {
	t.Helper()
	cfg.HTTPClient = &http.Client{Transport: f}
	return newClient(t, fast(cfg))
}

// C13.1, C13.5: over https, a 307 is followed only to the request's own
// origin; a Location that differs in the scheme alone (same host, same
// port), the host alone, or the port alone ends the operation rejected
// without a second hop. An absent port is the scheme's default, and host
// names compare without case. The Host header stands for the URL's host
// and port. Each case runs through Do and through StandardClient.
func TestForeignRedirectOrigins(t *testing.T) {
	var f *foreign
	f = newForeign(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/landing" {
			io.WriteString(w, "landed")
			return
		}
		loc := strings.ReplaceAll(r.URL.Query().Get("to"), "PORT", f.port())
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	base := "https://127.0.0.1:" + f.port()
	for _, tc := range []struct {
		name, url, host, location string
		followed                  bool
	}{
		{"same origin", base, "", "https://127.0.0.1:PORT/landing", true},
		{"relative", base, "", "/landing", true},
		{"another scheme, same host and port", base, "", "http://127.0.0.1:PORT/landing", false},
		{"another host, same scheme and port", base, "", "https://localhost:PORT/landing", false},
		{"another port, same scheme and host", base, "", "https://127.0.0.1:1/landing", false},
		{"the default port written out", "https://api.test", "", "https://api.test:443/landing", true},
		{"the default port of another scheme", "https://api.test", "", "http://api.test/landing", false},
		{"a host in another case", "https://api.test", "", "https://API.Test/landing", true},
		{"the Host header's host", base, "api.test", "https://api.test:443/landing", true},
		{"the URL's host under another Host header", base, "api.test", "https://127.0.0.1:PORT/landing", false},
		{"relative under a Host header", base, "api.test", "/landing", true},
	} {
		for _, form := range []string{"Do", "StandardClient"} {
			t.Run(tc.name+"/"+form, func(t *testing.T) {
				c := f.client(t, idem.Config{Journal: openJournal(t, filepath.Join(t.TempDir(), "j"))})
				req := post(t, idem.WithOperation(context.Background(), "op"), tc.url+"/moved?to="+tc.location, "x")
				req.Host = tc.host
				var status int
				var err error
				if form == "Do" {
					var resp *http.Response
					resp, err = c.Do("op", req)
					status = statusOf(t, resp, err)
				} else {
					var resp *http.Response
					resp, err = c.StandardClient().Do(req)
					if err != nil {
						t.Fatalf("StandardClient: %v", err)
					}
					status = resp.StatusCode
					resp.Body.Close()
				}
				hops := f.sent()
				if len(hops) == 0 || len(hops[0].Keys) != 1 {
					t.Fatalf("hops %v: want the first to carry one key", hops)
				}
				key := hops[0].Keys[0]
				if tc.followed {
					if status != 200 || (form == "Do" && err != nil) || len(hops) != 2 || hops[1].Method != "POST" ||
						!strings.HasSuffix(hops[1].URL, "/landing") || fmt.Sprint(hops[1].Keys) != "["+key+"]" {
						t.Fatalf("status %d, %v, hops %v: want the 307 followed once, a POST under the same key", status, err, hops)
					}
					return
				}
				if status != 307 || len(hops) != 1 || (form == "Do" && !errors.Is(err, idem.ErrRejected)) {
					t.Fatalf("status %d, %v, hops %v: want the 307 itself, rejected, and no second hop", status, err, hops)
				}
			})
		}
	}
}

// statusOf returns the status a Do ended with, as its response or its
// *OutcomeError says, and closes the response.
func statusOf(t *testing.T, resp *http.Response, err error) int {
	t.Helper()
	if err == nil {
		resp.Body.Close()
		return resp.StatusCode
	}
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) {
		t.Fatalf("Do: %v, want a response or an *OutcomeError", err)
	}
	return oe.Status
}

// C7.3, C9.2: a 409 with a body whose Idempotent-Replayed is "false", or
// absent, or anything but "true", is not the server's stored answer: it is
// retried, and attempts running out on it end unknown, the operation
// pending, never done or rejected, through Do as through StandardClient.
// The next Do resumes it under the same key.
func TestForeignConflictNotMarkedReplayedIsRetried(t *testing.T) {
	for _, replayed := range []string{"false", "", "yes", "1"} {
		t.Run("Idempotent-Replayed "+fmt.Sprintf("%q", replayed), func(t *testing.T) {
			var mu sync.Mutex
			answer := http.StatusConflict
			f := newForeign(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				code := answer
				mu.Unlock()
				if code == http.StatusConflict && replayed != "" {
					w.Header().Set("Idempotent-Replayed", replayed)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				io.WriteString(w, `{"title":"conflict"}`)
			})
			j := openJournal(t, filepath.Join(t.TempDir(), "j"))
			defer j.Close()
			c := f.client(t, idem.Config{Journal: j, MaxAttempts: 3})
			url := "https://127.0.0.1:" + f.port() + "/charges"

			_, err := c.Do("do", post(t, context.Background(), url, "x"))
			var oe *idem.OutcomeError
			if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Status != 409 ||
				string(oe.Body) != `{"title":"conflict"}` || !errors.Is(err, idem.ErrAttemptsExhausted) {
				t.Fatalf("Do: %v, want unknown after attempts exhausted on 409s", err)
			}
			resp, err := c.StandardClient().Do(post(t, idem.WithOperation(context.Background(), "standard"), url, "x"))
			if !errors.Is(err, idem.ErrUnknown) {
				if err == nil {
					resp.Body.Close()
				}
				t.Fatalf("StandardClient: %v, want an unknown outcome, not the 409 as an answer", err)
			}
			hops := f.sent()
			if len(hops) != 6 {
				t.Fatalf("%d hops, want 3 attempts of each operation", len(hops))
			}
			for _, id := range []string{"do", "standard"} {
				if op, _ := lookup(j, id); op.State != journal.StatePending {
					t.Fatalf("%s: journal holds %v, want pending", id, op.State)
				}
			}

			mu.Lock()
			answer = http.StatusCreated
			mu.Unlock()
			resp, err = c.Do("do", post(t, context.Background(), url, "x"))
			if err != nil || resp.StatusCode != 201 {
				t.Fatalf("resumed: %v, want the 201", err)
			}
			resp.Body.Close()
			op, _ := lookup(j, "do")
			if resumed := f.sent(); len(resumed) != 1 || fmt.Sprint(resumed[0].Keys) != "["+op.Key+"]" ||
				fmt.Sprint(hops[0].Keys) != "["+op.Key+"]" || op.State != journal.StateDone {
				t.Fatalf("resumed under %v, first sent under %v, journal %v %s; want one key throughout, done",
					resumed, hops[0].Keys, op.State, op.Key)
			}
		})
	}
}

// C1.3: a caller that sets the key header itself, as vendor SDKs do, with
// Set, with Add, or by writing the header map under a name in another
// case, still sends exactly one key value: the journaled one, on every
// attempt, through Do and through StandardClient, in the first process and
// after a restart. The caller's request keeps its own header.
func TestForeignCallerSetsItsOwnKeyHeader(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keyHeader string // Dialect.KeyHeader
		set       func(h http.Header)
	}{
		{"Set", "", func(h http.Header) { h.Set("Idempotency-Key", "vendor-1") }},
		{"Add twice", "", func(h http.Header) { h.Add("Idempotency-Key", "vendor-1"); h.Add("Idempotency-Key", "vendor-2") }},
		{"map in lower case", "", func(h http.Header) { h["idempotency-key"] = []string{"vendor-1"} }},
		{"map in upper case", "", func(h http.Header) { h["IDEMPOTENCY-KEY"] = []string{"vendor-1"} }},
		{"a KeyHeader in lower case", "x-request-key", func(h http.Header) { h.Set("X-Request-Key", "vendor-1") }},
		{"a KeyHeader, the map in its case", "x-request-key", func(h http.Header) { h["x-request-key"] = []string{"vendor-1"} }},
	} {
		for _, form := range []string{"Do", "StandardClient"} {
			t.Run(tc.name+"/"+form, func(t *testing.T) {
				want := tc.keyHeader
				if want == "" {
					want = "Idempotency-Key"
				}
				var mu sync.Mutex
				var wire [][]string
				fails := 1
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					defer mu.Unlock()
					wire = append(wire, r.Header.Values(want))
					if len(wire) <= fails {
						w.WriteHeader(503)
					}
				}))
				defer srv.Close()
				path := filepath.Join(t.TempDir(), "j")
				send := func(j *filejournal.Journal, maxAttempts int) error {
					c := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.Dialect{KeyHeader: tc.keyHeader}, MaxAttempts: maxAttempts}))
					req := post(t, idem.WithOperation(context.Background(), "op"), srv.URL, "x")
					tc.set(req.Header)
					before := fmt.Sprint(req.Header)
					var resp *http.Response
					var err error
					if form == "Do" {
						resp, err = c.Do("op", req)
					} else {
						resp, err = c.StandardClient().Do(req)
					}
					if err == nil {
						resp.Body.Close()
					}
					if after := fmt.Sprint(req.Header); after != before {
						t.Fatalf("the caller's header changed from %s to %s", before, after)
					}
					return err
				}
				j := openJournal(t, path)
				if err := send(j, 1); !errors.Is(err, idem.ErrUnknown) { // 503: pending
					t.Fatalf("first process: %v, want unknown", err)
				}
				j.Close()
				fails = 2 // the restarted process's first attempt fails too
				j = openJournal(t, path)
				defer j.Close()
				if err := send(j, 2); err != nil {
					t.Fatalf("after a restart: %v", err)
				}
				op, _ := lookup(j, "op")
				mu.Lock()
				defer mu.Unlock()
				if len(wire) != 3 {
					t.Fatalf("%d attempts, want 3", len(wire))
				}
				for i, keys := range wire {
					if len(keys) != 1 || keys[0] != op.Key {
						t.Fatalf("attempt %d sent %s %q, want the journaled key %s alone", i+1, want, keys, op.Key)
					}
				}
			})
		}
	}
}
