package idemserver_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// The handler's writes, the key and its answer commit together; a retry
// gets the stored answer, marked, without running the handler again.
func TestAtomicRetryReplaysTheCommittedAnswer(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		first := do(t, srv, "POST", "/items", "k1", "a")
		if first.status != http.StatusCreated || first.body != `{"id":"a"}` || first.header.Get(idemserver.HeaderReplayed) != "" {
			t.Fatalf("first answer %+v", first)
		}
		again := do(t, srv, "POST", "/items", "k1", "a")
		if again.status != http.StatusCreated || again.body != first.body ||
			again.header.Get(idemserver.HeaderReplayed) != "true" ||
			again.header.Get("Location") != "/items/a" || again.header.Get("Content-Type") != "application/json" {
			t.Fatalf("replay %+v", again)
		}
		if again.header.Get("X-Not-Stored") != "" {
			t.Errorf("replay carries a header that is not stored: %v", again.header)
		}
		if h.Runs() != 1 || e.count("items") != 1 {
			t.Errorf("handler ran %d times, %d items; want 1, 1", h.Runs(), e.count("items"))
		}
		if s := e.keys.Stats(); s.Stored != 1 || s.Replays != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// A key reused for another body, path or method is refused with 422 and
// the handler does not run.
func TestAtomicReusedKeyIsRefused(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		do(t, srv, "POST", "/items", "k1", "a")
		for _, c := range []struct{ method, target, body string }{
			{"POST", "/items", "b"},
			{"POST", "/other", "a"},
			{"POST", "/items?x=1", "a"},
			{"PUT", "/items", "a"},
		} {
			got := do(t, srv, c.method, c.target, "k1", c.body)
			if got.status != http.StatusUnprocessableEntity || got.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%v: %+v, want 422 problem", c, got)
			}
		}
		if h.Runs() != 1 || e.count("items") != 1 {
			t.Errorf("handler ran %d times", h.Runs())
		}
	})
}

// A handler that answers >= 500 rolls back its writes and stores nothing;
// the retry runs it again.
func TestAtomicServerErrorRollsBack(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		fail := true
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx := idemserver.Tx(r.Context())
			if _, err := tx.ExecContext(r.Context(), e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "x", "n"); err != nil {
				t.Error(err)
			}
			if fail {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		if got := do(t, srv, "POST", "/items", "k1", "x"); got.status != http.StatusServiceUnavailable {
			t.Fatalf("first: %+v", got)
		}
		if n := e.count("items"); n != 0 {
			t.Fatalf("%d items after a 503, want 0", n)
		}
		if n := e.count("idempotency_keys"); n != 0 {
			t.Fatalf("%d keys after a 503, want 0", n)
		}
		fail = false
		if got := do(t, srv, "POST", "/items", "k1", "x"); got.status != http.StatusCreated || got.header.Get(idemserver.HeaderReplayed) != "" {
			t.Fatalf("retry: %+v", got)
		}
		if n := e.count("items"); n != 1 {
			t.Fatalf("%d items, want 1", n)
		}
	})
}

// A handler that panics commits nothing, and the panic goes on to the
// server.
func TestAtomicPanicCommitsNothing(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemserver.Tx(r.Context()).ExecContext(r.Context(), e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "x", "n")
			w.WriteHeader(http.StatusCreated)
			panic(http.ErrAbortHandler)
		}))
		func() {
			defer func() {
				if v := recover(); v != http.ErrAbortHandler {
					t.Errorf("recovered %v, want http.ErrAbortHandler", v)
				}
			}()
			do(t, srv, "POST", "/items", "k1", "x")
		}()
		if e.count("items") != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("a panicking handler committed")
		}
	})
}

// A commit that fails (a deferred constraint) stores nothing and answers
// 5xx, not the handler's answer. MySQL has no deferred constraints: there
// the transaction's connection dies after the handler wrote and before
// the commit, which is 503 (the database unavailable).
func TestAtomicFailedCommitStoresNothing(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx := idemserver.Tx(r.Context())
			if e.store.dialect == "mysql" {
				if _, err := tx.ExecContext(r.Context(), `INSERT INTO parents (id) VALUES ('p')`); err != nil {
					t.Error(err)
				}
				var conn int64
				if err := tx.QueryRowContext(r.Context(), `SELECT CONNECTION_ID()`).Scan(&conn); err != nil {
					t.Error(err)
				}
				if _, err := e.db.ExecContext(r.Context(), fmt.Sprintf("KILL CONNECTION %d", conn)); err != nil {
					t.Error(err)
				}
			} else if _, err := tx.ExecContext(r.Context(), e.q(`INSERT INTO children (id, parent) VALUES (?, ?)`), "c", "missing"); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, srv, "POST", "/children", "k1", "c")
		want := http.StatusInternalServerError
		if e.store.dialect == "mysql" {
			want = http.StatusServiceUnavailable
		}
		if got.status != want {
			t.Fatalf("answer %+v, want %d", got, want)
		}
		if e.count("parents") != 0 {
			t.Fatal("a failed commit left its parent")
		}
		if e.count("children") != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("a failed commit left rows")
		}
	})
}

// A wrapper around the middleware sees the answer written only once it
// is committed.
func TestAtomicAnswerIsSentAfterCommit(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		rec := &watch{ResponseWriter: nil, e: e}
		wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.ResponseWriter = w
			srv.ServeHTTP(rec, r)
		})
		if got := do(t, wrapped, "POST", "/items", "k1", "a"); got.status != http.StatusCreated {
			t.Fatalf("answer %+v", got)
		}
		if rec.keysAtWrite != 1 || rec.itemsAtWrite != 1 {
			t.Fatalf("at WriteHeader: %d keys, %d items committed; want 1, 1", rec.keysAtWrite, rec.itemsAtWrite)
		}
	})
}

// watch counts the committed rows when the answer's header is written.
type watch struct {
	http.ResponseWriter
	e                         *env
	keysAtWrite, itemsAtWrite int
}

func (w *watch) WriteHeader(code int) {
	w.keysAtWrite, w.itemsAtWrite = w.e.count("idempotency_keys"), w.e.count("items")
	w.ResponseWriter.WriteHeader(code)
}

// An answer over MaxResponseBytes rolls back and gets 500.
func TestAtomicOversizedAnswerStoresNothing(t *testing.T) {
	onBothStores(t, idemserver.Config{MaxResponseBytes: 8}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		if got := do(t, srv, "POST", "/items", "k1", "abcdefgh"); got.status != http.StatusInternalServerError {
			t.Fatalf("answer %+v, want 500", got)
		}
		if e.count("items") != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("an oversized answer committed")
		}
	})
}
