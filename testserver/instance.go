package testserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Instance is a Server listening on a TCP address, serving HTTP/1.1.
type Instance struct {
	// URL is the base URL, such as http://127.0.0.1:41234.
	URL string
	// Server is the handler being served.
	Server *Server

	listener net.Listener
	http     *http.Server
	client   *http.Client
	served   chan error
}

// maxHeaderWait bounds the wait for a request's header (see
// Config.ReadTimeout).
const maxHeaderWait = 10 * time.Second

// Listen creates a Server from cfg and serves it on addr ("host:port";
// empty means 127.0.0.1 on a free port). The caller must call Close or
// Shutdown.
func Listen(cfg Config, addr string) (*Instance, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	cfg = srv.cfg // with its defaults
	l, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("testserver: listening on %s: %w", addr, err)
	}
	in := &Instance{
		URL:      "http://" + l.Addr().String(),
		Server:   srv,
		listener: l,
		http: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: min(maxHeaderWait, cfg.ReadTimeout),
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			ErrorLog:          slog.NewLogLogger(srv.log.Handler(), slog.LevelWarn),
		},
		client: &http.Client{Transport: &http.Transport{}},
		served: make(chan error, 1),
	}
	go func() { in.served <- in.http.Serve(l) }()
	return in, nil
}

// TB is the part of testing.TB that Start uses; *testing.T and *testing.B
// satisfy it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Start is Listen on a loopback port for a test, like httptest.NewServer:
// it fails the test if the server cannot start and closes the server when
// the test ends.
func Start(tb TB, cfg Config) *Instance {
	tb.Helper()
	in, err := Listen(cfg, "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testserver: %v", err)
		return nil
	}
	tb.Cleanup(func() {
		if err := in.Close(); err != nil {
			tb.Fatalf("testserver: closing: %v", err)
		}
	})
	return in
}

// Client returns an HTTP client with its own connection pool, whose idle
// connections are closed by Close.
func (in *Instance) Client() *http.Client { return in.client }

// Addr returns the address the instance listens on.
func (in *Instance) Addr() string { return in.listener.Addr().String() }

// Shutdown stops accepting connections, waits for requests in progress to
// finish (until ctx ends; then it closes their connections), and closes the
// Server.
func (in *Instance) Shutdown(ctx context.Context) error {
	err := in.http.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, in.http.Close())
	}
	return in.finish(err)
}

// Close closes the listener and every connection at once, then closes the
// Server, which waits for the handlers still running. Close is for tests;
// a clean stop is Shutdown.
func (in *Instance) Close() error {
	return in.finish(in.http.Close())
}

func (in *Instance) finish(err error) error {
	if serr := <-in.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	in.served <- http.ErrServerClosed // a second Close returns at once
	in.client.CloseIdleConnections()
	return errors.Join(err, in.Server.Close())
}
