package idemserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// L1.1: a keyed route refuses a request without a key (400, handler not
// run, nothing stored); an Optional route passes it through unkeyed, with
// Tx on an atomic route, every time.
func TestL1KeyIsRequired(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		h := &inserter{e: e}
		w := serve(keys.Handle(idemserver.Route{}, h), req("POST", "/things", `{"a":1}`))
		wantProblem(t, "no key", w, http.StatusBadRequest)
		if n := h.runs.Load(); n != 0 {
			t.Errorf("handler ran %d times for a refused request", n)
		}
		if n := e.keyRows(); n != 0 {
			t.Errorf("%d key rows after a refused request", n)
		}

		var sawKey []bool
		opt := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			_, _, ok := idemserver.Key(r.Context())
			sawKey = append(sawKey, ok)
			return false
		}}
		oh := keys.Handle(idemserver.Route{Optional: true}, opt)
		for i := range 2 {
			w := serve(oh, req("POST", "/things", `{"a":1}`))
			wantStatus(t, "optional, unkeyed", w, http.StatusCreated)
			if v := w.Header().Get(idemserver.HeaderReplayed); v != "" {
				t.Errorf("unkeyed answer %d marked %s: %q", i, idemserver.HeaderReplayed, v)
			}
		}
		if n := opt.runs.Load(); n != 2 {
			t.Errorf("optional route ran its handler %d times for 2 unkeyed requests, want 2", n)
		}
		if len(sawKey) != 2 || sawKey[0] || sawKey[1] {
			t.Errorf("Key ok on unkeyed requests: %v, want [false false]", sawKey)
		}
		if n := e.keyRows(); n != 0 {
			t.Errorf("%d key rows after unkeyed requests, want 0", n)
		}
		if n := e.count("things"); n != 2 {
			t.Errorf("%d business rows after 2 unkeyed requests, want 2 (Tx committed)", n)
		}
		// A phased Optional route: Steps call their functions with no
		// downstream key, Tx commits, every time.
		var dks []string
		popt := keys.Handle(idemserver.Route{Optional: true, Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			out, err := idemserver.Step(ctx, "charge", func(ctx context.Context, dk string) ([]byte, error) {
				dks = append(dks, dk)
				return []byte("called"), nil
			})
			if err != nil || string(out) != "called" {
				http.Error(w, fmt.Sprintf("Step: %q, %v", out, err), http.StatusInternalServerError)
				return
			}
			if _, err := txOf(ctx).ExecContext(ctx, `INSERT INTO parents (id) VALUES (`+strconv.Itoa(len(dks))+`)`); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		for range 2 {
			wantStatus(t, "phased optional, unkeyed", serve(popt, req("POST", "/charges", "")), http.StatusCreated)
		}
		if len(dks) != 2 || dks[0] != "" || dks[1] != "" {
			t.Errorf("unkeyed Steps got downstream keys %q, want two empty ones", dks)
		}
		if n, k := e.count("parents"), e.keyRows(); n != 2 || k != 0 {
			t.Errorf("after two unkeyed phased requests: %d rows, %d key rows; want 2, 0", n, k)
		}

		// A malformed key on an Optional route is refused, not ignored.
		wantProblem(t, "optional, malformed key", serve(oh, req("POST", "/things", `{"a":1}`, "a b")), http.StatusBadRequest)
		if n := opt.runs.Load(); n != 2 {
			t.Errorf("optional route ran its handler for a malformed key")
		}

		// A key on an Optional route is honoured.
		first := serve(oh, req("POST", "/things", `{"a":1}`, "opt-1"))
		wantStatus(t, "optional, keyed", first, http.StatusCreated)
		wantReplay(t, "optional, keyed, again", serve(oh, req("POST", "/things", `{"a":1}`, "opt-1")), first)
	})
}

// L1.2: an empty, malformed, overlong or repeated key gets 400 and
// changes nothing; a key of the longest length is taken.
func TestL1MalformedKeysGet400(t *testing.T) {
	long := strings.Repeat("k", idemserver.DefaultMaxKeyLength)
	bad := []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"blank", []string{"   "}},
		{"space inside", []string{"a b"}},
		{"bare with a quote", []string{`a"b`}},
		{"unterminated sf-string", []string{`"abc`}},
		{"bad escape", []string{`"a\qb"`}},
		{"control character", []string{"a\x01b"}},
		{"non-ASCII", []string{"kéy"}},
		{"empty sf-string", []string{`""`}},
		{"overlong bare", []string{long + "k"}},
		{"overlong quoted", []string{`"` + long + `k"`}},
		{"repeated", []string{"one", "two"}},
		{"repeated equal", []string{"one", "one"}},
	}
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		h := &inserter{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		for _, c := range bad {
			w := serve(route, req("POST", "/things", "{}", c.keys...))
			wantProblem(t, c.name, w, http.StatusBadRequest)
		}
		if n := h.runs.Load(); n != 0 {
			t.Errorf("handler ran %d times for malformed keys", n)
		}
		if n := e.keyRows(); n != 0 {
			t.Errorf("%d key rows after malformed keys", n)
		}
		for _, k := range []string{long, `"` + long + `"`, `"a b \" \\ ~"`} {
			wantStatus(t, "key "+k[:min(len(k), 12)], serve(route, req("POST", "/things", "{}", k)), http.StatusCreated)
		}

		short := e.keys(idemserver.Config{MaxKeyLength: 8, Table: "short_keys"})
		sr := short.Handle(idemserver.Route{}, h)
		wantProblem(t, "9 bytes under MaxKeyLength 8", serve(sr, req("POST", "/things", "{}", "123456789")), http.StatusBadRequest)
		wantStatus(t, "8 bytes under MaxKeyLength 8", serve(sr, req("POST", "/things", "{}", "12345678")), http.StatusCreated)
	})
}

// L1.3: the sf-string spelling of a key names the same key as the bare
// one.
func TestL1QuotedAndBareKeysAreOneKey(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		h := &inserter{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		first := serve(route, req("POST", "/things", "{}", "8e03978e-40d5"))
		wantStatus(t, "bare", first, http.StatusCreated)
		wantReplay(t, "quoted", serve(route, req("POST", "/things", "{}", `"8e03978e-40d5"`)), first)
		q := serve(route, req("POST", "/things", "{}", `"ab/c=="`))
		wantStatus(t, "quoted first", q, http.StatusCreated)
		wantReplay(t, "bare after quoted", serve(route, req("POST", "/things", "{}", "ab/c==")), q)
		if n := h.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times for two keys, each spelt two ways; want 2", n)
		}
		if n := e.count("things"); n != 2 {
			t.Errorf("%d business rows, want 2", n)
		}
	})
}

// L1.4: a body over MaxBodyBytes gets 413 before any look-up; one of
// exactly MaxBodyBytes is served.
func TestL1BodiesAreBounded(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(idemserver.Config{MaxBodyBytes: 16})
		h := &inserter{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		wantProblem(t, "17 bytes", serve(route, req("POST", "/things", strings.Repeat("x", 17), "big")), http.StatusRequestEntityTooLarge)
		if n, k := h.runs.Load(), e.keyRows(); n != 0 || k != 0 {
			t.Errorf("after 413: handler ran %d times, %d key rows; want 0, 0", n, k)
		}
		// The key is still free: the same key with a body that fits is new.
		wantStatus(t, "16 bytes", serve(route, req("POST", "/things", strings.Repeat("x", 16), "big")), http.StatusCreated)
	})
}

// L1.5: an answer over MaxResponseBytes rolls the handler's writes back
// and gets 500, nothing stored, so a retry runs the handler again; one of
// exactly MaxResponseBytes is stored. On a phased route the claim is
// released with its recovery points kept.
func TestL1ResponsesAreBounded(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(idemserver.Config{MaxResponseBytes: 64})
		size := 65
		h := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(strings.Repeat("b", size)))
			return true
		}}
		route := keys.Handle(idemserver.Route{}, h)
		w := serve(route, req("POST", "/things", "{}", "resp"))
		if w.Code != http.StatusInternalServerError {
			t.Fatalf("an answer of 65 bytes over 64: status %d, want 500", w.Code)
		}
		if strings.Contains(w.Body.String(), "bbbb") {
			t.Errorf("the oversized answer was sent: %q", w.Body.String())
		}
		if k, b := e.keyRows(), e.count("things"); k != 0 || b != 0 {
			t.Fatalf("after an oversized answer: %d key rows, %d business rows; want 0, 0", k, b)
		}
		size = 64
		first := serve(route, req("POST", "/things", "{}", "resp"))
		wantStatus(t, "64 bytes", first, http.StatusCreated)
		if n := h.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2 (the retry of a rolled-back answer runs again)", n)
		}
		wantReplay(t, "64 bytes again", serve(route, req("POST", "/things", "{}", "resp")), first)
		if b := e.count("things"); b != 1 {
			t.Errorf("%d business rows, want 1", b)
		}

		// A phased route: the oversized answer releases the claim and keeps
		// the recovery points, so the retry resumes without a second capture.
		gw := newProofGateway()
		size = 65
		phased := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			capture, err := idemserver.Step(ctx, "charge", func(ctx context.Context, dk string) ([]byte, error) {
				return []byte(gw.capture(dk)), nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			p, k, _ := idemserver.Key(ctx)
			if _, err := txOf(ctx).ExecContext(ctx, e.q(`INSERT INTO things (principal, k, note) VALUES (?, ?, ?)`), p, k, string(capture)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(strings.Repeat("p", size)))
		}))
		w = serve(phased, req("POST", "/charges", "{}", "presp"))
		if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "pppp") {
			t.Fatalf("a phased answer of 65 bytes over 64: %d %q, want 500 without it", w.Code, w.Body.String())
		}
		if b := e.count("things"); b != 1 {
			t.Fatalf("%d business rows after an oversized phased answer, want 1 (rolled back)", b)
		}
		size = 64
		pf := serve(phased, req("POST", "/charges", "{}", "presp"))
		wantStatus(t, "phased, 64 bytes", pf, http.StatusCreated)
		if captures, calls := gw.state(); captures != 1 || len(calls) != 1 {
			t.Errorf("gateway: %d captures, %d calls; want 1, 1 (the recovery point kept)", captures, len(calls))
		}
		wantReplay(t, "phased, 64 bytes again", serve(phased, req("POST", "/charges", "{}", "presp")), pf)
	})
}

// L1.6: the same key for another method, path, query or body gets 422,
// each apart, whether the key's first request is finished, in flight on a
// phased route, or released after a 5xx; nothing changes and the first
// request is still replayed.
func TestL1AnotherRequestUnderTheKeyGets422(t *testing.T) {
	others := []struct{ name, method, target, body string }{
		{"method", "PUT", "/things?a=1", "x"},
		{"path", "POST", "/other?a=1", "x"},
		{"query", "POST", "/things?a=2", "x"},
		{"no query", "POST", "/things", "x"},
		{"body", "POST", "/things?a=1", "y"},
	}
	refuseAll := func(t *testing.T, e *proofEnv, route http.Handler, key, state string) {
		t.Helper()
		before := e.things()
		for _, o := range others {
			w := serve(route, req(o.method, o.target, o.body, key))
			wantProblem(t, state+", another "+o.name, w, http.StatusUnprocessableEntity)
		}
		if after := e.things(); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Errorf("%s: business rows changed by refused requests: %q -> %q", state, before, after)
		}
	}
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())

		h := &inserter{e: e}
		atomicRoute := keys.Handle(idemserver.Route{}, h)
		first := serve(atomicRoute, req("POST", "/things?a=1", "x", "k-atomic"))
		wantStatus(t, "first", first, http.StatusCreated)
		refuseAll(t, e, atomicRoute, "k-atomic", "finished atomic")
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		wantReplay(t, "the first request again", serve(atomicRoute, req("POST", "/things?a=1", "x", "k-atomic")), first)

		gw := newProofGateway()
		entered, release, open := gate(t)
		c := &charger{e: e, gw: gw, inCharge: func(ctx context.Context, dk string) {
			close(entered)
			<-release
		}}
		phased := keys.Handle(idemserver.Route{Phased: true}, c)
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(phased, req("POST", "/things?a=1", "x", "k-phased")) }()
		waitEntered(t, entered, done)
		refuseAll(t, e, phased, "k-phased", "in flight")
		open()
		pf := <-done
		wantStatus(t, "phased first", pf, http.StatusCreated)
		refuseAll(t, e, phased, "k-phased", "finished phased")
		wantReplay(t, "phased again", serve(phased, req("POST", "/things?a=1", "x", "k-phased")), pf)

		// Released: a phased request that recorded a step and answered
		// 502 keeps its row, unfinished, for its retry.
		failing := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := idemserver.Step(r.Context(), "reserve", func(ctx context.Context, dk string) ([]byte, error) {
				return []byte("reserved"), nil
			}); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			http.Error(w, "downstream down", http.StatusBadGateway)
		}))
		wantStatus(t, "released", serve(failing, req("POST", "/things?a=1", "x", "k-released")), http.StatusBadGateway)
		refuseAll(t, e, failing, "k-released", "released")
		if n := c.charges.Load(); n != 1 {
			t.Errorf("charge step ran %d times, want 1", n)
		}
	})
}

// L1.17: another request that races the first under its key gets 422,
// never the first's answer, and none of its writes stay. The first runs
// on an atomic route and holds its business row (UNIQUE per key)
// uncommitted. Its key is claimed: on PostgreSQL its key row, inserted
// before the handler ran, holds the other's insert of the key (atomic or
// phased); on SQLite its transaction holds the write lock. The other
// waits for it in the database, running nothing, finds its row and gets
// 422, whether it is atomic (answering 500 or using Fail on its business
// row, were it to run) or phased.
func TestL1AnotherRequestRacingTheKeyGets422(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		for _, other := range []string{"atomic answering 500", "atomic with Fail", "phased"} {
			t.Run(other, func(t *testing.T) {
				e := newProofEnv(t, s)
				if _, err := e.db.Exec(e.ddl(`CREATE TABLE orders (principal TEXT NOT NULL, k TEXT NOT NULL, note TEXT NOT NULL, UNIQUE (principal, k))`)); err != nil {
					t.Fatal(err)
				}
				orders := func() string {
					t.Helper()
					var notes []string
					rows, err := e.db.Query(`SELECT note FROM orders ORDER BY note`)
					if err != nil {
						t.Fatal(err)
					}
					defer rows.Close()
					for rows.Next() {
						var n string
						if err := rows.Scan(&n); err != nil {
							t.Fatal(err)
						}
						notes = append(notes, n)
					}
					if err := rows.Err(); err != nil {
						t.Fatal(err)
					}
					return strings.Join(notes, ",")
				}
				keys := e.keys(e.config())
				entered, release, open := gate(t)
				otherIn := make(chan struct{})
				var firstRuns, otherRuns atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					body, err := io.ReadAll(r.Body)
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					first := string(body) == "first"
					if first {
						firstRuns.Add(1)
					} else if otherRuns.Add(1) == 1 {
						close(otherIn)
					}
					p, k, _ := idemserver.Key(ctx)
					if _, err := txOf(ctx).ExecContext(ctx, e.q(`INSERT INTO orders (principal, k, note) VALUES (?, ?, ?)`), p, k, string(body)); err != nil {
						if other == "atomic with Fail" {
							idemserver.Fail(ctx, err)
							return
						}
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					if first && firstRuns.Load() == 1 {
						close(entered)
						<-release
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"order":%q}`, body)
				})
				route := keys.Handle(idemserver.Route{}, h)
				c := &charger{e: e, gw: newProofGateway()}
				otherRoute := route
				if other == "phased" {
					otherRoute = keys.Handle(idemserver.Route{Phased: true}, c)
				}
				firstReq := func() *http.Request { return req("POST", "/orders", "first", "race") }
				otherReq := func() *http.Request { return req("POST", "/orders", "other", "race") }

				firstDone := make(chan *httptestRecorder, 1)
				go func() { firstDone <- serve(route, firstReq()) }()
				waitEntered(t, entered, firstDone)
				otherDone := make(chan *httptestRecorder, 1)
				go func() { otherDone <- serve(otherRoute, otherReq()) }()
				e.awaitWaiting(1, otherDone)

				// The winner's request and answer, the loser's request, and
				// what each store leaves.
				var (
					winner          *httptestRecorder
					winnerRoute     = route
					winnerReq       = firstReq
					loserRoute      = otherRoute
					loserReq        = otherReq
					wantOrders      = "first"
					wantThings      = 0
					wantOtherRuns   = int64(0)
					wantChargerRuns = int64(0)
				)
				select {
				case <-otherIn:
					t.Fatal("the other ran its handler while the first held the key")
				default:
				}
				open()
				winner = <-firstDone
				wantStatus(t, "the first", winner, http.StatusCreated)
				wantProblem(t, "the other, after waiting", <-otherDone, http.StatusUnprocessableEntity)
				wantReplay(t, "the winner again", serve(winnerRoute, winnerReq()), winner)
				wantProblem(t, "the loser again", serve(loserRoute, loserReq()), http.StatusUnprocessableEntity)
				if got := orders(); got != wantOrders {
					t.Errorf("orders %q, want %q", got, wantOrders)
				}
				if got := e.count("things"); got != wantThings {
					t.Errorf("%d phased business rows, want %d", got, wantThings)
				}
				if f, o, ch := firstRuns.Load(), otherRuns.Load(), c.runs.Load(); f != 1 || o != wantOtherRuns || ch != wantChargerRuns {
					t.Errorf("runs: the first %d, the atomic other %d, the phased other %d; want 1, %d, %d", f, o, ch, wantOtherRuns, wantChargerRuns)
				}
				if n := e.keyRows(); n != 1 {
					t.Errorf("%d key rows, want 1", n)
				}
			})
		}
	})
}

// L1.7: Config.Fingerprint decides what is the same request: one that
// leaves out the query replays across queries and still refuses another
// body; it sees the method, the target with its query, and the body as
// sent.
func TestL1FingerprintIsConfigurable(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		var seen []string
		keys := e.keys(idemserver.Config{Fingerprint: func(method, target string, body []byte) []byte {
			seen = append(seen, method+" "+target+" "+string(body))
			path, _, _ := strings.Cut(target, "?")
			return idemserver.Fingerprint(method, path, body)
		}})
		h := &inserter{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		first := serve(route, req("POST", "/things?page=1", "x", "fp"))
		wantStatus(t, "first", first, http.StatusCreated)
		wantReplay(t, "another query", serve(route, req("POST", "/things?page=2", "x", "fp")), first)
		wantProblem(t, "another body", serve(route, req("POST", "/things?page=1", "y", "fp")), http.StatusUnprocessableEntity)
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		want := []string{"POST /things?page=1 x", "POST /things?page=2 x", "POST /things?page=1 y"}
		if strings.Join(seen, "|") != strings.Join(want, "|") {
			t.Errorf("Fingerprint saw %q, want %q", seen, want)
		}
	})
}

// L1.8: while a phased route's first request is in flight, the same
// request gets 409 with Retry-After (the lease's time left, in whole
// seconds rounded up),
// the handler is not entered again, and once the first finishes the
// retry is its replay.
func TestL1InFlightGets409WithRetryAfter(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		entered, release, open := gate(t)
		c := &charger{e: e, gw: newProofGateway(), inCharge: func(ctx context.Context, dk string) {
			close(entered)
			<-release
		}}
		route := keys.Handle(idemserver.Route{Phased: true}, c)
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(route, req("POST", "/charges", "x", "fly")) }()
		waitEntered(t, entered, done)
		// The lease's time left by the Keys' clock, rounded up.
		for i, c := range []struct {
			after time.Duration
			want  string
		}{{0, "10"}, {3500 * time.Millisecond, "7"}, {6 * time.Second, "1"}} {
			e.clock.Add(c.after)
			w := serve(route, req("POST", "/charges", "x", "fly"))
			wantProblem(t, "in flight", w, http.StatusConflict)
			if ra := w.Header().Get("Retry-After"); ra != c.want {
				t.Errorf("409 number %d, %v later: Retry-After %q, want %q", i, c.after, ra, c.want)
			}
		}
		if n := c.runs.Load(); n != 1 {
			t.Errorf("handler entered %d times while in flight, want 1", n)
		}
		open()
		first := <-done
		wantStatus(t, "first", first, http.StatusCreated)
		wantReplay(t, "after it finished", serve(route, req("POST", "/charges", "x", "fly")), first)
		if st := keys.Stats(); st.InFlight != 3 {
			t.Errorf("Stats.InFlight %d, want 3", st.InFlight)
		}
	})
}

// L1.12: with Config.KeyField the key is a top-level member of the JSON
// body, taken out before the fingerprint and the handler, the other
// members byte for byte as sent: the key's place in the body does not
// make another request, another member does; a body without the member,
// one that is no object, or a key that is no string gets 400, and a
// header key is not read.
func TestL1BodyKeyLeavesTheBody(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(idemserver.Config{KeyField: "idempotency_key"})
		var bodies []string
		h := &inserter{e: e}
		h.then = func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			_, k, _ := idemserver.Key(r.Context())
			read, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading the body again: %v", err)
			}
			bodies = append(bodies, k+" "+string(read))
			return false
		}
		route := keys.Handle(idemserver.Route{}, h)
		first := serve(route, req("POST", "/things", `{"idempotency_key":"k1", "amount": 5}`))
		wantStatus(t, "key first", first, http.StatusCreated)
		wantReplay(t, "the same body", serve(route, req("POST", "/things", `{"idempotency_key":"k1", "amount": 5}`)), first)
		wantReplay(t, "the key last", serve(route, req("POST", "/things", `{ "amount": 5,"idempotency_key":"k1"}`)), first)
		wantProblem(t, "another amount", serve(route, req("POST", "/things", `{"amount": 6,"idempotency_key":"k1"}`)), http.StatusUnprocessableEntity)
		wantStatus(t, "the key alone", serve(route, req("POST", "/things", `{"idempotency_key":"k2"}`)), http.StatusCreated)
		wantStatus(t, "nested members stay", serve(route, req("POST", "/things", `{"a":{"idempotency_key":"x"},"idempotency_key":"k3","b":[1,2]}`)), http.StatusCreated)
		for _, c := range []struct{ name, body string }{
			{"no member", `{"amount": 5}`},
			{"no object", `[1]`},
			{"not JSON", `amount=5`},
			{"a number", `{"idempotency_key":7}`},
			{"twice", `{"idempotency_key":"k4","idempotency_key":"k5"}`},
		} {
			wantProblem(t, c.name, serve(route, req("POST", "/things", c.body, "header-key")), http.StatusBadRequest)
		}
		want := []string{`k1 { "amount": 5}`, `k2 {}`, `k3 {"a":{"idempotency_key":"x"},"b":[1,2]}`}
		if strings.Join(bodies, "|") != strings.Join(want, "|") {
			t.Errorf("the handler read %q, want %q", bodies, want)
		}
		if n := e.keyRows(); n != 3 {
			t.Errorf("%d key rows, want 3", n)
		}
	})
}
