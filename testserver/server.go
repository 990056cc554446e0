package testserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// serverReaders is the size of the server's read pool: the GET endpoints
// and Stats, which in WAL mode read beside the writer.
const serverReaders = 4

// Server is the reference server: an http.Handler over a SQLite database,
// or over a PostgreSQL database that any number of Servers (replicas, in
// one process or many) may share.
// Create it with New and release it with Close. It is safe for concurrent
// use.
type Server struct {
	cfg     Config
	db      *store
	keys    *idemserver.Keys
	unkeyed *idemserver.Keys // the layer without keys, under Config.DisableIdempotency
	gateway *Gateway
	dice    *faultDice
	log     *slog.Logger
	mux     *http.ServeMux
	stats   counters

	// ctx ends when Close starts: delays and gateway calls stop waiting.
	ctx    context.Context
	cancel context.CancelFunc

	sweeperDone chan struct{}

	mu       sync.Mutex // guards closed and the Add side of inflight
	closed   bool
	inflight sync.WaitGroup
	closeErr error

	// beforeFinish, if set, runs before the last phase of a charge: a seam
	// for tests that need a request to stop between its phases.
	beforeFinish atomic.Pointer[func(ctx context.Context)]
}

// New opens (or creates) the database at cfg.Path, creates the schema
// (on PostgreSQL: the tables, in an existing database), opens the
// idempotency layer (package idemserver, whose key table lives in the same
// database) and the fake payment gateway on the same database, and starts
// the retention sweeper. The caller must call Close.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	db, err := openStore(context.Background(), cfg.Path, cfg.BusyTimeout, serverReaders, serverSchema)
	if err != nil {
		return nil, err
	}
	gw, err := NewGateway(GatewayConfig{
		Path:        cfg.Path,
		Faults:      cfg.Faults.Gateway,
		Seed:        cfg.Faults.Seed,
		BusyTimeout: cfg.BusyTimeout,
		Now:         cfg.Now,
		Logger:      cfg.Logger.With("component", "gateway"),
	})
	if err != nil {
		db.close()
		return nil, err
	}
	s := &Server{
		cfg:         cfg,
		db:          db,
		gateway:     gw,
		dice:        newFaultDice(cfg.Faults),
		log:         cfg.Logger,
		sweeperDone: make(chan struct{}),
	}
	if s.keys, err = s.openKeys(context.Background(), cfg.Dialect.keyHeader(), cfg.Dialect.KeyField); err == nil && cfg.DisableIdempotency {
		if s.unkeyed, err = s.openKeys(context.Background(), "X-Idempotency-Disabled", ""); err != nil {
			s.keys.Close()
		}
	}
	if err != nil {
		gw.Close()
		db.close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	go func() {
		defer close(s.sweeperDone)
		s.keys.Run(s.ctx) // the retention sweeper; it logs its own errors
	}()
	return s, nil
}

// routes registers the endpoints. Each path also gets a method-less
// pattern answering 405, and "/" answers 404, so that every error is a
// problem document rather than ServeMux's plain text.
func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.Handle("POST /reservations", s.mutating(s.postReservation()))
	s.mux.HandleFunc("GET /reservations/{id}", s.getReservation)
	s.mux.Handle("POST /charges", s.mutating(s.postCharge()))
	s.mux.HandleFunc("GET /charges", s.listCharges)
	s.mux.HandleFunc("GET /charges/{id}", s.getCharge)
	s.mux.Handle("PUT /inventory/{item_id}", s.mutating(s.putInventory()))
	s.mux.HandleFunc("GET /inventory/{item_id}", s.getInventory)
	s.mux.HandleFunc("GET /stats", s.getStats)
	for path, allow := range map[string]string{
		"/reservations":        "POST",
		"/reservations/{id}":   "GET, HEAD",
		"/charges":             "GET, HEAD, POST",
		"/charges/{id}":        "GET, HEAD",
		"/inventory/{item_id}": "GET, HEAD, PUT",
		"/stats":               "GET, HEAD",
	} {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, problem(http.StatusMethodNotAllowed, ProblemMethodNotAllowed, "Method not allowed",
				fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problem(http.StatusNotFound, ProblemNotFound, "Not found",
			fmt.Sprintf("no endpoint at %s", r.URL.Path)))
	})
}

// ServeHTTP serves one request. After Close it answers 503.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeProblem(w, problem(http.StatusServiceUnavailable, ProblemUnavailable, "Server closed", "the server is shutting down"))
		return
	}
	defer s.inflight.Done()

	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	s.mux.ServeHTTP(rec, r)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("key", truncate(r.Header.Get(s.cfg.Dialect.keyHeader()), 64)),
		slog.Int("status", rec.status),
		slog.Bool("replayed", rec.Header().Get(HeaderReplayed) == "true"),
		slog.Duration("took", time.Since(start)))
}

// statusRecorder remembers the status a handler wrote, for the log. Status
// 0 means no response was written (the connection was hung up). Unwrap lets
// http.ResponseController reach the connection to hijack it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Gateway returns the fake payment gateway the server charges through, for
// tests that count its captures.
func (s *Server) Gateway() *Gateway { return s.gateway }

// enter registers work that uses the database (a request, a Sweep, a
// Stats), so that Close waits for it before closing the database. It
// reports false after Close; otherwise the caller must call
// s.inflight.Done when the work ends.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

// Close stops the sweeper, ends the waits of requests in progress (delays
// and gateway calls fail), waits for every request to return, and closes
// the database. Requests arriving after Close get 503. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	s.mu.Unlock()

	s.cancel()
	<-s.sweeperDone
	s.inflight.Wait()
	err := s.keys.Close()
	if s.unkeyed != nil {
		err = errors.Join(err, s.unkeyed.Close())
	}
	err = errors.Join(err, s.gateway.Close(), s.db.close())
	s.mu.Lock()
	s.closeErr = err
	s.mu.Unlock()
	return err
}

// untilClose returns ctx, ended also when the server closes: the layer's
// work context does not end when the client goes away (a request that
// claimed its key should finish), but a gateway call should when the
// server stops.
func (s *Server) untilClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// internalError answers 500 for an error that is the server's own fault
// (the database failing); it is logged, and the client may retry.
//
// Two failures are not the server's fault and get 503 with Retry-After
// instead, since a retry may well succeed: a database that cannot be
// reached (PostgreSQL down or restarting), and a transaction that kept
// conflicting with concurrent ones beyond the retries the server allows.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
		writeProblem(w, problem(http.StatusServiceUnavailable, ProblemUnavailable, "Server closing", "the server is shutting down; retry"))
		return
	}
	if s.db.flavor == flavorPostgres && (unavailable(err) || errors.Is(err, ErrContention)) {
		s.log.WarnContext(r.Context(), "database unavailable or contended", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		detail := "the database cannot be reached; retry with the same Idempotency-Key"
		if errors.Is(err, ErrContention) {
			detail = "the request kept conflicting with concurrent ones; retry with the same Idempotency-Key"
		}
		writeProblem(w, problem(http.StatusServiceUnavailable, ProblemUnavailable, "Database unavailable", detail))
		return
	}
	s.log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	writeProblem(w, problem(http.StatusInternalServerError, ProblemInternal, "Internal error", "the server failed; retry with the same Idempotency-Key"))
}
