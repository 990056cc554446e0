package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
)

// fakeClock is a Config.Now that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// dbPath returns a fresh database file in the test's temporary directory.
func dbPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "idem.db")
}

// stores are the databases the server runs on, each with a function that
// gives a test a fresh one.
var stores = []struct {
	name  string
	newDB func(testing.TB) string
}{
	{"sqlite", dbPath},
	{"postgres", pgtest.NewDatabase},
}

// onEachStore runs f as one subtest per store; newDB gives it a fresh
// database of that store.
func onEachStore(t *testing.T, f func(t *testing.T, newDB func(testing.TB) string)) {
	t.Helper()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { f(t, st.newDB) })
	}
}

// start starts a server on a real SQLite file unless cfg names one.
func start(t testing.TB, cfg Config) *Instance {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = dbPath(t)
	}
	return Start(t, cfg)
}

// reply is a response read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// req describes one request; headers are set as given, and Content-Type
// defaults to application/json when there is a body.
type req struct {
	method string
	path   string
	key    string // Idempotency-Key; "" sends none
	client string // X-Client-ID; "" sends none
	header map[string]string
	body   string
}

func (r req) build(t testing.TB, base string) *http.Request {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(context.Background(), r.method, base+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		hr.Header.Set(HeaderIdempotencyKey, r.key)
	}
	if r.client != "" {
		hr.Header.Set(HeaderClientID, r.client)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	return hr
}

// try sends r and returns the reply or the transport error.
func try(t testing.TB, in *Instance, r req) (reply, error) {
	t.Helper()
	return do(in.Client(), r.build(t, in.URL))
}

// send sends r and fails the test on a transport error.
func send(t testing.TB, in *Instance, r req) reply {
	t.Helper()
	rep, err := try(t, in, r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return rep
}

// sendAsync sends r from another goroutine; a transport error fails the
// test (without stopping it) and delivers a zero reply.
func sendAsync(t testing.TB, in *Instance, r req) <-chan reply {
	hr := r.build(t, in.URL)
	c := make(chan reply, 1)
	go func() {
		rep, err := do(in.Client(), hr)
		if err != nil {
			t.Errorf("%s %s: %v", r.method, r.path, err)
		}
		c <- rep
	}()
	return c
}

func do(c *http.Client, hr *http.Request) (reply, error) {
	resp, err := c.Do(hr)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// wantStatus fails unless rep has the status.
func wantStatus(t testing.TB, rep reply, status int) {
	t.Helper()
	if rep.status != status {
		t.Fatalf("status %d, want %d; body %s", rep.status, status, rep.body)
	}
}

// wantProblem fails unless rep is a problem document of the status and type.
func wantProblem(t testing.TB, rep reply, status int, typ string) Problem {
	t.Helper()
	wantStatus(t, rep, status)
	if ct := rep.header.Get("Content-Type"); ct != ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %q", ct, ContentTypeProblem)
	}
	var p Problem
	dec := json.NewDecoder(bytes.NewReader(rep.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", rep.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s, status %d, a title and a detail", p, typ, status)
	}
	return p
}

// decode decodes rep's JSON body into a T.
func decode[T any](t testing.TB, rep reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rep.body, &v); err != nil {
		t.Fatalf("decoding %s: %v", rep.body, err)
	}
	return v
}

// stats reads the server's stats directly.
func stats(t testing.TB, in *Instance) Stats {
	t.Helper()
	st, err := in.Server.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stock sets an item's stock through the API.
func stock(t testing.TB, in *Instance, item string, n int) {
	t.Helper()
	wantStatus(t, send(t, in, req{method: "PUT", path: "/inventory/" + item, key: "stock-" + item + "-" + itoa(n),
		body: `{"available": ` + itoa(n) + `}`}), http.StatusOK)
}

// available reads an item's stock through the API.
func available(t testing.TB, in *Instance, item string) int64 {
	t.Helper()
	rep := send(t, in, req{method: "GET", path: "/inventory/" + item})
	wantStatus(t, rep, http.StatusOK)
	return decode[Item](t, rep).Available
}

func itoa(n int) string { return strconv.Itoa(n) }

// waitFor polls cond until it holds or five seconds pass: for conditions
// reached by another goroutine with no event to wait on.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *Gateway) setBeforeCapture(f func(context.Context)) { g.beforeCapture.Store(&f) }

func (s *Server) setBeforeFinish(f func(context.Context)) { s.beforeFinish.Store(&f) }

// The layer's key table in the terms of the old one: the recovery point
// of key row k, and its downstream key for the gateway step.
const (
	recoveryPointSQL = `CASE WHEN k.finished = 1 THEN 'finished'
		WHEN EXISTS (SELECT 1 FROM idempotency_keys_steps st WHERE st.key_id = k.id) THEN 'gateway_called'
		ELSE 'started' END`
	downstreamKeySQL = `('idem-' || k.seed || '-` + downstreamStep + `')`
)

// castText is the SQL of a recovery point's result (a blob) as text.
func castText(s *Server) string {
	if s.db.flavor == flavorPostgres {
		return "convert_from(st.result, 'UTF8')"
	}
	return "CAST(st.result AS TEXT)"
}

// checkConsistent checks the invariants every fault must preserve:
// no effect without its key's stored answer, no capture without its charge
// unless its key row is still unfinished, stock never negative.
func checkConsistent(t testing.TB, s *Server) {
	t.Helper()
	ctx := context.Background()
	var n int64
	for _, q := range []struct{ what, sql string }{
		{"reservations whose key has no stored 201", `
			SELECT COUNT(*) FROM reservations r WHERE r.idempotency_key IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM idempotency_keys k WHERE k.principal = r.client_id AND k.idem_key = r.idempotency_key
				AND k.finished = 1 AND k.response_status = 201)`},
		{"charges whose key has no stored 201", `
			SELECT COUNT(*) FROM charges c WHERE c.idempotency_key IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM idempotency_keys k WHERE k.principal = c.client_id AND k.idem_key = c.idempotency_key
				AND k.finished = 1 AND k.response_status = 201)`},
		{"stored 201s for reservations without their reservation", `
			SELECT COUNT(*) FROM idempotency_keys k WHERE k.response_header LIKE '%"/reservations/%' AND k.response_status = 201
			AND NOT EXISTS (SELECT 1 FROM reservations r WHERE r.client_id = k.principal AND r.idempotency_key = k.idem_key)`},
		{"stored 201s for charges without their charge", `
			SELECT COUNT(*) FROM idempotency_keys k WHERE k.response_header LIKE '%"/charges/%' AND k.response_status = 201
			AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.client_id = k.principal AND c.idempotency_key = k.idem_key)`},
		{"finished keys without an answer", `
			SELECT COUNT(*) FROM idempotency_keys WHERE finished = 1
			AND (response_status IS NULL OR response_body IS NULL OR lock_token IS NOT NULL)`},
		{"charges whose gateway charge was never captured", `
			SELECT COUNT(*) FROM charges c WHERE NOT EXISTS (
				SELECT 1 FROM gateway_captures g WHERE g.charge_id = c.gateway_charge_id)`},
		{"charges not captured under their key's downstream key", `
			SELECT COUNT(*) FROM charges c JOIN idempotency_keys k ON k.principal = c.client_id AND k.idem_key = c.idempotency_key
			WHERE NOT EXISTS (SELECT 1 FROM gateway_captures g WHERE g.key = ` + downstreamKeySQL + ` AND g.charge_id = c.gateway_charge_id)`},
		// A capture whose key row is unfinished may lack its charge for now:
		// the retry that resumes the row records it. Any other capture
		// without a charge is money taken twice or taken and forgotten.
		{"captures without their charge, their key row finished or gone", `
			SELECT COUNT(*) FROM gateway_captures g
			WHERE NOT EXISTS (SELECT 1 FROM charges c WHERE c.gateway_charge_id = g.charge_id)
			AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE ` + downstreamKeySQL + ` = g.key AND k.finished = 0)`},
		{"items with negative stock", `SELECT COUNT(*) FROM inventory WHERE available < 0`},
	} {
		if err := s.db.read.QueryRowContext(ctx, q.sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		if n != 0 {
			t.Errorf("%d %s", n, q.what)
		}
	}
}
