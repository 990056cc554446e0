package idemserver

import (
	"context"
	"errors"
	"net/http"
)

var errUnimplemented = errors.New("idemserver: unimplemented")

// Keys is a key store in front of a service's handlers. It is safe for
// concurrent use, and any number of Keys (replicas) may share one
// database.
type Keys struct {
	cfg Config
}

// New opens the key store in cfg.DB, creating its tables if needed (under
// an advisory lock on PostgreSQL, so that replicas may start together).
func New(ctx context.Context, cfg Config) (*Keys, error) {
	return nil, errUnimplemented
}

// Handle returns the middleware of one route in front of h.
func (k *Keys) Handle(route Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, errUnimplemented.Error(), http.StatusNotImplemented)
	})
}

// Middleware is Handle for routers that take func(http.Handler)
// http.Handler, such as chi: r.With(keys.Middleware(idemserver.Route{})).
func (k *Keys) Middleware(route Route) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler { return k.Handle(route, h) }
}

// Sweep deletes the finished keys past their retention and returns how
// many; it never deletes an unfinished key.
func (k *Keys) Sweep(ctx context.Context) (int64, error) {
	return 0, errUnimplemented
}

// Run sweeps every Config.SweepInterval until ctx ends or Close.
func (k *Keys) Run(ctx context.Context) error {
	return errUnimplemented
}

// Stats returns the counters.
func (k *Keys) Stats() Stats {
	return Stats{}
}

// Close refuses new requests (503) and waits for the running ones to
// commit or roll back. It does not close Config.DB.
func (k *Keys) Close() error {
	return nil
}
