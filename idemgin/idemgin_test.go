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
	srv  *httptest.Server // gin.New(): no recovery
	// recovering is srv's routes behind gin's Recovery, and fixed the
	// routes of the generic wirings served through Handle.
	recovering, fixed *httptest.Server
	runs              atomic.Int64
	panics            atomic.Bool // the /panic handler panics after its insert
	logs              logSink
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
	s.routes(r)
	s.srv = httptest.NewServer(r)
	t.Cleanup(s.srv.Close)
	rr := gin.New()
	rr.Use(gin.RecoveryWithWriter(io.Discard))
	s.routes(rr)
	s.recovering = httptest.NewServer(rr)
	t.Cleanup(s.recovering.Close)
	fixed := gin.New()
	for _, path := range []string{"/naive", "/adapted"} {
		fixed.POST(path, idemgin.Handle(s.keys, idemserver.Route{}, s.create))
	}
	s.fixed = httptest.NewServer(fixed)
	t.Cleanup(s.fixed.Close)
	return s
}

// create is a gin handler that inserts an order and answers 201 with its
// id.
func (s *shop) create(c *gin.Context) {
	id, err := s.insert(c)
	if err != nil {
		c.AbortWithError(http.StatusInternalServerError, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"id": id})
}

// adapt is the generic adapter of a net/http middleware to gin, as a
// user writes it (or imports it): the middleware wraps the rest of the
// chain, whose handlers answer on gin's writer.
func adapt(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		c.Abort()
	}
}

// routes registers the shop's routes on r.
func (s *shop) routes(r *gin.Engine) {
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
			s.create(c)
		})).ServeHTTP(c.Writer, c.Request)
	})
	// The generic adapter of a net/http middleware.
	r.POST("/adapted", adapt(s.keys.Middleware(route)), s.create)
	// A handler that panics after its insert.
	r.POST("/panic", idemgin.Handle(s.keys, route, func(c *gin.Context) {
		if _, err := s.insert(c); err != nil {
			c.AbortWithError(http.StatusInternalServerError, err)
			return
		}
		if s.panics.Load() {
			panic("the handler's own bug")
		}
		c.JSON(http.StatusCreated, gin.H{"paid": true})
	}))
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
	a, err := send(s.srv, path, key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// send posts an order to srv, and returns its answer or the error of a
// connection that failed.
func send(srv *httptest.Server, path, key string) (answer, error) {
	req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
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

// TestL6GenericGinWiringNeverAnswers2xx: without Handle, a gin handler
// answers on gin's writer, around idemserver, under the middleware called
// by hand or through a generic adapter of net/http middleware, with or
// without gin's Recovery (which swallows idemserver's abort): the client
// gets no answer at all (never gin's 201 for an order rolled back),
// nothing is stored, the log names the cause and idemgin, and the retry
// through the same wiring runs again (nothing stored to replay) and fails
// the same way, while a retry through Handle runs and is stored.
func TestL6GenericGinWiringNeverAnswers2xx(t *testing.T) {
	for _, path := range []string{"/naive", "/adapted"} {
		for _, recovering := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,recovery=%v", path, recovering), func(t *testing.T) {
				s := newShop(t)
				srv := s.srv
				if recovering {
					srv = s.recovering
				}
				for try := 1; try <= 2; try++ {
					if a, err := send(srv, path, "k1"); err == nil {
						t.Fatalf("try %d: the client got %d %q, want a failed connection", try, a.status, a.body)
					}
					if s.runs.Load() != int64(try) || s.orders(t) != 0 {
						t.Fatalf("try %d: %d runs, %d orders; want %d runs and every order rolled back", try, s.runs.Load(), s.orders(t), try)
					}
				}
				if !strings.Contains(s.logs.String(), "answered on the server's own writer") || !strings.Contains(s.logs.String(), "idemgin") {
					t.Fatalf("the log says %q, want the cause and the remedy", s.logs.String())
				}
				a, err := send(s.fixed, path, "k1")
				if err != nil || a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" || s.orders(t) != 1 {
					t.Fatalf("through Handle: %+v, %v, %d orders; want a fresh 201 and one order", a, err, s.orders(t))
				}
			})
		}
	}
}

// TestL6APanicUnderRecoveryIsNever2xx: a handler that panics through
// Handle, behind gin's Recovery, leaves the client a 500 for its order
// rolled back, and the log the handler's own stack; the retry runs and is
// stored.
func TestL6APanicUnderRecoveryIsNever2xx(t *testing.T) {
	s := newShop(t)
	s.panics.Store(true)
	a, err := send(s.recovering, "/panic", "k1")
	if err != nil || a.status != http.StatusInternalServerError || s.orders(t) != 0 {
		t.Fatalf("the client got %+v, %v, %d orders; want 500 and the order rolled back", a, err, s.orders(t))
	}
	if !strings.Contains(s.logs.String(), "idemgin_test.go:") || !strings.Contains(s.logs.String(), "the handler panicked") {
		t.Fatalf("the log says %q, want the panic with the handler's stack", s.logs.String())
	}
	s.panics.Store(false)
	a, err = send(s.recovering, "/panic", "k1")
	if err != nil || a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" || s.orders(t) != 1 {
		t.Fatalf("the retry: %+v, %v, %d orders; want a fresh 201 and one order", a, err, s.orders(t))
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
