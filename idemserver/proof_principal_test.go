package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/journal"
)

// L4.1: two principals using one key for one request are two requests:
// the handler runs for each, each gets its own answer (the second never
// sees the first's body), each retry replays its own, another body from
// a third is not a mismatch with the first's, and the sweep hands Forget
// each principal's key apart.
func TestL4PrincipalsNeverShareAReplay(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		var swept []idemserver.Swept
		cfg := e.config()
		cfg.Principal = accountOf
		cfg.Forget = func(ctx context.Context, tx *sql.Tx, s []idemserver.Swept) error {
			swept = append(swept, s...)
			return nil
		}
		keys := e.keys(cfg)
		var principals []string
		h := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			p, _, _ := idemserver.Key(r.Context())
			principals = append(principals, p)
			return false
		}}
		route := keys.Handle(idemserver.Route{}, h)
		alice := serve(route, of(req("POST", "/things", "same", "shared"), "alice"))
		bob := serve(route, of(req("POST", "/things", "same", "shared"), "bob"))
		wantStatus(t, "alice", alice, http.StatusCreated)
		wantStatus(t, "bob", bob, http.StatusCreated)
		if bob.Header().Get(idemserver.HeaderReplayed) != "" || bob.Body.String() == alice.Body.String() || strings.Contains(bob.Body.String(), `"run":1`) {
			t.Fatalf("bob got alice's answer: %q (alice %q)", bob.Body.String(), alice.Body.String())
		}
		if n := h.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times for two principals, want 2", n)
		}
		if len(principals) != 2 || principals[0] != "account:alice" || principals[1] != "account:bob" {
			t.Errorf("principals %q: want alice's and bob's accounts", principals)
		}
		wantReplay(t, "alice again", serve(route, of(req("POST", "/things", "same", "shared"), "alice")), alice)
		wantReplay(t, "bob again", serve(route, of(req("POST", "/things", "same", "shared"), "bob")), bob)
		carol := serve(route, of(req("POST", "/things", "other body", "shared"), "carol"))
		wantStatus(t, "carol, another body", carol, http.StatusCreated)
		if strings.Contains(carol.Body.String(), `"run":1`) || strings.Contains(carol.Body.String(), `"run":2`) {
			t.Errorf("carol got another's answer: %q", carol.Body.String())
		}
		if b := e.count("things"); b != 3 {
			t.Errorf("%d business rows, want 3", b)
		}

		// The sweeper tells the three apart too.
		e.clock.Add(idemserver.DefaultRetention + time.Second)
		if n, err := keys.Sweep(context.Background()); err != nil || n != 3 {
			t.Fatalf("Sweep: %d, %v; want 3", n, err)
		}
		seen := map[string]bool{}
		for _, sw := range swept {
			if sw.Key != "shared" {
				t.Errorf("Forget got key %q, want shared", sw.Key)
			}
			seen[sw.Principal] = true
		}
		if len(swept) != 3 || len(seen) != 3 || !seen["account:alice"] || !seen["account:bob"] || !seen["account:carol"] {
			t.Errorf("Forget got %v, want the key under alice's, bob's and carol's accounts", swept)
		}
	})
}

// of sets the account a request comes from (headerAccount), as a
// service's authentication would establish it.
func of(r *http.Request, account string) *http.Request {
	r.Header.Set(headerAccount, account)
	return r
}

// L4.2: a principal that cannot be told gets 401 (an error wrapping
// ErrUnauthorized) or 400 (any other error), before any look-up; Key
// reports the principal Config.Principal chose.
func TestL4PrincipalErrorsAreRefused(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		custom := e.keys(idemserver.Config{Table: "custom_keys", Principal: func(r *http.Request) (string, error) {
			switch v := r.Header.Get("X-Client"); v {
			case "":
				return "", fmt.Errorf("no client: %w", idemserver.ErrUnauthorized)
			case "bad":
				return "", errors.New("malformed client id")
			default:
				return "client:" + v, nil
			}
		}})
		var got string
		ch := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			got, _, _ = idemserver.Key(r.Context())
			return false
		}}
		cr := custom.Handle(idemserver.Route{}, ch)
		wantProblem(t, "ErrUnauthorized", serve(cr, req("POST", "/things", "{}", "k")), http.StatusUnauthorized)
		bad := req("POST", "/things", "{}", "k")
		bad.Header.Set("X-Client", "bad")
		wantProblem(t, "another error", serve(cr, bad), http.StatusBadRequest)
		if n := ch.runs.Load(); n != 0 {
			t.Errorf("the handler ran %d times for refused principals", n)
		}
		if k := e.count("custom_keys"); k != 0 {
			t.Errorf("%d key rows after refused principals", k)
		}
		ok := req("POST", "/things", "{}", "k")
		ok.Header.Set("X-Client", "c1")
		wantStatus(t, "a known client", serve(cr, ok), http.StatusCreated)
		if got != "client:c1" {
			t.Errorf("Key's principal %q, want client:c1", got)
		}
	})
}

// L4.3: a key's scope does not follow the credential. Under the zero
// Config one key and one body, sent with a bearer token, then with a
// refreshed one, then with none, then with another scheme, run the
// handler once: one business row, one key row, the first answer
// replayed to the three others, Key reporting the principal "" to the
// handler. Under a Principal by account, an account's second token
// replays its first token's answer.
func TestL4ARefreshedCredentialKeepsItsKeys(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		var principal string
		h := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			principal, _, _ = idemserver.Key(r.Context())
			return false
		}}
		route := e.keys(e.config()).Handle(idemserver.Route{}, h)
		first := serve(route, as(req("POST", "/things", "one order", "k1"), "token-0900"))
		wantStatus(t, "bearer token-0900", first, http.StatusCreated)
		if principal != "" {
			t.Errorf("Key's principal %q under the zero Config, want \"\"", principal)
		}
		wantReplay(t, "the refreshed bearer token-0905", serve(route, as(req("POST", "/things", "one order", "k1"), "token-0905")), first)
		wantReplay(t, "no Authorization", serve(route, req("POST", "/things", "one order", "k1")), first)
		basic := req("POST", "/things", "one order", "k1")
		basic.Header.Set("Authorization", "Basic YWxpY2U6c2VjcmV0")
		wantReplay(t, "Authorization: Basic", serve(route, basic), first)
		if n, b, k := h.runs.Load(), e.count("things"), e.keyRows(); n != 1 || b != 1 || k != 1 {
			t.Fatalf("%d runs, %d business rows, %d key rows for one key under four credentials; want 1, 1, 1", n, b, k)
		}

		byAccount := e.keys(idemserver.Config{Table: "account_keys", Principal: accountOf}).Handle(idemserver.Route{}, h)
		mine := serve(byAccount, as(of(req("POST", "/things", "another order", "k1"), "alice"), "token-0900"))
		wantStatus(t, "alice, token-0900", mine, http.StatusCreated)
		wantReplay(t, "alice, token-0905", serve(byAccount, as(of(req("POST", "/things", "another order", "k1"), "alice"), "token-0905")), mine)
		if n, b := h.runs.Load(), e.count("things"); n != 2 || b != 2 {
			t.Fatalf("%d runs, %d business rows after alice's two tokens; want 2, 2", n, b)
		}
	})
}

// L4.3 end to end: a client's operation whose first attempt ended unknown
// (the server committed it, and its answer was lost) is resumed by a
// restarted client, under the same key but with a new bearer token, and
// gets the stored answer: one order, one run.
func TestL4AClientResumingWithANewTokenIsReplayed(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		h := &inserter{e: e}
		srv := httptest.NewServer(e.keys(e.config()).Handle(idemserver.Route{}, h))
		t.Cleanup(srv.Close)
		path := filepath.Join(t.TempDir(), "journal")

		j, err := filejournal.Open(path, filejournal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lost := &token{value: "token-0900", drop: true}
		_, err = endToEndClient(t, j, lost).Do("order-301", clientReq(t, srv.URL+"/things", "order 301"))
		if !errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("the first run: %v, want unknown", err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		if n, b := h.runs.Load(), e.count("things"); n != 1 || b != 1 {
			t.Fatalf("%d runs, %d business rows after the lost answer; want the order committed once", n, b)
		}

		j, err = filejournal.Open(path, filejournal.Options{}) // the restarted job
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		fresh := &token{value: "token-0905"}
		resp, err := endToEndClient(t, j, fresh).Do("order-301", clientReq(t, srv.URL+"/things", "order 301"))
		if err != nil {
			t.Fatalf("the resumed run: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemserver.HeaderReplayed) != "true" || !strings.Contains(string(body), `"run":1`) {
			t.Fatalf("the resumed run: %d %q, replayed %q; want the first run's 201, replayed", resp.StatusCode, body, resp.Header.Get(idemserver.HeaderReplayed))
		}
		if n, b := h.runs.Load(), e.count("things"); n != 1 || b != 1 || fresh.sent.Load() != 1 || lost.key() != fresh.key() {
			t.Fatalf("%d runs, %d business rows, %d attempts, keys %q then %q; want one order, one attempt, one key",
				n, b, fresh.sent.Load(), lost.key(), fresh.key())
		}
	})
}

// token is a transport that sends each attempt with Authorization:
// Bearer value, and with drop loses each answer on the way back, as a
// connection reset after the server committed.
type token struct {
	value string
	drop  bool
	sent  atomic.Int64
	mu    sync.Mutex
	last  string // the key of the last attempt
}

func (tk *token) RoundTrip(r *http.Request) (*http.Response, error) {
	tk.sent.Add(1)
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tk.value)
	tk.mu.Lock()
	tk.last = r.Header.Get(idemserver.HeaderIdempotencyKey)
	tk.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && tk.drop {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (the answer dropped by the test)")
	}
	return resp, err
}

func (tk *token) key() string {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.last
}

// clientReq is a client's POST of body to url.
func clientReq(t *testing.T, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// endToEndClient is an idem client on j over transport, with one attempt
// per Do.
func endToEndClient(t *testing.T, j journal.Journal, transport http.RoundTripper) *idem.Client {
	t.Helper()
	c, err := idem.New(idem.Config{Journal: j, HTTPClient: &http.Client{Transport: transport}, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
