package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
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
		alice := serve(route, as(req("POST", "/things", "same", "shared"), "alice-token"))
		bob := serve(route, as(req("POST", "/things", "same", "shared"), "bob-token"))
		wantStatus(t, "alice", alice, http.StatusCreated)
		wantStatus(t, "bob", bob, http.StatusCreated)
		if bob.Header().Get(idemserver.HeaderReplayed) != "" || bob.Body.String() == alice.Body.String() || strings.Contains(bob.Body.String(), `"run":1`) {
			t.Fatalf("bob got alice's answer: %q (alice %q)", bob.Body.String(), alice.Body.String())
		}
		if n := h.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times for two principals, want 2", n)
		}
		if len(principals) != 2 || principals[0] == principals[1] || !strings.HasPrefix(principals[0], "bearer:") || strings.Contains(principals[0], "alice") {
			t.Errorf("principals %q: want two hashed bearer principals", principals)
		}
		wantReplay(t, "alice again", serve(route, as(req("POST", "/things", "same", "shared"), "alice-token")), alice)
		wantReplay(t, "bob again", serve(route, as(req("POST", "/things", "same", "shared"), "bob-token")), bob)
		anon := serve(route, req("POST", "/things", "other body", "shared"))
		wantStatus(t, "anonymous, another body", anon, http.StatusCreated)
		if strings.Contains(anon.Body.String(), `"run":1`) || strings.Contains(anon.Body.String(), `"run":2`) {
			t.Errorf("the anonymous client got another's answer: %q", anon.Body.String())
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
		if len(swept) != 3 || len(seen) != 3 || !seen[idemserver.AnonymousPrincipal] || !seen[principals[0]] || !seen[principals[1]] {
			t.Errorf("Forget got %v, want the key under alice's, bob's and the anonymous principal", swept)
		}
	})
}

// L4.2: a principal that cannot be told gets 401 (an error wrapping
// ErrUnauthorized, or another Authorization scheme under BearerPrincipal)
// or 400 (any other error), before any look-up; Key reports the
// principal Config.Principal chose.
func TestL4PrincipalErrorsAreRefused(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		h := &inserter{e: e}
		def := e.keys(e.config()).Handle(idemserver.Route{}, h)
		r := req("POST", "/things", "{}", "k")
		r.Header.Set("Authorization", "Basic YWxpY2U6c2VjcmV0")
		wantProblem(t, "Basic under BearerPrincipal", serve(def, r), http.StatusUnauthorized)

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
		if n, m := h.runs.Load(), ch.runs.Load(); n != 0 || m != 0 {
			t.Errorf("handlers ran %d, %d times for refused principals", n, m)
		}
		if k := e.keyRows() + e.count("custom_keys"); k != 0 {
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
