package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/filejournal"
)

// uuidV4 matches the canonical form of a random UUID.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// seen is what the test server saw of one request.
type seen struct {
	method, path, host, key string
	header                  http.Header
	body                    []byte
}

// testServer records every request, then answers with its current handler.
type testServer struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []seen
	handler http.HandlerFunc
}

func newTestServer(t *testing.T, h http.HandlerFunc) *testServer {
	s := &testServer{handler: h}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, seen{r.Method, r.URL.Path, r.Host, r.Header.Get(keyHeader), r.Header.Clone(), body})
		h := s.handler
		s.mu.Unlock()
		w.Header()["Date"] = nil // answers must not depend on the wall clock
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *testServer) answer(h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = h
}

func (s *testServer) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.seen...)
}

// keys returns the Idempotency-Key of every request, in order.
func (s *testServer) keys() []string {
	var keys []string
	for _, r := range s.requests() {
		keys = append(keys, r.key)
	}
	return keys
}

// respond returns a handler that answers status with a JSON body.
func respond(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func journalIn(t *testing.T) string { return filepath.Join(t.TempDir(), "send.journal") }

// oneKey checks that keys are n copies of one UUID and returns it.
func oneKey(t *testing.T, keys []string, n int) string {
	t.Helper()
	if len(keys) != n {
		t.Fatalf("the server saw %d requests (keys %q), want %d", len(keys), keys, n)
	}
	for _, k := range keys {
		if k != keys[0] || !uuidV4.MatchString(k) {
			t.Fatalf("keys %q: want %d copies of one UUID", keys, n)
		}
	}
	return keys[0]
}

func TestSendDoneThenRecorded(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, `{"id":"ch_1"}`))
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "invoice-42", "-H", "Content-Type: application/json",
		"-d", `{"amount":1200}`, "-i", srv.URL + "/charges"}
	r := runCLI(t, args...)
	want := "HTTP/1.1 201 Created\r\nContent-Length: 13\r\nContent-Type: application/json\r\n\r\n" + `{"id":"ch_1"}`
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	reqs := srv.requests()
	key := oneKey(t, srv.keys(), 1)
	if g := reqs[0]; g.method != http.MethodPost || g.path != "/charges" || string(g.body) != `{"amount":1200}` ||
		g.header.Get("Content-Type") != "application/json" {
		t.Errorf("the server saw %s %s %q with Content-Type %q", g.method, g.path, g.body, g.header.Get("Content-Type"))
	}

	// The same command again: the recorded answer, byte for byte, and no
	// request.
	again := runCLI(t, args...)
	if again.code != exitOK || again.stdout != r.stdout {
		t.Errorf("rerun: exit code %d, stdout %q; want 0 and %q", again.code, again.stdout, r.stdout)
	}
	if !strings.Contains(again.stderr, "operation invoice-42 was already done: this is the response recorded at ") ||
		!strings.HasSuffix(again.stderr, "; nothing was sent\n") {
		t.Errorf("rerun: stderr %q does not say the answer is the recorded one", again.stderr)
	}
	// Without -i, the body alone.
	body := runCLI(t, slicesWithout(args, "-i")...)
	if body.code != exitOK || body.stdout != `{"id":"ch_1"}` {
		t.Errorf("rerun without -i: exit code %d, stdout %q", body.code, body.stdout)
	}
	oneKey(t, srv.keys(), 1)

	// The journal holds it done under the key the server saw.
	ls := runCLI(t, "journal", "completed", "--json", path)
	var ops []operationJSON
	if err := json.Unmarshal([]byte(ls.stdout), &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].ID != "invoice-42" || ops[0].Key != key || ops[0].State != "done" || *ops[0].Status != 201 {
		t.Errorf("journal: %+v; want invoice-42 done with key %s", ops, key)
	}
}

func slicesWithout(args []string, drop string) []string {
	var out []string
	for _, a := range args {
		if a != drop {
			out = append(out, a)
		}
	}
	return out
}

func TestSendRejected(t *testing.T) {
	const problem = `{"title":"card declined"}`
	srv := newTestServer(t, respond(http.StatusUnprocessableEntity, problem))
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "invoice-7", "-d", `{"amount":1}`, srv.URL + "/charges"}
	r := runCLI(t, args...)
	key := oneKey(t, srv.keys(), 1)
	wantErr := fmt.Sprintf("idem send: rejected: the server answered 422 Unprocessable Entity and did not apply the request (operation invoice-7, key %s)\n", key)
	if r.code != exitRejected || r.stdout != problem || r.stderr != wantErr {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want %d, %q and %q", r.code, r.stdout, r.stderr, exitRejected, problem, wantErr)
	}

	again := runCLI(t, args...)
	wantErr = strings.TrimSuffix(wantErr, "\n") + "; this is the recorded answer, nothing was sent\n"
	if again.code != exitRejected || again.stdout != problem || again.stderr != wantErr {
		t.Errorf("rerun: exit code %d, stdout %q, stderr %q; want %d, %q and %q", again.code, again.stdout, again.stderr, exitRejected, problem, wantErr)
	}
	oneKey(t, srv.keys(), 1)
}

// A POST answered 301 is rejected, not followed, and the command says where
// the server points.
func TestSendRejectedRedirect(t *testing.T) {
	srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v2/charges", http.StatusMovedPermanently)
	})
	r := runCLI(t, "send", "--journal", journalIn(t), "--op", "invoice-8", "-d", `{"amount":1}`, srv.URL+"/charges")
	key := oneKey(t, srv.keys(), 1)
	want := fmt.Sprintf("idem send: rejected: the server answered 301 Moved Permanently and did not apply the request (operation invoice-8, key %s)\n"+
		"idem send: the server points to /v2/charges; an operation never follows a redirect that could apply it elsewhere or as another request: send it there under a new --op\n", key)
	if r.code != exitRejected || r.stderr != want {
		t.Fatalf("exit code %d, stderr %q; want %d and %q", r.code, r.stderr, exitRejected, want)
	}
}

func TestSendUnknownThenResumeUnderTheSameKey(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusServiceUnavailable, `{"title":"try later"}`))
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "charge-9", "--attempts", "2", "-v", "-d", `{"amount":9}`, srv.URL + "/charges"}
	r := runCLI(t, args...)
	key := oneKey(t, srv.keys(), 2)
	if r.code != exitUnknown || r.stdout != "" {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want %d and nothing on stdout", r.code, r.stdout, r.stderr, exitUnknown)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	wantPrefixes := []string{
		fmt.Sprintf("idem send: attempt 1 (key %s): status 503", key),
		fmt.Sprintf("idem send: attempt 2 (key %s): status 503", key),
		fmt.Sprintf("idem send: outcome unknown: operation charge-9, 2 attempt(s), last status 503 Service Unavailable, key %s", key),
		"idem send: last error: ",
		fmt.Sprintf("idem send: the operation stays pending in %s: rerun the same command to resume it under the same key", path),
	}
	if len(lines) != len(wantPrefixes) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(wantPrefixes), r.stderr)
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(lines[i], p) {
			t.Errorf("stderr line %d: %q, want it to start %q", i+1, lines[i], p)
		}
	}
	if !strings.Contains(lines[0], "; retrying in ") || strings.Contains(lines[1], "retrying") {
		t.Errorf("-v lines: %q", lines[:2])
	}
	pending := runCLI(t, "journal", "pending", "--json", path)
	var ops []operationJSON
	if err := json.Unmarshal([]byte(pending.stdout), &ops); err != nil || len(ops) != 1 || ops[0].Key != key {
		t.Fatalf("journal pending: %+v (%v); want charge-9 under %s", ops, err, key)
	}

	srv.answer(respond(http.StatusCreated, `{"id":"ch_9"}`))
	again := runCLI(t, args...)
	if again.code != exitOK || again.stdout != `{"id":"ch_9"}` {
		t.Fatalf("rerun: exit code %d, stdout %q, stderr %q", again.code, again.stdout, again.stderr)
	}
	if got := oneKey(t, srv.keys(), 3); got != key {
		t.Errorf("the rerun sent key %s, want %s", got, key)
	}
}

func TestSendRefusesADifferentRequestUnderTheSameOp(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, `{}`))
	path := journalIn(t)
	send := func(data, url string) result {
		return runCLI(t, "send", "--journal", path, "--op", "order-5", "-d", data, url)
	}
	if r := send(`{"qty":1}`, srv.URL+"/orders"); r.code != exitOK {
		t.Fatalf("first send: exit code %d, stderr %q", r.code, r.stderr)
	}
	r := runCLI(t, "send", "--journal", path, "--op", "order-5", "-X", "PATCH", "-d", `{"qty":1}`, srv.URL+"/orders")
	if r.code != exitRefused || !strings.HasSuffix(r.stderr, "\nidem send: operation order-5 was first sent with method POST, not PATCH; a new request needs a new --op\n") {
		t.Errorf("PATCH: exit code %d, stderr %q", r.code, r.stderr)
	}
	for _, tc := range []struct{ data, url, how string }{
		{`{"qty":2}`, srv.URL + "/orders", "with a different body"},
		{`{"qty":1}`, srv.URL + "/orders?again", "to " + srv.URL + "/orders, not " + srv.URL + "/orders?again"},
	} {
		r := send(tc.data, tc.url)
		if r.code != exitRefused || r.stdout != "" ||
			!strings.HasPrefix(r.stderr, "idem send: refused, nothing sent: ") ||
			!strings.HasSuffix(r.stderr, "\nidem send: operation order-5 was first sent "+tc.how+"; a new request needs a new --op\n") {
			t.Errorf("%s %s: exit code %d, stdout %q, stderr %q; want %d", tc.data, tc.url, r.code, r.stdout, r.stderr, exitRefused)
		}
	}
	oneKey(t, srv.keys(), 1)
}

func TestSendRefusesAnExpiredKey(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusServiceUnavailable, `{}`))
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "refund-3", "--attempts", "1", "-d", "{}", srv.URL + "/refunds"}
	if r := runAt(t, at(t0), nil, args...); r.code != exitUnknown {
		t.Fatalf("first send: exit code %d, stderr %q", r.code, r.stderr)
	}
	oneKey(t, srv.keys(), 1)
	srv.answer(respond(http.StatusCreated, `{"id":"re_3"}`))

	r := runAt(t, at(t0.Add(24*time.Hour)), nil, args...)
	if r.code != exitRefused || r.stdout != "" ||
		!strings.Contains(r.stderr, "idem send: refused, nothing sent: ") ||
		!strings.Contains(r.stderr, "the server keeps keys for 24h0m0s (recorded with the operation when it was first sent), so a resend could apply the request twice") {
		t.Errorf("a day later: exit code %d, stdout %q, stderr %q; want %d", r.code, r.stdout, r.stderr, exitRefused)
	}
	oneKey(t, srv.keys(), 1)

	// The key lifetime is the one recorded with the operation (C6.7): a
	// later --ttl 48h does not make its key usable again.
	r = runAt(t, at(t0.Add(24*time.Hour)), nil, append(args, "--ttl", "48h")...)
	if r.code != exitRefused || !strings.Contains(r.stderr, "the server keeps keys for 24h0m0s") {
		t.Errorf("with --ttl 48h: exit code %d, stdout %q, stderr %q; want %d", r.code, r.stdout, r.stderr, exitRefused)
	}
	oneKey(t, srv.keys(), 1)

	// An operation first sent with --ttl 48h, to a server that keeps keys
	// two days, is resent a day later under its key, --ttl or not.
	srv.answer(respond(http.StatusServiceUnavailable, `{}`))
	args = []string{"send", "--journal", path, "--op", "refund-4", "--attempts", "1", "-d", "{}", srv.URL + "/refunds"}
	if r := runAt(t, at(t0), nil, append(args, "--ttl", "48h")...); r.code != exitUnknown {
		t.Fatalf("first send of refund-4: exit code %d, stderr %q", r.code, r.stderr)
	}
	key := srv.keys()[1]
	srv.answer(respond(http.StatusCreated, `{"id":"re_4"}`))
	r = runAt(t, at(t0.Add(24*time.Hour)), nil, args...)
	if r.code != exitOK || r.stdout != `{"id":"re_4"}` {
		t.Errorf("refund-4 a day later: exit code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := srv.keys(); len(got) != 3 || got[2] != key {
		t.Errorf("keys %q, want refund-4 resent with its key %s", got, key)
	}
}

func TestSendBodySources(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusOK, `ok`))
	path := journalIn(t)
	file := filepath.Join(t.TempDir(), "body.bin")
	fileBody := []byte("line 1\nline 2\n\x00\xff\n")
	if err := os.WriteFile(file, fileBody, 0o600); err != nil {
		t.Fatal(err)
	}
	stdinBody := []byte("{\"from\":\"stdin\"}\n")
	for i, tc := range []struct {
		data  string
		stdin []byte
		want  []byte
	}{
		{"@" + file, nil, fileBody},
		{"@-", stdinBody, stdinBody},
		{"plain text", nil, []byte("plain text")},
		{"", nil, nil},
	} {
		r := runAt(t, time.Now, bytes.NewReader(tc.stdin), "send", "--journal", path, "--op", fmt.Sprint("op-", i), "-d", tc.data, srv.URL+"/in")
		reqs := srv.requests()
		if r.code != exitOK || len(reqs) != i+1 || !bytes.Equal(reqs[i].body, tc.want) {
			t.Errorf("-d %q: exit code %d (stderr %q), server got %q, want %q", tc.data, r.code, r.stderr, reqs[len(reqs)-1].body, tc.want)
		}
	}

	missing := filepath.Join(t.TempDir(), "missing")
	otherJournal := journalIn(t)
	r := runCLI(t, "send", "--journal", otherJournal, "--op", "x", "-d", "@"+missing, srv.URL+"/in")
	if r.code != exitFailure || !strings.HasPrefix(r.stderr, "idem send: reading the body: ") {
		t.Errorf("-d @missing: exit code %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(otherJournal); !os.IsNotExist(err) {
		t.Errorf("a send that could not read its body created its journal: %v", err)
	}
	if n := len(srv.requests()); n != 4 {
		t.Errorf("the server saw %d requests, want 4", n)
	}
}

func TestSendMethodAndHeaders(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusOK, `ok`))
	path := journalIn(t)
	r := runCLI(t, "send", "--journal", path, "--op", "put-1", "-X", "PUT",
		"-H", "X-Tag: one", "-H", "x-tag:two", "-H", "Authorization: Bearer t0k", "-H", "Host: api.example.test",
		srv.URL+"/items/1")
	if r.code != exitOK {
		t.Fatalf("exit code %d, stderr %q", r.code, r.stderr)
	}
	// No -X: POST, with or without a body.
	r = runCLI(t, "send", "--journal", path, "--op", "post-1", srv.URL+"/items")
	if r.code != exitOK {
		t.Fatalf("exit code %d, stderr %q", r.code, r.stderr)
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	put := reqs[0]
	if put.method != http.MethodPut || put.host != "api.example.test" || put.header.Get("Authorization") != "Bearer t0k" ||
		strings.Join(put.header.Values("X-Tag"), ",") != "one,two" || !uuidV4.MatchString(put.key) {
		t.Errorf("PUT: method %s, host %s, header %v", put.method, put.host, put.header)
	}
	if post := reqs[1]; post.method != http.MethodPost || len(post.body) != 0 || post.key == put.key || !uuidV4.MatchString(post.key) {
		t.Errorf("default: method %s, body %q, key %q (PUT's %q)", post.method, post.body, post.key, put.key)
	}
}

func TestSendWithoutJournal(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, `{"id":"x"}`))
	r := runCLI(t, "send", "-d", "{}", srv.URL+"/charges")
	if r.code != exitOK || r.stdout != `{"id":"x"}` ||
		!strings.HasPrefix(r.stderr, "idem send: warning: no --journal: the key lives in this process only") {
		t.Errorf("exit code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	oneKey(t, srv.keys(), 1)

	srv.answer(respond(http.StatusBadGateway, `{}`))
	r = runCLI(t, "send", "--attempts", "1", "-d", "{}", srv.URL+"/charges")
	if r.code != exitUnknown || !strings.Contains(r.stderr, "without --journal the key is lost when this process exits") {
		t.Errorf("unknown: exit code %d, stderr %q", r.code, r.stderr)
	}
}

// --key-header and --quoted-key choose how the key is sent; -H cannot set
// that header itself.
func TestSendKeyHeaderAndQuotedKey(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, "made"))
	r := runCLI(t, "send", "--key-header", "X-Op-Key", "--quoted-key", "-d", "{}", srv.URL+"/charges")
	reqs := srv.requests()
	if r.code != exitOK || len(reqs) != 1 {
		t.Fatalf("exit code %d after %d requests; stderr %q", r.code, len(reqs), r.stderr)
	}
	key, err := strconv.Unquote(reqs[0].header.Get("X-Op-Key"))
	if err != nil || !uuidV4.MatchString(key) || reqs[0].key != "" {
		t.Fatalf("X-Op-Key %q, Idempotency-Key %q; want a quoted UUID in X-Op-Key alone", reqs[0].header.Get("X-Op-Key"), reqs[0].key)
	}
	r = runCLI(t, "send", "--key-header", "X-Op-Key", "-H", "x-op-key: mine", srv.URL+"/charges")
	if r.code != exitUsage || !strings.Contains(r.stderr, "idem sets X-Op-Key itself") {
		t.Fatalf("-H setting the key header: exit code %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// A TLS server is verified unless -k says not to, or against --cacert.
func TestSendTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	if r := runCLI(t, "send", "--attempts", "1", srv.URL); r.code != exitUnknown || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("unverifiable certificate: exit code %d, stderr %q; want unknown, naming the certificate", r.code, r.stderr)
	}
	if r := runCLI(t, "send", "-k", srv.URL); r.code != exitOK {
		t.Fatalf("-k: exit code %d, stderr %q", r.code, r.stderr)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "send", "--cacert", ca, srv.URL); r.code != exitOK {
		t.Fatalf("--cacert: exit code %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, "send", "--cacert", filepath.Join(t.TempDir(), "none.pem"), srv.URL); r.code != exitFailure || !strings.Contains(r.stderr, "--cacert") {
		t.Fatalf("missing --cacert file: exit code %d, stderr %q", r.code, r.stderr)
	}
}

// Without --wait a held journal fails at once; with it, send waits for the
// holder to let go.
func TestSendWaitsForAHeldJournal(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, "made"))
	path := journalIn(t)
	held, err := filejournal.Open(path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"send", "--journal", path, "--op", "charge-1", srv.URL}
	if r := runCLI(t, args...); r.code != exitJournal || !strings.Contains(r.stderr, "locked") {
		t.Fatalf("held journal without --wait: exit code %d, stderr %q", r.code, r.stderr)
	}
	const holdFor = 300 * time.Millisecond
	start := time.Now()
	time.AfterFunc(holdFor, func() { held.Close() })
	r := runCLI(t, append([]string{"send", "--wait", "1m"}, args[1:]...)...)
	if r.code != exitOK || time.Since(start) < holdFor || len(srv.requests()) != 1 {
		t.Fatalf("--wait: exit code %d after %v, %d requests; stderr %q", r.code, time.Since(start), len(srv.requests()), r.stderr)
	}
}

// --dialect sends the key where the named API wants it (D1: Square's in the
// body, PayPal's in its header) and reads its answers (D2: PicPay's 208 is
// in flight, so unknown; Primer's 409 already applied, so done, and said
// so); with a journal, a rerun sends the same key in the
// same place. An unknown name is a usage error that lists the names.
func TestSendDialect(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusServiceUnavailable, `{}`))
	path := journalIn(t)
	for range 2 {
		r := runCLI(t, "send", "--dialect", "square", "--journal", path, "--op", "pay-1", "--attempts", "1", "-d", `{"amount": 100}`, srv.URL+"/v2/payments")
		if r.code != exitUnknown {
			t.Fatalf("square: exit code %d, stderr %q; want unknown", r.code, r.stderr)
		}
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("square: %d requests, want 2", len(reqs))
	}
	var keys []string
	for _, req := range reqs {
		var body struct {
			Key    string `json:"idempotency_key"`
			Amount int    `json:"amount"`
		}
		if err := json.Unmarshal(req.body, &body); err != nil || body.Amount != 100 || req.key != "" {
			t.Fatalf("square: body %q, Idempotency-Key %q; want the key in the body only", req.body, req.key)
		}
		keys = append(keys, body.Key)
	}
	oneKey(t, keys, 2)

	srv = newTestServer(t, respond(http.StatusCreated, `{"id":"ORDER-1"}`))
	if r := runCLI(t, "send", "--dialect", "PayPal", "-d", "{}", srv.URL+"/v2/checkout/orders"); r.code != exitOK {
		t.Fatalf("paypal: exit code %d, stderr %q", r.code, r.stderr)
	}
	if reqs := srv.requests(); len(reqs) != 1 || !uuidV4.MatchString(reqs[0].header.Get("PayPal-Request-Id")) || reqs[0].key != "" {
		t.Fatalf("paypal: requests %+v; want one with the key in PayPal-Request-Id only", reqs)
	}

	srv = newTestServer(t, respond(http.StatusAlreadyReported, `{}`))
	if r := runCLI(t, "send", "--dialect", "picpay", "--attempts", "2", "-d", "{}", srv.URL); r.code != exitUnknown || len(srv.requests()) != 2 {
		t.Fatalf("picpay 208: exit code %d after %d requests; want unknown after 2", r.code, len(srv.requests()))
	}

	srv = newTestServer(t, respond(http.StatusConflict, `{"error":{"errorId":"IdempotencyKeyAlreadyExists","paymentId":"gg3r3tsa3"}}`))
	if r := runCLI(t, "send", "--dialect", "primer", "-d", "{}", srv.URL); r.code != exitOK || !strings.Contains(r.stderr, "it had already applied") || !strings.Contains(r.stdout, "gg3r3tsa3") {
		t.Fatalf("primer already applied: exit code %d, stdout %q, stderr %q; want done, saying so", r.code, r.stdout, r.stderr)
	}

	r := runCLI(t, "send", "--dialect", "nonesuch", srv.URL)
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown dialect "nonesuch"`) || !strings.Contains(r.stderr, "stripe, adyen, paypal, square") {
		t.Fatalf("unknown dialect: exit code %d, stderr %q; want a usage error listing the names", r.code, r.stderr)
	}
	r = runCLI(t, "send", "--dialect", "square", "--key-header", "X-K", "-d", "{}", srv.URL)
	if r.code != exitUsage || !strings.Contains(r.stderr, "body field") {
		t.Fatalf("--key-header with a body dialect: exit code %d, stderr %q; want a usage error", r.code, r.stderr)
	}
	r = runCLI(t, "send", "--dialect", "square", "-d", "[1]", srv.URL)
	if r.code == exitOK || !strings.Contains(r.stderr, "JSON object") {
		t.Fatalf("a body that is not an object: exit code %d, stderr %q", r.code, r.stderr)
	}
}

// --journal-must-exist refuses a missing journal file: nothing is sent and
// nothing created. A journal a first run created is used as without it.
func TestSendJournalMustExist(t *testing.T) {
	srv := newTestServer(t, respond(http.StatusCreated, `{"id":"ch_1"}`))
	path := journalIn(t)
	args := []string{"send", "--journal", path, "--op", "invoice-42", "-d", `{"amount":1200}`, srv.URL + "/charges"}
	mustExist := append([]string{"send", "--journal-must-exist"}, args[1:]...)
	r := runCLI(t, mustExist...)
	if r.code != exitPath || r.stdout != "" || r.stderr != "idem send: no journal at "+path+"\n" {
		t.Fatalf("missing journal: exit code %d, stdout %q, stderr %q; want %d and no journal", r.code, r.stdout, r.stderr, exitPath)
	}
	if entries, err := os.ReadDir(filepath.Dir(path)); err != nil || len(entries) != 0 || len(srv.requests()) != 0 {
		t.Fatalf("missing journal: %d requests sent, directory holds %v (%v); want none", len(srv.requests()), entries, err)
	}

	if r := runCLI(t, args...); r.code != exitOK { // the first run creates it
		t.Fatalf("first run: exit code %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, mustExist...)
	if r.code != exitOK || r.stdout != `{"id":"ch_1"}` || !strings.Contains(r.stderr, "was already done") {
		t.Fatalf("existing journal: exit code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	oneKey(t, srv.keys(), 1)

	for _, bad := range [][]string{
		{"send", "--journal-must-exist", "-d", "{}", srv.URL},
		{"send", "--journal-must-exist", "--journal", "postgres://localhost/db", "--op", "x", srv.URL},
	} {
		if r := runCLI(t, bad...); r.code != exitUsage || !strings.Contains(r.stderr, "--journal-must-exist needs --journal with the path of a journal file") {
			t.Errorf("%q: exit code %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
}
