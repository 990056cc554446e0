package idemserver_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/jackc/pgx/v5/pgconn"
)

// serializationFailure is the error PostgreSQL gives a SERIALIZABLE
// transaction that must run again.
var serializationFailure = &pgconn.PgError{Code: "40001", Message: "could not serialize access"}

// failing is a handler that writes an item and reports fails[run] (if
// not nil) with Fail on its run-th run.
type failing struct {
	e     *env
	mu    sync.Mutex
	runs  int
	fails []error
}

func (h *failing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	run := h.runs
	h.runs++
	h.mu.Unlock()
	ctx := r.Context()
	if _, err := idemserver.Tx(ctx).ExecContext(ctx, h.e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "x", "n"); err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	if run < len(h.fails) && h.fails[run] != nil {
		idemserver.Fail(ctx, h.fails[run])
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// A serialization failure reported with Fail reruns the transaction,
// handler included (on a phased route, its Steps answer from their
// recovery points); its first run's writes are gone.
func TestFailRerunsSerializationFailures(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		for i, route := range []idemserver.Route{{}, {Phased: true}} {
			h := &failing{e: e, fails: []error{serializationFailure, serializationFailure}}
			got := do(t, e.keys.Handle(route, h), "POST", "/items", fmt.Sprint("k", i), "x")
			if got.status != http.StatusCreated || h.runs != 3 || e.count("items") != 1 {
				t.Fatalf("%+v: answer %+v after %d runs, %d items; want 201, 3, 1", route, got, h.runs, e.count("items"))
			}
			if s := e.keys.Stats(); s.Reruns != int64(2*(i+1)) {
				t.Errorf("%+v: Reruns = %d, want %d", route, s.Reruns, 2*(i+1))
			}
			e.db.Exec(`DELETE FROM items`)
		}
	})
}

// Reruns exhausted: 503 with Retry-After, nothing stored.
func TestFailContentionGets503(t *testing.T) {
	onBothStores(t, idemserver.Config{Reruns: 2}, func(t *testing.T, e *env) {
		h := &failing{e: e, fails: []error{serializationFailure, serializationFailure, serializationFailure, serializationFailure}}
		got := do(t, e.keys.Handle(idemserver.Route{}, h), "POST", "/items", "k", "x")
		if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" || h.runs != 3 {
			t.Fatalf("answer %+v after %d runs; want 503 with Retry-After after 3", got, h.runs)
		}
		if e.count("items") != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("stored")
		}
	})
}

// Any other reported error: 500, nothing stored, whatever the handler
// wrote; on a phased route the claim is released.
func TestFailOtherErrorGets500(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		for _, route := range []idemserver.Route{{}, {Phased: true}} {
			h := &failing{e: e, fails: []error{errors.New("disk on fire")}}
			srv := e.keys.Handle(route, h)
			key := "k-" + map[bool]string{false: "atomic", true: "phased"}[route.Phased]
			if got := do(t, srv, "POST", "/items", key, "x"); got.status != http.StatusInternalServerError {
				t.Fatalf("%+v: %+v, want 500", route, got)
			}
			if e.count("items") != 0 {
				t.Fatalf("%+v: stored", route)
			}
			if got := do(t, srv, "POST", "/items", key, "x"); got.status != http.StatusCreated {
				t.Fatalf("%+v retry: %+v, want 201 at once", route, got)
			}
			e.db.Exec(`DELETE FROM items`)
		}
	})
}
