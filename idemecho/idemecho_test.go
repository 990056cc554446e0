package idemecho_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shop is an echo service on SQLite whose handlers insert an order
// through idemserver's Tx.
type shop struct {
	db     *sql.DB
	srv    *httptest.Server
	runs   atomic.Int64
	panics atomic.Bool // the panicking handlers panic after their insert
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
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	s := &shop{db: db}
	order := func(c echo.Context) (int64, error) {
		s.runs.Add(1)
		var body struct{ Item string }
		if err := c.Bind(&body); err != nil {
			return 0, err
		}
		if body.Item == "" {
			return 0, echo.NewHTTPError(http.StatusBadRequest, "an order needs an item")
		}
		res, err := idemserver.Tx(c.Request().Context()).ExecContext(c.Request().Context(), `INSERT INTO orders (item) VALUES (?)`, body.Item)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	handler := func(c echo.Context) error {
		id, err := order(c)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id})
	}
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	e.POST("/orders", idemecho.Handle(keys, idemserver.Route{}, handler))
	e.POST("/no-content", idemecho.Handle(keys, idemserver.Route{}, func(c echo.Context) error {
		if _, err := order(c); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}))
	e.POST("/string", idemecho.Handle(keys, idemserver.Route{}, func(c echo.Context) error {
		id, err := order(c)
		if err != nil {
			return err
		}
		return c.String(http.StatusAccepted, fmt.Sprintf("order %d", id))
	}))
	// echo.WrapMiddleware: safe for a handler that writes its answer
	// and returns nil, and for none other.
	e.POST("/wrapped", handler, echo.WrapMiddleware(keys.Middleware(idemserver.Route{})))
	// A handler that inserts, then returns an error.
	failing := func(c echo.Context) error {
		if _, err := order(c); err != nil {
			return err
		}
		return echo.NewHTTPError(http.StatusConflict, "the order is refused after its insert")
	}
	e.POST("/wrapped-error", failing, echo.WrapMiddleware(keys.Middleware(idemserver.Route{})))
	// A handler that inserts, then panics unless told not to, behind
	// echo's Recover: through WrapMiddleware and through Handle.
	panicking := func(c echo.Context) error {
		id, err := order(c)
		if err != nil {
			return err
		}
		if s.panics.Load() {
			panic("the handler's own bug")
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id})
	}
	recovering := e.Group("", middleware.Recover())
	recovering.POST("/wrapped-panic", panicking, echo.WrapMiddleware(keys.Middleware(idemserver.Route{})))
	recovering.POST("/handled-panic", idemecho.Handle(keys, idemserver.Route{}, panicking))
	// A handler that writes nothing and returns nil: echo answers 200.
	e.POST("/silent", idemecho.Handle(keys, idemserver.Route{}, func(c echo.Context) error {
		_, err := order(c)
		return err
	}))
	s.srv = httptest.NewServer(e)
	t.Cleanup(s.srv.Close)
	return s
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
	status   int
	body     string
	replayed string
}

func (s *shop) post(t *testing.T, path, key, body string) answer {
	t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Idempotent-Replayed")}
}

// TestEchoAnswersAreStoredAndReplayed: c.JSON, c.String and c.NoContent,
// through Handle and through echo.WrapMiddleware, are stored and replayed
// as first answered, with one order.
func TestEchoAnswersAreStoredAndReplayed(t *testing.T) {
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/orders", `{"id":1}`, 201},
		{"/string", "order 1", 202},
		{"/no-content", "", 204},
		{"/wrapped", `{"id":1}`, 201},
	} {
		t.Run(tc.path, func(t *testing.T) {
			s := newShop(t)
			first := s.post(t, tc.path, "k1", `{"item":"book"}`)
			again := s.post(t, tc.path, "k1", `{"item":"book"}`)
			if first != (answer{tc.status, tc.body, ""}) || again != (answer{tc.status, tc.body, "true"}) {
				t.Fatalf("first %+v, again %+v; want %d %q, then its replay", first, again, tc.status, tc.body)
			}
			if s.runs.Load() != 1 || s.orders(t) != 1 {
				t.Fatalf("%d runs, %d orders; want 1 and 1", s.runs.Load(), s.orders(t))
			}
		})
	}
}

// TestAReturnedErrorIsTheStoredAnswer: a handler that returns an error
// (echo.NewHTTPError) has echo's answer for it stored, and the retry gets
// that answer replayed, not an empty 200.
func TestAReturnedErrorIsTheStoredAnswer(t *testing.T) {
	s := newShop(t)
	first := s.post(t, "/orders", "k1", `{"item":""}`)
	again := s.post(t, "/orders", "k1", `{"item":""}`)
	want := `{"message":"an order needs an item"}`
	if first != (answer{400, want, ""}) || again != (answer{400, want, "true"}) {
		t.Fatalf("first %+v, again %+v; want 400 %s, then its replay", first, again, want)
	}
	if s.runs.Load() != 1 || s.orders(t) != 0 {
		t.Fatalf("%d runs, %d orders; want 1 and 0", s.runs.Load(), s.orders(t))
	}
}

// TestL6WrapMiddlewareNeverAnswers2xxForWorkRolledBack: under
// echo.WrapMiddleware, echo answers a handler's returned error after
// idemserver has finished, and echo's Recover answers a panic on a writer
// nobody reads: idemserver sees a handler that wrote nothing, or that
// panicked, rolls its insert back, stores nothing and answers 500, never
// an empty 200; the retry runs again. Handle has echo's answers given
// inside idemserver instead (TestAReturnedErrorIsTheStoredAnswer).
func TestL6WrapMiddlewareNeverAnswers2xxForWorkRolledBack(t *testing.T) {
	for _, path := range []string{"/wrapped-error", "/wrapped-panic"} {
		t.Run(path, func(t *testing.T) {
			s := newShop(t)
			s.panics.Store(true)
			for try := 1; try <= 2; try++ {
				a := s.post(t, path, "k1", `{"item":"book"}`)
				if a.status != http.StatusInternalServerError || a.replayed != "" {
					t.Fatalf("try %d: %+v, want 500", try, a)
				}
				if s.runs.Load() != int64(try) || s.orders(t) != 0 {
					t.Fatalf("try %d: %d runs, %d orders; want %d runs and every order rolled back", try, s.runs.Load(), s.orders(t), try)
				}
			}
		})
	}
}

// TestL6APanicUnderRecoverIsNever2xx: through Handle, behind echo's
// Recover, a handler that panics after its insert leaves the client a
// 500, its order rolled back; the retry runs and is stored.
func TestL6APanicUnderRecoverIsNever2xx(t *testing.T) {
	s := newShop(t)
	s.panics.Store(true)
	if a := s.post(t, "/handled-panic", "k1", `{"item":"book"}`); a.status != http.StatusInternalServerError || s.orders(t) != 0 {
		t.Fatalf("the client got %+v, %d orders; want 500 and the order rolled back", a, s.orders(t))
	}
	s.panics.Store(false)
	if a := s.post(t, "/handled-panic", "k1", `{"item":"book"}`); a != (answer{201, `{"id":1}`, ""}) || s.orders(t) != 1 {
		t.Fatalf("the retry: %+v, %d orders; want a fresh 201 and one order", a, s.orders(t))
	}
}

// TestAHandlerThatWritesNothingIsEchos200: through Handle, a handler that
// returns nil without writing gets echo's answer to it, an empty 200,
// stored and replayed.
func TestAHandlerThatWritesNothingIsEchos200(t *testing.T) {
	s := newShop(t)
	first := s.post(t, "/silent", "k1", `{"item":"book"}`)
	again := s.post(t, "/silent", "k1", `{"item":"book"}`)
	if first != (answer{200, "", ""}) || again != (answer{200, "", "true"}) || s.orders(t) != 1 {
		t.Fatalf("first %+v, again %+v, %d orders; want an empty 200, its replay, one order", first, again, s.orders(t))
	}
}
