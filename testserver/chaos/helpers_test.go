package chaos

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// received is one request as the upstream saw it.
type received struct {
	Method     string
	RequestURI string
	Host       string
	Header     http.Header
	Body       []byte
}

// upstream is a test server that records every request it receives and
// answers with respond.
type upstream struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

// upstreamBody is what the default upstream answers: 201 and this body.
const upstreamBody = `{"id":"ch_1","amount":1200,"currency":"usd","status":"succeeded"}`

// newUpstream starts an upstream answering with respond, or with 201 and
// upstreamBody when respond is nil. It is closed when the test ends.
func newUpstream(t *testing.T, respond http.HandlerFunc) *upstream {
	t.Helper()
	if respond == nil {
		respond = func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Upstream", "yes")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, upstreamBody)
		}
	}
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream reading body: %v", err)
		}
		u.mu.Lock()
		u.got = append(u.got, received{r.Method, r.RequestURI, r.Host, r.Header.Clone(), body})
		u.mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// count returns how many requests the upstream has received.
func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.got)
}

// requests returns the requests the upstream has received.
func (u *upstream) requests() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.got...)
}

// target returns the upstream's URL parsed.
func (u *upstream) target(t *testing.T) *url.URL {
	t.Helper()
	target, err := url.Parse(u.URL)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// listen starts a proxy to up with cfg and closes it when the test ends.
func listen(t *testing.T, up *upstream, cfg Config) *Server {
	t.Helper()
	cfg.Upstream = up.target(t)
	s, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// oneKind is a Config that injects kind into every mutating request.
func oneKind(kind Kind) Config {
	return Config{Rate: 1, Kinds: []Kind{kind}}
}

// newClient returns a client that opens a fresh connection for every
// request. With keep-alive, net/http's Transport itself silently resends a
// request carrying an Idempotency-Key whose reused connection broke, which
// would hide faults from the tests.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// post sends a charge to base+"/charges" with an Idempotency-Key.
func post(ctx context.Context, c *http.Client, base string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/charges",
		bytes.NewReader([]byte(`{"customer":"c1","amount":1200,"currency":"usd"}`)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "5b0c8d1e-7f0a-4d7e-9f43-2f6a1c0e9b11")
	req.Header.Set("X-Client-ID", "client-1")
	return c.Do(req)
}

// records is a slog.Handler that hands every record to a channel, so a test
// can wait for the proxy to report something instead of sleeping.
type records chan slog.Record

func (h records) Enabled(context.Context, slog.Level) bool { return true }
func (h records) Handle(_ context.Context, r slog.Record) error {
	h <- r.Clone()
	return nil
}
func (h records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h records) WithGroup(string) slog.Handler      { return h }

// waitFor returns the attributes of the next record with message msg,
// skipping others, or fails the test after 10 seconds.
func (h records) waitFor(t *testing.T, msg string) map[string]string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-h:
			if r.Message != msg {
				continue
			}
			attrs := make(map[string]string)
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			return attrs
		case <-deadline:
			t.Fatalf("no %q record within 10s", msg)
			return nil
		}
	}
}
