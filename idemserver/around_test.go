package idemserver_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// frameworkWriter is a framework's own writer, as gin's: it says whether
// anything was written on it (Written), and a handler of the framework
// writes on it rather than on the writer idemserver gives.
type frameworkWriter struct {
	http.ResponseWriter
	written bool
}

func (w *frameworkWriter) WriteHeader(status int) {
	w.written = true
	w.ResponseWriter.WriteHeader(status)
}
func (w *frameworkWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.ResponseWriter.Write(b)
}
func (w *frameworkWriter) Written() bool { return w.written }

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAnAnswerAroundIdemserverIsNeverStored proves L1.18: a handler that
// answers on the framework's writer, around the one idemserver gave it,
// has its work rolled back and nothing stored, and the error is logged
// naming the cause; on an atomic route and a phased one.
func TestAnAnswerAroundIdemserverIsNeverStored(t *testing.T) {
	for _, route := range []idemserver.Route{{}, {Phased: true}} {
		var logs syncBuffer
		cfg := idemserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		onBothStores(t, cfg, func(t *testing.T, e *env) {
			var fw *frameworkWriter
			inner := &insertItem{e: e}
			h := e.keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(fw, r) // as gin's c.JSON writes to c.Writer
			}))
			rec := httptest.NewRecorder()
			fw = &frameworkWriter{ResponseWriter: rec}
			r := httptest.NewRequest("POST", "/items", strings.NewReader("a"))
			r.Header.Set("Idempotency-Key", "k")
			h.ServeHTTP(fw, r)
			if rec.Code != http.StatusCreated || rec.Body.String() != `{"id":"a"}` {
				t.Fatalf("the client got %d %q, want the handler's own 201, with nothing after it", rec.Code, rec.Body)
			}
			if e.count("items") != 0 {
				t.Fatalf("%d items; want the work rolled back", e.count("items"))
			}
			if !strings.Contains(logs.String(), "answered on the server's own writer") || !strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("the log says %q, want an error naming the cause", logs.String())
			}
			// Nothing was stored: the retry, by a handler that answers on
			// the writer it is given, runs and is stored, not replayed.
			rec = httptest.NewRecorder()
			r = httptest.NewRequest("POST", "/items", strings.NewReader("a"))
			r.Header.Set("Idempotency-Key", "k")
			e.keys.Handle(route, inner).ServeHTTP(&frameworkWriter{ResponseWriter: rec}, r)
			if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "" || inner.Runs() != 2 || e.count("items") != 1 {
				t.Fatalf("the retry: %d, replayed %q, %d runs, %d items; want a fresh 201 from a second run",
					rec.Code, rec.Header().Get("Idempotent-Replayed"), inner.Runs(), e.count("items"))
			}
		})
	}
}
