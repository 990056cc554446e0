package idemserver_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// A client that went away does not cancel its request's work: the
// handler's writes and the key commit.
func TestClientGoneWorkCommits(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, &insertItem{e: e})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequest("POST", "/items", strings.NewReader("a")).WithContext(ctx)
		r.Header.Set("Idempotency-Key", "k")
		srv.ServeHTTP(httptest.NewRecorder(), r)
		if e.count("items") != 1 || e.count("idempotency_keys") != 1 {
			t.Fatal("a cancelled request context cancelled the work")
		}
	})
}

// A handler still running at Config.WorkTimeout commits nothing and its
// request gets 503 with Retry-After.
func TestWorkTimeoutRollsBack(t *testing.T) {
	onBothStores(t, idemserver.Config{WorkTimeout: 100 * time.Millisecond}, func(t *testing.T, e *env) {
		srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, srv, "POST", "/items", "k", "a")
		if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
			t.Fatalf("%+v, want 503 with Retry-After", got)
		}
		if e.count("idempotency_keys") != 0 {
			t.Fatal("stored")
		}
	})
}

// A body that trickles past the server's read timeout gets 408, the
// connection is closed, and nothing runs.
func TestSlowBodyGets408(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		ts := httptest.NewUnstartedServer(e.keys.Handle(idemserver.Route{}, h))
		ts.Config.ReadTimeout = 200 * time.Millisecond
		ts.Start()
		defer ts.Close()
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte("POST /items HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 10\r\n\r\nab"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("status %d, close %v; want 408 and the connection closed", resp.StatusCode, resp.Close)
		}
		if h.Runs() != 0 || e.count("idempotency_keys") != 0 {
			t.Fatal("a slow body ran")
		}
	})
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAHandlerUsingTheSQLiteDatabaseIsNamed proves L2.12: on SQLite a
// handler that writes through the *sql.DB instead of Tx waits for the
// connection its own transaction holds; at Config.WorkTimeout the request
// gets 503 with Retry-After, whatever the handler then answers, nothing
// is stored, and the error logged names the likely cause.
func TestAHandlerUsingTheSQLiteDatabaseIsNamed(t *testing.T) {
	var log lockedBuffer
	cfg := idemserver.Config{WorkTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	e := newEnv(t, stores[0], cfg)
	srv := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := e.db.ExecContext(r.Context(), `INSERT INTO items (id, note) VALUES ('a', 'outside')`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	got := do(t, srv, "POST", "/items", "k", "a")
	if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
		t.Fatalf("%d %q, want 503 with Retry-After", got.status, got.body)
	}
	if n := e.count("items") + e.count("idempotency_keys"); n != 0 {
		t.Fatalf("%d rows stored, want none", n)
	}
	if l := log.String(); !strings.Contains(l, "outlived Config.WorkTimeout") || !strings.Contains(l, "instead of idemserver.Tx") {
		t.Fatalf("log %q does not name the cause", l)
	}
	if s := e.keys.Stats(); s.Failed != 1 || s.Stored != 0 {
		t.Fatalf("Stats: %d failed, %d stored; want 1 and 0", s.Failed, s.Stored)
	}
}
