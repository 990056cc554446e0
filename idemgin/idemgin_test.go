package idemgin_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// logSink is a log safe for the server's goroutines.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shop is a gin service on SQLite whose routes insert an order through
// idemserver's Tx and answer with one of gin's helpers.
type shop struct {
	db   *sql.DB
	keys *idemserver.Keys
	srv  *httptest.Server
	runs atomic.Int64
	logs logSink
}

func newShop(t *testing.T) *shop {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s := &shop{db: db}
	s.keys, err = idemserver.New(context.Background(), idemserver.Config{DB: db, Logger: slog.New(slog.NewTextHandler(&s.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.keys.Close() })

	r := gin.New()
	route := idemserver.Route{}
	answers := map[string]func(c *gin.Context, id int64){
		"json":   func(c *gin.Context, id int64) { c.JSON(http.StatusCreated, gin.H{"id": id}) },
		"string": func(c *gin.Context, id int64) { c.String(http.StatusAccepted, "order %d", id) },
		"status": func(c *gin.Context, id int64) {
			c.Header("Location", fmt.Sprintf("/orders/%d", id))
			c.Status(http.StatusNoContent)
		},
		"data": func(c *gin.Context, id int64) {
			c.Data(http.StatusCreated, "text/csv", fmt.Appendf(nil, "id\n%d\n", id))
		},
		"stream": func(c *gin.Context, id int64) {
			n := 0
			c.Stream(func(w io.Writer) bool {
				n++
				fmt.Fprintf(w, "part %d of order %d\n", n, id)
				return n < 3
			})
		},
	}
	for name, answer := range answers {
		r.POST("/"+name, idemgin.Handle(s.keys, route, func(c *gin.Context) {
			id, err := s.insert(c)
			if err != nil {
				c.AbortWithError(http.StatusInternalServerError, err)
				return
			}
			answer(c, id)
		}))
	}
	// gin's own bookkeeping of a response, read back by the handler.
	r.POST("/bookkeeping", idemgin.Handle(s.keys, route, func(c *gin.Context) {
		if _, err := s.insert(c); err != nil {
			c.AbortWithError(http.StatusInternalServerError, err)
			return
		}
		c.Writer.WriteHeader(http.StatusCreated)
		c.Writer.WriteHeader(0) // ignored, as gin ignores it
		c.Writer.WriteString("ab")
		c.Writer.WriteString("cd")
		c.Status(http.StatusAccepted) // too late: the status is sent
		fmt.Fprintf(c.Writer, " status=%d size=%d written=%v", c.Writer.Status(), c.Writer.Size(), c.Writer.Written())
	}))
	// The wiring a new user tries first: the middleware around a gin
	// handler that answers on gin's writer.
	r.POST("/naive", func(c *gin.Context) {
		s.keys.Middleware(route)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			id, err := s.insert(c)
			if err != nil {
				c.AbortWithError(http.StatusInternalServerError, err)
				return
			}
			c.JSON(http.StatusCreated, gin.H{"id": id})
		})).ServeHTTP(c.Writer, c.Request)
	})
	s.srv = httptest.NewServer(r)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) insert(c *gin.Context) (int64, error) {
	s.runs.Add(1)
	var body struct{ Item string }
	if err := c.ShouldBindJSON(&body); err != nil {
		return 0, err
	}
	res, err := idemserver.Tx(c.Request.Context()).ExecContext(c.Request.Context(), `INSERT INTO orders (item) VALUES (?)`, body.Item)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (s *shop) orders(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (s *shop) post(t *testing.T, path, key string) answer {
	t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestGinHelpersAreStoredAndReplayed: whatever gin helper a handler
// answers with, the first request gets that answer once it is stored, and
// the retry gets the same status, content type and body, replayed, with
// one order made.
func TestGinHelpersAreStoredAndReplayed(t *testing.T) {
	for _, tc := range []struct{ path, status, contentType, body string }{
		{"/json", "201", "application/json; charset=utf-8", `{"id":1}`},
		{"/string", "202", "text/plain; charset=utf-8", "order 1"},
		{"/status", "204", "", ""},
		{"/data", "201", "text/csv", "id\n1\n"},
		{"/stream", "200", "text/plain; charset=utf-8", "part 1 of order 1\npart 2 of order 1\npart 3 of order 1\n"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			s := newShop(t)
			first := s.post(t, tc.path, "k1")
			again := s.post(t, tc.path, "k1")
			for i, a := range []answer{first, again} {
				if fmt.Sprint(a.status) != tc.status || a.header.Get("Content-Type") != tc.contentType || a.body != tc.body {
					t.Fatalf("answer %d: %d %q %q; want %s %q %q", i, a.status, a.header.Get("Content-Type"), a.body, tc.status, tc.contentType, tc.body)
				}
			}
			if first.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replayed flags %q and %q, want none and true", first.header.Get("Idempotent-Replayed"), again.header.Get("Idempotent-Replayed"))
			}
			if tc.path == "/status" && again.header.Get("Location") != "/orders/1" {
				t.Fatalf("the replay's Location is %q", again.header.Get("Location"))
			}
			if s.runs.Load() != 1 || s.orders(t) != 1 {
				t.Fatalf("%d runs, %d orders; want 1 and 1", s.runs.Load(), s.orders(t))
			}
		})
	}
}

// TestTheMiddlewareAroundAGinHandlerFailsLoudly: without Handle, a gin
// handler answers on gin's writer; idemserver sees the writer written,
// rolls the order back, stores nothing and logs why, so the retry is not
// answered with something the client was never told.
func TestTheMiddlewareAroundAGinHandlerFailsLoudly(t *testing.T) {
	s := newShop(t)
	first := s.post(t, "/naive", "k1")
	if first.status != http.StatusCreated || first.body != `{"id":1}` || s.orders(t) != 0 {
		t.Fatalf("first: %d %q, %d orders; want gin's own 201, untouched, and the order rolled back", first.status, first.body, s.orders(t))
	}
	if !strings.Contains(s.logs.String(), "answered on the server's own writer") || !strings.Contains(s.logs.String(), "idemgin") {
		t.Fatalf("the log says %q, want the cause and the remedy", s.logs.String())
	}
	again := s.post(t, "/naive", "k1")
	if again.header.Get("Idempotent-Replayed") != "" || s.runs.Load() != 2 {
		t.Fatalf("the retry: replayed %q after %d runs; want a fresh run, nothing having been stored", again.header.Get("Idempotent-Replayed"), s.runs.Load())
	}
}

// TestGinsBookkeepingHolds: the writer Handle gives a handler keeps gin's
// rules: a status of 0, or one set after the body began, is ignored, and
// Size counts every byte; the answer stored is what was sent.
func TestGinsBookkeepingHolds(t *testing.T) {
	s := newShop(t)
	first := s.post(t, "/bookkeeping", "k1")
	again := s.post(t, "/bookkeeping", "k1")
	want := "abcd status=201 size=4 written=true"
	if first.status != http.StatusCreated || first.body != want || again.status != http.StatusCreated || again.body != want {
		t.Fatalf("first %d %q, again %d %q; want 201 %q twice", first.status, first.body, again.status, again.body, want)
	}
}
