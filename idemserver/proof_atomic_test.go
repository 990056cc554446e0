package idemserver_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
)

// L2.1: the answer commits with the handler's write: after a 201, one
// business row and one key row; the retry gets the stored status, body,
// Content-Type and Location byte for byte, marked Idempotent-Replayed,
// and the handler is not run again. Only stored headers come back, and
// the first answer is not marked. A 4xx answer is stored the same way.
func TestL2AnswerCommitsWithTheHandlersWrites(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		h := &inserter{e: e}
		route := keys.Handle(idemserver.Route{}, h)
		first := serve(route, req("POST", "/things", `{"n":1}`, "commit-1"))
		wantStatus(t, "first", first, http.StatusCreated)
		if v := first.Header().Get(idemserver.HeaderReplayed); v != "" {
			t.Errorf("first answer marked %s: %q", idemserver.HeaderReplayed, v)
		}
		if first.Header().Get("X-Not-Stored") != "run 1" || first.Header().Get("Location") != "/things/1" {
			t.Errorf("first answer's headers: %v", first.Header())
		}
		if k, b := e.keyRows(), e.count("things"); k != 1 || b != 1 {
			t.Fatalf("after the first answer: %d key rows, %d business rows; want 1, 1", k, b)
		}
		for i := range 2 {
			w := serve(route, req("POST", "/things", `{"n":1}`, "commit-1"))
			wantReplay(t, "retry", w, first)
			if v := w.Header().Get("X-Not-Stored"); v != "" {
				t.Errorf("retry %d replays an unstored header: X-Not-Stored %q", i, v)
			}
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		if b := e.count("things"); b != 1 {
			t.Errorf("%d business rows after retries, want 1", b)
		}

		refuse := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"title":"out of stock"}`))
			return true
		}}
		rr := keys.Handle(idemserver.Route{}, refuse)
		r1 := serve(rr, req("POST", "/things", "{}", "refused-1"))
		wantStatus(t, "handler's 409", r1, http.StatusConflict)
		wantReplay(t, "handler's 409 again", serve(rr, req("POST", "/things", "{}", "refused-1")), r1)
		if n := refuse.runs.Load(); n != 1 {
			t.Errorf("a stored 4xx ran its handler %d times, want 1", n)
		}
		if b := e.count("things"); b != 2 {
			t.Errorf("%d business rows, want 2 (a 4xx commits its writes)", b)
		}
		if st := keys.Stats(); st.Replays != 3 || st.Stored != 2 {
			t.Errorf("Stats Replays %d Stored %d, want 3, 2", st.Replays, st.Stored)
		}
	})
}

// L2.2: a handler that writes its row and then answers 5xx, answers 5xx
// after a failed statement in the middle of its transaction, or panics
// (with any value or http.ErrAbortHandler) proofStores nothing: no business
// row, no key row; a panic is raised again; the retry runs the handler
// again and is stored then.
func TestL2NothingIsStoredWhenTheHandlerFails(t *testing.T) {
	cases := []struct {
		name  string
		fail  func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool
		panic any
	}{
		{name: "5xx", fail: func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool {
			http.Error(w, "upstream failed", http.StatusServiceUnavailable)
			return true
		}},
		{name: "error mid-transaction", fail: func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool {
			_, err := tx.ExecContext(r.Context(), `INSERT INTO no_such_table VALUES (1)`)
			http.Error(w, "statement failed: "+errString(err), http.StatusInternalServerError)
			return true
		}},
		{name: "panic", panic: "boom"},
		{name: "abort", panic: http.ErrAbortHandler},
	}
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		for i, c := range cases {
			key := "fail-" + strings.ReplaceAll(c.name, " ", "-")
			broken := true
			h := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool {
				if !broken {
					return false
				}
				if c.panic != nil {
					panic(c.panic)
				}
				return c.fail(w, r, tx)
			}}
			route := keys.Handle(idemserver.Route{}, h)
			w, p := servePanic(route, req("POST", "/things", "{}", key))
			if c.panic != nil {
				if p != c.panic {
					t.Errorf("%s: the middleware raised %v, want the handler's panic %v", c.name, p, c.panic)
				}
			} else if p != nil || w.Code < 500 {
				t.Errorf("%s: status %d, panic %v; want the handler's 5xx", c.name, w.Code, p)
			}
			if k, b := e.keyRows(), e.count("things"); k != i || b != i {
				t.Fatalf("%s: %d key rows, %d business rows; want %d, %d (nothing stored)", c.name, k, b, i, i)
			}
			broken = false
			w = serve(route, req("POST", "/things", "{}", key))
			wantStatus(t, c.name+", retry", w, http.StatusCreated)
			if n := h.runs.Load(); n != 2 {
				t.Errorf("%s: handler ran %d times, want 2 (the retry runs it again)", c.name, n)
			}
			if k, b := e.keyRows(), e.count("things"); k != i+1 || b != i+1 {
				t.Errorf("%s, retry: %d key rows, %d business rows; want %d, %d", c.name, k, b, i+1, i+1)
			}
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// L2.3: a commit that fails (a deferred foreign key the handler broke)
// proofStores nothing and answers 5xx; the store serves the next request, and
// the retry, fixed, runs the handler again. On a phased route the claim
// is released with its recovery points.
func TestL2AFailedCommitStoresNothing(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		fixed := false
		runs := 0
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			ctx := r.Context()
			tx := txOf(ctx)
			if fixed {
				if _, err := tx.ExecContext(ctx, `INSERT INTO parents (id) VALUES (7)`); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO children (id, parent) VALUES (1, 7)`); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("child 1"))
		})
		route := keys.Handle(idemserver.Route{}, h)
		w := serve(route, req("POST", "/children", "{}", "fk"))
		if w.Code < 500 || w.Body.String() == "child 1" {
			t.Fatalf("a failed commit answered %d %q, want 5xx, not the handler's answer", w.Code, w.Body.String())
		}
		if k, c := e.keyRows(), e.count("children"); k != 0 || c != 0 {
			t.Fatalf("after a failed commit: %d key rows, %d children; want 0, 0", k, c)
		}
		other := &inserter{e: e}
		wantStatus(t, "the next request", serve(keys.Handle(idemserver.Route{}, other), req("POST", "/things", "{}", "next")), http.StatusCreated)
		fixed = true
		first := serve(route, req("POST", "/children", "{}", "fk"))
		wantStatus(t, "the retry", first, http.StatusCreated)
		wantReplay(t, "again", serve(route, req("POST", "/children", "{}", "fk")), first)
		if runs != 2 {
			t.Errorf("handler ran %d times, want 2", runs)
		}
		if c := e.count("children"); c != 1 {
			t.Errorf("%d children, want 1", c)
		}

		// On PostgreSQL a failed statement aborts the transaction: a
		// handler that ignores it and answers 201 gets its commit rolled
		// back, and the client 5xx, never the 201.
		if s.pg {
			ignoring := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool {
				tx.ExecContext(r.Context(), `INSERT INTO no_such_table VALUES (1)`)
				return false
			}}
			before, keysBefore := e.count("things"), e.keyRows()
			w := serve(keys.Handle(idemserver.Route{}, ignoring), req("POST", "/things", "{}", "aborted"))
			if w.Code < 500 {
				t.Errorf("an aborted transaction's answer: %d %q, want 5xx", w.Code, w.Body.String())
			}
			if b, k := e.count("things")-before, e.keyRows()-keysBefore; b != 0 || k != 0 {
				t.Errorf("an aborted transaction stored %d business rows and %d key rows, want 0, 0", b, k)
			}
		}

		// A phased route's final commit failing: the same, and the claim
		// is released with its recovery point, so the retry resumes at
		// once without a second capture.
		gw := newProofGateway()
		fixed = false
		phased := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if _, err := idemserver.Step(ctx, "charge", func(ctx context.Context, dk string) ([]byte, error) {
				return []byte(gw.capture(dk)), nil
			}); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			tx := txOf(ctx)
			if fixed {
				if _, err := tx.ExecContext(ctx, `INSERT INTO parents (id) VALUES (8)`); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO children (id, parent) VALUES (2, 8)`); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("child 2"))
		}))
		w = serve(phased, req("POST", "/children", "{}", "pfk"))
		if w.Code < 500 || w.Body.String() == "child 2" {
			t.Fatalf("a failed phased commit answered %d %q, want 5xx, not the handler's answer", w.Code, w.Body.String())
		}
		if c := e.count("children"); c != 1 {
			t.Fatalf("after a failed phased commit: %d children, want 1 (the earlier one)", c)
		}
		fixed = true
		pf := serve(phased, req("POST", "/children", "{}", "pfk"))
		wantStatus(t, "the phased retry", pf, http.StatusCreated)
		wantReplay(t, "phased, again", serve(phased, req("POST", "/children", "{}", "pfk")), pf)
		if captures, calls := gw.state(); captures != 1 || len(calls) != 1 {
			t.Errorf("gateway: %d captures, %d calls; want 1, 1", captures, len(calls))
		}
	})
}

// L2.4: a client that goes away does not undo the work: its request
// context ending after the handler wrote its answer, or after the
// handler returned, still commits; the retry is replayed and the effect
// happened once. On a phased route too.
func TestL2ADisconnectedClientIsReplayed(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		for _, phased := range []bool{false, true} {
			for _, when := range []string{"in the handler", "after the handler"} {
				name := when
				if phased {
					name = "phased, " + when
				}
				key := strings.NewReplacer(" ", "-", ",", "").Replace(name)
				ctx, cancel := context.WithCancel(context.Background())
				var inner http.Handler
				var runs func() int64
				if phased {
					c := &charger{e: e, gw: newProofGateway()}
					if when == "in the handler" {
						c.beforeTx = func(context.Context) { cancel() }
					}
					inner, runs = c, c.runs.Load
				} else {
					h := &inserter{e: e}
					if when == "in the handler" {
						h.then = func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool { cancel(); return false }
					}
					inner, runs = h, h.runs.Load
				}
				route := keys.Handle(idemserver.Route{Phased: phased}, inner)
				wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					route.ServeHTTP(w, r)
					cancel()
				})
				if when == "after the handler" {
					// The inner handler's return is where the client leaves.
					route = keys.Handle(idemserver.Route{Phased: phased}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						inner.ServeHTTP(w, r)
						cancel()
					}))
					wrapped = route.ServeHTTP
				}
				before := e.count("things")
				first := serve(wrapped, req("POST", "/things", "{}", key).WithContext(ctx))
				cancel()
				if first.Code != http.StatusCreated {
					t.Errorf("%s: the gone client's answer %d %q, want 201 written anyway", name, first.Code, first.Body.String())
				}
				retry := serve(route, req("POST", "/things", "{}", key))
				if retry.Header().Get(idemserver.HeaderReplayed) != "true" || retry.Code != http.StatusCreated {
					t.Errorf("%s: retry %d %q replayed=%q, want the stored 201", name, retry.Code, retry.Body.String(), retry.Header().Get(idemserver.HeaderReplayed))
				}
				if retry.Body.String() != first.Body.String() {
					t.Errorf("%s: retry body %q, want the first %q", name, retry.Body.String(), first.Body.String())
				}
				if n := runs(); n != 1 {
					t.Errorf("%s: handler ran %d times, want 1", name, n)
				}
				if b := e.count("things") - before; b != 1 {
					t.Errorf("%s: %d business rows, want 1", name, b)
				}
			}
		}
	})
}

// L2.5: the stored answer comes back byte for byte whatever its bytes:
// every byte value, an empty body, a body of the whole MaxResponseBytes;
// the headers Answers.StoredHeaders names come back with it, each value.
func TestL2ReplaysAreByteForByte(t *testing.T) {
	all := make([]byte, 0, 1024)
	for i := range 1024 {
		all = append(all, byte(i*7+i/256))
	}
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(idemserver.Config{MaxResponseBytes: 64 << 10, Answers: idemserver.Answers{StoredHeaders: []string{"X-Request-Cost", "Link"}}})
		for _, c := range []struct {
			name   string
			status int
			body   []byte
		}{
			{"every byte", http.StatusCreated, all},
			{"empty", http.StatusAccepted, nil},
			{"the bound", http.StatusOK, bytes.Repeat([]byte{0, 0xff, '\n'}, (64<<10)/3+1)[:64<<10]},
		} {
			h := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("X-Request-Cost", "3")
				w.Header().Add("Link", "</a>; rel=a")
				w.Header().Add("Link", "</b>; rel=b")
				w.Header().Set("X-Not-Stored", "x")
				w.WriteHeader(c.status)
				w.Write(c.body)
				return true
			}}
			route := keys.Handle(idemserver.Route{}, h)
			first := serve(route, req("POST", "/bytes", "{}", "bytes-"+strings.ReplaceAll(c.name, " ", "-")))
			wantStatus(t, c.name, first, c.status)
			again := serve(route, req("POST", "/bytes", "{}", "bytes-"+strings.ReplaceAll(c.name, " ", "-")))
			wantReplay(t, c.name, again, first)
			if !bytes.Equal(again.Body.Bytes(), c.body) {
				t.Errorf("%s: replayed %d bytes, want the %d written", c.name, again.Body.Len(), len(c.body))
			}
			if got := again.Header().Values("Link"); len(got) != 2 || got[0] != "</a>; rel=a" || got[1] != "</b>; rel=b" {
				t.Errorf("%s: replayed Link %q, want both values in order", c.name, got)
			}
			if again.Header().Get("X-Request-Cost") != "3" || again.Header().Get("X-Not-Stored") != "" {
				t.Errorf("%s: replayed headers %v, want X-Request-Cost and not X-Not-Stored", c.name, again.Header())
			}
			if n := h.runs.Load(); n != 1 {
				t.Errorf("%s: handler ran %d times, want 1", c.name, n)
			}
		}
	})
}

// L2.8: an atomic route never resumes an unfinished key row, whether a
// phased route left it (its claim live, released after a 502, or lapsed
// after a crash) or it was written with no claim: the same request under
// its key gets 409 with Retry-After while the claim is live and 422
// otherwise, every time; its handler does not run, and the row, its
// recovery points and the business rows stay as they were. The phased
// route then resumes the row, and the atomic route replays its answer.
// Resumed is false on an atomic route, on a new key too.
func TestL2AnAtomicRouteNeverResumesAnUnfinishedKey(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		for _, state := range []string{"live", "released", "lapsed", "no claim"} {
			t.Run(state, func(t *testing.T) {
				e := newProofEnv(t, s)
				keys := e.keys(e.config())
				var atomicResumed atomic.Bool
				a := &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, tx *sqlTx) bool {
					if resumed, lapsed := idemserver.Resumed(r.Context()); resumed || lapsed {
						atomicResumed.Store(true)
					}
					return false
				}}
				atomicRoute := keys.Handle(idemserver.Route{}, a)
				entered, release, open := gate(t)
				first := true
				var phasedResumed []string
				c := &charger{e: e, gw: newProofGateway(),
					inCharge: func(ctx context.Context, dk string) {
						if state == "live" && first {
							close(entered)
							<-release
						}
					},
					afterCharge: func(ctx context.Context, dk string) error {
						if !first {
							return nil
						}
						first = false
						switch state {
						case "released":
							return errors.New("connection reset after the gateway answered")
						case "lapsed":
							panic(http.ErrAbortHandler)
						}
						return nil
					},
					beforeTx: func(ctx context.Context) {
						resumed, lapsed := idemserver.Resumed(ctx)
						phasedResumed = append(phasedResumed, fmt.Sprintf("%v/%v", resumed, lapsed))
					}}
				phased := keys.Handle(idemserver.Route{Phased: true}, c)
				same := func() *http.Request { return req("POST", "/charges", "x", "pay-1") }

				var liveDone chan *httptestRecorder
				want := "true/false" // what the phased route's finishing run sees
				switch state {
				case "live":
					liveDone = make(chan *httptestRecorder, 1)
					go func() { liveDone <- serve(phased, same()) }()
					waitEntered(t, entered, liveDone)
					want = "false/false"
				case "released":
					wantStatus(t, "the phased request failing after its call", serve(phased, same()), http.StatusBadGateway)
				case "lapsed":
					if _, p := servePanic(phased, same()); p != http.ErrAbortHandler {
						t.Fatalf("the crashed request raised %v, want http.ErrAbortHandler", p)
					}
					e.clock.Add(idemserver.DefaultLockTimeout + time.Second)
					want = "true/true"
				case "no claim":
					now := e.clock.Now()
					if _, err := e.db.Exec(e.q(`INSERT INTO `+idemserver.DefaultTable+` (principal, idem_key, fingerprint, seed, created_at, expires_at, finished)
						VALUES (?, ?, ?, ?, ?, ?, 0)`), "", "pay-1", idemserver.Fingerprint("POST", "/charges", []byte("x")),
						"seed-by-hand", now.UnixNano(), now.Add(idemserver.DefaultRetention).UnixNano()); err != nil {
						t.Fatal(err)
					}
				}
				snapshot := func() string {
					t.Helper()
					var id, finished int64
					var fingerprint []byte
					var seed string
					var token sql.NullString
					var lease, status sql.NullInt64
					if err := e.db.QueryRow(`SELECT id, finished, fingerprint, seed, lock_token, lease_until, response_status FROM `+idemserver.DefaultTable).
						Scan(&id, &finished, &fingerprint, &seed, &token, &lease, &status); err != nil {
						t.Fatal(err)
					}
					return fmt.Sprintf("id %d finished %d fingerprint %x seed %s claim %v %v status %v; %d recovery points",
						id, finished, fingerprint, seed, token, lease, status, e.count(idemserver.DefaultTable+"_steps"))
				}
				before := snapshot()
				if strings.Contains(before, "finished 1") {
					t.Fatalf("the row is finished before the test: %s", before)
				}
				var answers [2]*httptestRecorder
				for i := range answers {
					answers[i] = serve(atomicRoute, same())
				}
				if n, b := a.runs.Load(), e.count("things"); n != 0 || b != 0 || atomicResumed.Load() {
					t.Errorf("the atomic handler ran %d times (Resumed true: %v), %d business rows; want 0, 0", n, atomicResumed.Load(), b)
				}
				for i, w := range answers {
					if state == "live" {
						wantProblem(t, fmt.Sprintf("atomic route, try %d", i), w, http.StatusConflict)
						if ra := w.Header().Get("Retry-After"); ra != "10" {
							t.Errorf("atomic route, try %d: Retry-After %q, want 10", i, ra)
						}
					} else {
						wantProblem(t, fmt.Sprintf("atomic route, try %d", i), w, http.StatusUnprocessableEntity)
					}
				}
				if after := snapshot(); after != before {
					t.Fatalf("the atomic route changed the key row:\n%s\nwas\n%s", after, before)
				}

				var done *httptestRecorder
				if state == "live" {
					open()
					done = <-liveDone
				} else {
					done = serve(phased, same())
				}
				wantStatus(t, "the phased route, finishing the row", done, http.StatusCreated)
				if got := strings.Join(phasedResumed, " "); got != want {
					t.Errorf("the phased route's finishing run saw Resumed %s, want %s", got, want)
				}
				wantReplay(t, "the atomic route, once finished", serve(atomicRoute, same()), done)
				if captures, _ := c.gw.state(); captures != 1 || e.count("things") != 1 {
					t.Errorf("%d captures, %d business rows; want 1, 1", captures, e.count("things"))
				}

				wantStatus(t, "the atomic route, a new key", serve(atomicRoute, req("POST", "/charges", "x", "new")), http.StatusCreated)
				if n := a.runs.Load(); n != 1 || atomicResumed.Load() {
					t.Errorf("the atomic handler ran %d times, Resumed true: %v; want 1, false", n, atomicResumed.Load())
				}
			})
		}
	})
}

// L2.9: sqlite.Open opens every connection with synchronous=FULL, so that
// a commit, and the answer sent after it, survives a power cut: PRAGMA
// synchronous reads 2 (FULL) in the transaction Keys gives an atomic
// handler and a phased one's final transaction, on the pool's connection
// and again on a new one after that one is discarded.
func TestL2SQLiteCommitsAreDurable(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "service.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys, err := idemserver.New(ctx, idemserver.Config{DB: db, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	synchronous := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		if err := txOf(r.Context()).QueryRowContext(r.Context(), `PRAGMA synchronous`).Scan(&n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, n)
	})
	routes := map[string]http.Handler{
		"atomic": keys.Handle(idemserver.Route{}, synchronous),
		"phased": keys.Handle(idemserver.Route{Phased: true}, synchronous),
	}
	check := func(conn string) {
		t.Helper()
		for name, route := range routes {
			w := serve(route, req("POST", "/sync", "", conn+"-"+name))
			wantStatus(t, conn+", "+name+" route", w, http.StatusCreated)
			if got := w.Body.String(); got != "2" {
				t.Errorf("%s, %s route: PRAGMA synchronous %s, want 2 (FULL)", conn, name, got)
			}
		}
	}
	check("first-connection")

	// Discard the pool's connection: the next transaction opens a new one.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("discarding the connection: %v", err)
	}
	conn.Close()
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections open after the discard, want 0", n)
	}
	check("new-connection")
}

// L2.14: a handler never reads another request's uncommitted writes: while
// one request's handler holds a business row it wrote, uncommitted, and
// then fails (5xx, rolled back), a request under another key whose
// handler counts the rows sees none, and its stored answer, replayed to
// every retry, never tells of a row that was never committed. SQLite runs
// one transaction at a time, so the databases of concurrent transactions
// prove it (PostgreSQL at SERIALIZABLE, MySQL at READ COMMITTED).
func TestL2AHandlerNeverReadsUncommittedWrites(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		entered, release, open := gate(t)
		writer := keys.Handle(idemserver.Route{}, &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			close(entered)
			<-release
			http.Error(w, "failing after the write", http.StatusInternalServerError)
			return true
		}})
		reader := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var n int
			if err := txOf(r.Context()).QueryRowContext(r.Context(), `SELECT count(*) FROM things`).Scan(&n); err != nil {
				idemserver.Fail(r.Context(), err)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"things":%d}`, n)
		}))
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(writer, req("POST", "/things", "{}", "writer")) }()
		waitEntered(t, entered, done)
		read := serve(reader, req("POST", "/count", "{}", "reader"))
		open()
		wantStatus(t, "the writer", <-done, http.StatusInternalServerError)
		wantStatus(t, "the reader", read, http.StatusCreated)
		if read.Body.String() != `{"things":0}` {
			t.Fatalf("the reader answered %q, want {\"things\":0}: it read a row that never committed", read.Body.String())
		}
		wantReplay(t, "the reader's retry", serve(reader, req("POST", "/count", "{}", "reader")), read)
		if n := e.count("things"); n != 0 {
			t.Fatalf("%d business rows, want none", n)
		}
	})
}

// L2.15: keys do not wait for each other: while one request's handler
// holds its transaction open, a request under another key runs and
// answers. SQLite runs one transaction at a time, so the databases of
// concurrent transactions prove it (on MySQL, READ COMMITTED takes no gap
// locks, which would make the second insert wait for the first request).
// WorkTimeout bounds a request that waits in spite of it.
func TestL2KeysDoNotWaitForEachOther(t *testing.T) {
	eachSharedStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		cfg := e.config()
		cfg.WorkTimeout = 5 * time.Second
		keys := e.keys(cfg)
		entered, release, open := gate(t)
		var first sync.Once // a run again (PostgreSQL may fail to serialize) is not held
		held := keys.Handle(idemserver.Route{}, &inserter{e: e, then: func(w http.ResponseWriter, r *http.Request, _ *sqlTx) bool {
			first.Do(func() {
				close(entered)
				<-release
			})
			return false
		}})
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(held, req("POST", "/things", "{}", "held")) }()
		waitEntered(t, entered, done)
		other := serve(keys.Handle(idemserver.Route{}, &inserter{e: e}), req("POST", "/things", "{}", "other"))
		open()
		wantStatus(t, "the request under another key, while the first is held", other, http.StatusCreated)
		wantStatus(t, "the held request", <-done, http.StatusCreated)
		if n := e.count("things"); n != 2 {
			t.Fatalf("%d business rows, want 2", n)
		}
	})
}
