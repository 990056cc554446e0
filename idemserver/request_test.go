package idemserver_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// The IETF draft's refusals before any look-up: 400 for a missing or
// malformed key, nothing run, nothing stored.
func TestKeyRefusals(t *testing.T) {
	onBothStores(t, idemserver.Config{MaxKeyLength: 8}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		for _, c := range []struct {
			name, key string
			typ       string
		}{
			{"missing", "", "missing-idempotency-key"},
			{"too long", "123456789", "invalid-idempotency-key"},
			{"bad char", "a b", "invalid-idempotency-key"},
			{"open quote", `"abc`, "invalid-idempotency-key"},
			{"empty quoted", `""`, "invalid-idempotency-key"},
		} {
			got := do(t, srv, "POST", "/items", c.key, "a")
			if got.status != http.StatusBadRequest || !strings.Contains(got.body, c.typ) {
				t.Errorf("%s: %+v, want 400 %s", c.name, got, c.typ)
			}
		}
		if h.Runs() != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("a refused request ran")
		}
		if s := e.keys.Stats(); s.Invalid != 5 {
			t.Errorf("Invalid = %d, want 5", s.Invalid)
		}
	})
}

// A bare key and the same key as an sf-string are one key.
func TestQuotedKeyIsTheBareKey(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		do(t, srv, "POST", "/items", "abc-1", "a")
		if got := do(t, srv, "POST", "/items", `"abc-1"`, "a"); got.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("quoted key not replayed: %+v", got)
		}
		if h.Runs() != 1 {
			t.Fatal("ran twice")
		}
	})
}

// An optional route passes a request without a key through unkeyed, its
// writes still in Tx, nothing stored.
func TestOptionalRoutePassesUnkeyedRequests(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{Optional: true}, h)
		if got := do(t, srv, "POST", "/items", "", "a"); got.status != http.StatusCreated {
			t.Fatalf("%+v", got)
		}
		if got := do(t, srv, "POST", "/items", "", "b"); got.status != http.StatusCreated {
			t.Fatalf("%+v", got)
		}
		if e.count("items") != 2 || e.count("idempotency_keys") != 0 {
			t.Fatalf("%d items, %d keys; want 2, 0", e.count("items"), e.count("idempotency_keys"))
		}
		if s := e.keys.Stats(); s.Unkeyed != 2 {
			t.Errorf("Unkeyed = %d", s.Unkeyed)
		}
	})
}

// Keys are scoped by principal: the same key from two accounts is two
// requests, and neither reads the other's answer (L4).
func TestKeysAreScopedByPrincipal(t *testing.T) {
	onBothStores(t, idemserver.Config{Principal: accountOf}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		a := do(t, srv, "POST", "/items", "k", "a", headerAccount, "alice")
		b := do(t, srv, "POST", "/items", "k", "b", headerAccount, "bob")
		if a.status != http.StatusCreated || b.status != http.StatusCreated || b.header.Get(idemserver.HeaderReplayed) != "" {
			t.Fatalf("alice %+v, bob %+v", a, b)
		}
		again := do(t, srv, "POST", "/items", "k", "b", headerAccount, "bob")
		if again.body != `{"id":"b"}` || again.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("bob's replay %+v", again)
		}
		if h.Runs() != 2 {
			t.Fatalf("ran %d times, want 2", h.Runs())
		}
	})
}

// headerAccount names the account a test's request comes from, as a
// service's authentication would establish it.
const headerAccount = "X-Account"

// accountOf is a Config.Principal by account: the account of
// headerAccount, "account:" and its name.
func accountOf(r *http.Request) (string, error) {
	a := r.Header.Get(headerAccount)
	if a == "" {
		return "", fmt.Errorf("no account: %w", idemserver.ErrUnauthorized)
	}
	return "account:" + a, nil
}

// A Principal that fails without ErrUnauthorized answers 400.
func TestPrincipalErrors(t *testing.T) {
	cfg := idemserver.Config{Principal: func(r *http.Request) (string, error) {
		if r.Header.Get("X-Tenant") == "" {
			return "", errors.New("no tenant")
		}
		return r.Header.Get("X-Tenant"), nil
	}}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		if got := do(t, srv, "POST", "/items", "k", "a"); got.status != http.StatusBadRequest || !strings.Contains(got.body, "no tenant") {
			t.Fatalf("%+v", got)
		}
		if got := do(t, srv, "POST", "/items", "k", "a", "X-Tenant", "t1"); got.status != http.StatusCreated {
			t.Fatalf("%+v", got)
		}
	})
}

// A body over MaxBodyBytes gets 413 and nothing is looked up.
func TestBodyTooLarge(t *testing.T) {
	onBothStores(t, idemserver.Config{MaxBodyBytes: 4}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		if got := do(t, srv, "POST", "/items", "k", "12345"); got.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("%+v", got)
		}
		if h.Runs() != 0 {
			t.Fatal("ran")
		}
	})
}

// With KeyField the key comes from the JSON body, and neither the
// fingerprint nor the handler sees it.
func TestKeyInBody(t *testing.T) {
	onBothStores(t, idemserver.Config{KeyField: "request_id"}, func(t *testing.T, e *env) {
		var seen []string
		var mu sync.Mutex
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			seen = append(seen, string(b))
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		}))
		do(t, srv, "POST", "/x", "", `{"request_id":"r1","amount":5}`)
		// The key's member removed, both bodies are {"amount":5}: one request.
		if got := do(t, srv, "POST", "/x", "", `{"amount":5,"request_id":"r1"}`); got.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("same body without its key not replayed: %+v", got)
		}
		if got := do(t, srv, "POST", "/x", "", `{"amount":5}`); got.status != http.StatusBadRequest {
			t.Fatalf("no key: %+v", got)
		}
		if got := do(t, srv, "POST", "/x", "", `[1]`); got.status != http.StatusBadRequest {
			t.Fatalf("not an object: %+v", got)
		}
		if len(seen) != 1 || seen[0] != `{"amount":5}` {
			t.Fatalf("handler saw %q, want one body without the key", seen)
		}
	})
}

// Answers write refusals and replays in another API's words.
func TestAnswersSpeakAnotherAPI(t *testing.T) {
	say := func(code int, what string) func(w http.ResponseWriter, r *http.Request, detail string) {
		return func(w http.ResponseWriter, r *http.Request, detail string) {
			w.WriteHeader(code)
			fmt.Fprint(w, what)
		}
	}
	cfg := idemserver.Config{
		KeyHeader: "X-Request-Id",
		Answers: idemserver.Answers{
			MissingKey: say(412, "missing"),
			Mismatch:   say(409, "mismatch"),
			Replay: func(w http.ResponseWriter, r *http.Request, stored idemserver.Response) {
				w.Header().Set("X-Trace", stored.Header.Get("X-Trace"))
				w.WriteHeader(200)
				fmt.Fprintf(w, "replay of %d", stored.Status)
			},
			StoredHeaders: []string{"x-trace"},
		},
	}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Trace", "t-1")
			w.WriteHeader(http.StatusAccepted)
		}))
		if got := do(t, srv, "POST", "/x", "", "a"); got.status != 412 || got.body != "missing" {
			t.Errorf("missing: %+v", got)
		}
		do(t, srv, "POST", "/x", "", "a", "X-Request-Id", "k")
		if got := do(t, srv, "POST", "/x", "", "b", "X-Request-Id", "k"); got.status != 409 || got.body != "mismatch" {
			t.Errorf("mismatch: %+v", got)
		}
		if got := do(t, srv, "POST", "/x", "", "a", "X-Request-Id", "k"); got.body != "replay of 202" || got.header.Get("X-Trace") != "t-1" {
			t.Errorf("replay: %+v", got)
		}
	})
}

// With Accepts, a body of another media type gets 415 before it is read
// or looked up.
func TestMediaTypeRefused(t *testing.T) {
	onBothStores(t, idemserver.Config{Accepts: idemserver.AcceptJSON}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		if got := do(t, srv, "POST", "/items", "k", "a", "Content-Type", "text/plain"); got.status != http.StatusUnsupportedMediaType {
			t.Fatalf("text/plain: %+v", got)
		}
		if got := do(t, srv, "POST", "/items", "k", "a", "Content-Type", "application/merge-patch+json"); got.status != http.StatusCreated {
			t.Fatalf("+json: %+v", got)
		}
		if h.Runs() != 1 {
			t.Fatalf("ran %d times", h.Runs())
		}
	})
}

// Route.Check refuses a request after its key and body are read and
// before anything is looked up: nothing runs or is stored, the key stays
// free, and a good request under it then runs. Check sees the body
// without Config.KeyField's member, as the handler does.
func TestCheckRefusesWithoutTakingTheKey(t *testing.T) {
	check := func(seen *[]string) func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		return func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			again, _ := io.ReadAll(r.Body)
			*seen = append(*seen, string(body)+"|"+string(again))
			if strings.Contains(string(body), "bad") {
				http.Error(w, "bad body", http.StatusUnprocessableEntity)
				return false
			}
			return true
		}
	}
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		var seen []string
		for _, phased := range []bool{false, true} {
			key := fmt.Sprintf("k-%v", phased)
			srv := e.keys.Handle(idemserver.Route{Phased: phased, Check: check(&seen)}, h)
			if got := do(t, srv, "POST", "/items", key, "bad"); got.status != http.StatusUnprocessableEntity || got.body != "bad body\n" {
				t.Fatalf("phased=%v refused: %+v, want Check's 422", phased, got)
			}
			if h.Runs() != 0 || e.count("idempotency_keys") != 0 {
				t.Fatalf("phased=%v: the refused request ran or was stored", phased)
			}
			if got := do(t, srv, "POST", "/items", key, "good"); got.status != http.StatusCreated || got.header.Get(idemserver.HeaderReplayed) != "" {
				t.Fatalf("phased=%v: the good request after the refusal: %+v, want it run", phased, got)
			}
			h.mu.Lock()
			h.runs = 0
			h.mu.Unlock()
			e.db.Exec(`DELETE FROM items`)
			e.db.Exec(`DELETE FROM idempotency_keys`)
		}
		if want := []string{"bad|bad", "good|good", "bad|bad", "good|good"}; fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("Check saw %q, want %q", seen, want)
		}
		if s := e.keys.Stats(); s.Invalid != 2 || s.Stored != 2 {
			t.Errorf("Invalid %d, Stored %d; want 2, 2", s.Invalid, s.Stored)
		}
	})
	onBothStores(t, idemserver.Config{KeyField: "idempotency_key"}, func(t *testing.T, e *env) {
		var seen []string
		srv := e.keys.Handle(idemserver.Route{Check: check(&seen)}, &insertItem{e: e})
		if got := do(t, srv, "POST", "/items", "", `{"idempotency_key":"k","x":"bad"}`); got.status != http.StatusUnprocessableEntity {
			t.Fatalf("refused: %+v", got)
		}
		if want := `{"x":"bad"}|{"x":"bad"}`; len(seen) != 1 || seen[0] != want {
			t.Errorf("Check saw %q, want %q", seen, want)
		}
		if e.count("idempotency_keys") != 0 {
			t.Fatal("the refused request was stored")
		}
	})
}

// Config.KeyHeader is matched whatever its case and named in refusals as
// it is spelt in the Config, not canonicalized.
func TestKeyHeaderKeepsItsSpelling(t *testing.T) {
	onBothStores(t, idemserver.Config{KeyHeader: "PayPal-Request-Id"}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		for _, c := range []struct{ name, value string }{{"missing", ""}, {"invalid", "a b"}} {
			var opts []string
			if c.value != "" {
				opts = []string{"paypal-request-id", c.value}
			}
			got := do(t, srv, "POST", "/items", "", "a", opts...)
			if got.status != http.StatusBadRequest || !strings.Contains(got.body, "the PayPal-Request-Id header") {
				t.Errorf("%s: %+v, want 400 naming the PayPal-Request-Id header", c.name, got)
			}
		}
		if got := do(t, srv, "POST", "/items", "", "a", "PAYPAL-REQUEST-ID", "k"); got.status != http.StatusCreated {
			t.Fatalf("keyed: %+v", got)
		}
		if got := do(t, srv, "POST", "/items", "", "a", "Paypal-Request-Id", "k"); got.header.Get(idemserver.HeaderReplayed) != "true" {
			t.Fatalf("retry: %+v, want a replay", got)
		}
	})
}
