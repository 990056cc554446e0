package idemserver_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// post sends a keyed POST of body to url, as a client would, and returns
// the status and body, or the error of a connection that failed.
func post(t *testing.T, url, key, body string) (int, string, error) {
	t.Helper()
	r, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(idemserver.HeaderIdempotencyKey, key)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// swallow is a recovery middleware that takes every panic, an abort
// included, and answers nothing, as gin's Recovery does for
// http.ErrAbortHandler and echo's Recover does under echo.WrapMiddleware
// (whose answer goes to a writer nobody reads).
func swallow(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { recover() }()
		h.ServeHTTP(w, r)
	})
}

// L6.1: a handler that answers around idemserver, on a framework's
// writer that says so, leaves the client no answer at all: the connection
// fails before the buffered answer leaves, behind a recovery that
// swallows the abort too (the connection's writes fail), and through a
// writer that hides the connection (the handler is aborted); its work is
// rolled back, nothing is stored, the error is logged naming the cause,
// and the retry, by a handler that answers on the writer it is given,
// runs and is stored. Atomic and phased.
func TestL6AnAnswerAroundIdemserverIsAborted(t *testing.T) {
	for _, route := range []idemserver.Route{{}, {Phased: true}} {
		for _, wiring := range []string{"plain", "recovered", "opaque"} {
			t.Run(fmt.Sprintf("phased=%v,%s", route.Phased, wiring), func(t *testing.T) {
				var logs syncBuffer
				cfg := idemserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
				onBothStores(t, cfg, func(t *testing.T, e *env) {
					inner := &insertItem{e: e}
					around := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						fw := &frameworkWriter{ResponseWriter: w}
						var given http.ResponseWriter = fw
						if wiring == "opaque" {
							given = opaqueWriter{fw}
						}
						e.keys.Handle(route, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
							inner.ServeHTTP(fw, r) // as gin's c.JSON writes to c.Writer
						})).ServeHTTP(given, r)
					})
					var h http.Handler = around
					if wiring == "recovered" {
						h = swallow(around)
					}
					srv := httptest.NewServer(h)
					defer srv.Close()
					status, body, err := post(t, srv.URL, "k", "a")
					if err == nil {
						t.Fatalf("the client got %d %q, want a failed connection", status, body)
					}
					if n, k := e.count("items"), e.count("idempotency_keys WHERE finished = 1"); n != 0 || k != 0 {
						t.Fatalf("%d items, %d answers stored; want the work rolled back and nothing stored", n, k)
					}
					if !strings.Contains(logs.String(), "answered on the server's own writer") || !strings.Contains(logs.String(), "level=ERROR") {
						t.Fatalf("the log says %q, want an error naming the cause", logs.String())
					}
					fixed := httptest.NewServer(e.keys.Handle(route, inner))
					defer fixed.Close()
					status, body, err = post(t, fixed.URL, "k", "a")
					if err != nil || status != http.StatusCreated || inner.Runs() != 2 || e.count("items") != 1 {
						t.Fatalf("the retry: %d %q, %v, %d runs, %d items; want a fresh 201 from a second run", status, body, err, inner.Runs(), e.count("items"))
					}
				})
			})
		}
	}
}

// L6.2: a handler that returns without writing anything, not even a
// status, has not answered (under echo.WrapMiddleware a returned error
// looks so): its work is rolled back, nothing is stored, the request gets
// 500 and the log names the cause; the retry runs again. Atomic, phased,
// and unkeyed on an optional route of each. A handler that reported its
// failure with Fail and wrote nothing gets Fail's answer.
func TestL6AHandlerThatWritesNothingGets500(t *testing.T) {
	var logs syncBuffer
	cfg := idemserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	onBothStores(t, cfg, func(t *testing.T, e *env) {
		for _, c := range []struct {
			name  string
			route idemserver.Route
			key   string
		}{
			{"atomic", idemserver.Route{}, "a"},
			{"phased", idemserver.Route{Phased: true}, "p"},
			{"unkeyed atomic", idemserver.Route{Optional: true}, ""},
			{"unkeyed phased", idemserver.Route{Phased: true, Optional: true}, ""},
		} {
			runs := 0
			h := e.keys.Handle(c.route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				if _, err := idemserver.Tx(r.Context()).ExecContext(r.Context(), e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), c.name, "n"); err != nil {
					t.Error(err)
				}
			}))
			for try := 1; try <= 2; try++ {
				got := do(t, h, "POST", "/items", c.key, "x")
				if got.status != http.StatusInternalServerError || got.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%s, try %d: %+v, want a 500 problem", c.name, try, got)
				}
			}
			if runs != 2 || e.count("items") != 0 || e.count("idempotency_keys WHERE finished = 1") != 0 {
				t.Fatalf("%s: %d runs, %d items, %d answers stored; want 2, 0, 0", c.name, runs, e.count("items"), e.count("idempotency_keys WHERE finished = 1"))
			}
		}
		if !strings.Contains(logs.String(), "the handler wrote no answer") || !strings.Contains(logs.String(), "idemecho") {
			t.Fatalf("the log says %q, want the cause and the remedy", logs.String())
		}
		for _, c := range []struct {
			route idemserver.Route
			key   string
		}{
			{idemserver.Route{}, "fa"}, {idemserver.Route{Phased: true}, "fp"},
			{idemserver.Route{Optional: true}, ""}, {idemserver.Route{Phased: true, Optional: true}, ""},
		} {
			failing := e.keys.Handle(c.route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				idemserver.Fail(r.Context(), fmt.Errorf("wrapped: %w", idemserver.ErrUnavailable))
			}))
			if got := do(t, failing, "POST", "/items", c.key, "x"); got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
				t.Fatalf("%+v, key %q: Fail without an answer: %+v, want Fail's 503", c.route, c.key, got)
			}
		}
	})
}

// L6.3: a handler that panics leaves the client no success: its work is
// rolled back and idemserver answers 500 before it raises the panic
// again, so that a recovery middleware that answers nothing of its own
// (echo's Recover under echo.WrapMiddleware answers on a writer nobody
// reads) leaves the 500; nothing is stored, and the retry runs and is
// stored. The panic is logged with the handler's own stack, its file and
// line, and raised again with its value. Atomic and phased.
func TestL6APanicLeavesNoSuccess(t *testing.T) {
	for _, route := range []idemserver.Route{{}, {Phased: true}} {
		t.Run(fmt.Sprint("phased=", route.Phased), func(t *testing.T) {
			var logs syncBuffer
			cfg := idemserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			onBothStores(t, cfg, func(t *testing.T, e *env) {
				inner := &insertItem{e: e}
				panics := true
				var line int
				var raised any
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					inner.ServeHTTP(w, r) // inserts, and answers 201
					if panics {
						_, _, line, _ = runtime.Caller(0)
						panic("the handler's own bug")
					}
				})
				keyed := e.keys.Handle(route, h)
				srv := httptest.NewServer(swallow(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer func() {
						raised = recover()
						panic(raised)
					}()
					keyed.ServeHTTP(w, r)
				})))
				defer srv.Close()
				status, body, err := post(t, srv.URL, "k", "a")
				if err != nil || status != http.StatusInternalServerError {
					t.Fatalf("the client got %d %q, %v; want 500", status, body, err)
				}
				if raised != "the handler's own bug" {
					t.Fatalf("the panic raised again: %v, want the handler's value", raised)
				}
				if n, k := e.count("items"), e.count("idempotency_keys WHERE finished = 1"); n != 0 || k != 0 {
					t.Fatalf("%d items, %d answers stored; want the work rolled back and nothing stored", n, k)
				}
				if want := fmt.Sprintf("proof_answer_test.go:%d", line+1); !strings.Contains(logs.String(), want) ||
					!strings.Contains(logs.String(), "the handler panicked") {
					t.Fatalf("the log says %q, want the panic with the handler's stack (%s)", logs.String(), want)
				}
				panics = false
				e.clock.Advance(idemserver.DefaultLockTimeout) // a phased claim is kept, as after a crash, until its lease ends
				status, body, err = post(t, srv.URL, "k", "a")
				if err != nil || status != http.StatusCreated || inner.Runs() != 2 || e.count("items") != 1 {
					t.Fatalf("the retry: %d %q, %v, %d runs, %d items; want a fresh 201 from a second run", status, body, err, inner.Runs(), e.count("items"))
				}
			})
		})
	}
}
