package idemserver

import (
	"context"
	"database/sql"
)

// Tx returns the transaction of the request: on an atomic route the one
// its key row lives in; on a phased route the final one, begun at the
// first call and fenced by the claim. It is nil outside idemserver.
func Tx(ctx context.Context) *sql.Tx {
	return nil
}

// Key returns the principal and key of the request; ok is false outside
// idemserver and on an unkeyed request.
func Key(ctx context.Context) (principal, key string, ok bool) {
	return "", "", false
}

// DownstreamKey returns the key to pass to a downstream service for step:
// stable across every attempt of one request (a random seed stored in its
// key row, and step), and never the same for two key rows. It is "" on an
// unkeyed request and outside idemserver.
func DownstreamKey(ctx context.Context, step string) string {
	return ""
}

// Step runs a phased route's call to the outside world as a recovery
// point. If an earlier attempt recorded a result for name, Step returns it
// without calling fn. Otherwise it calls fn, outside any transaction, with
// DownstreamKey(ctx, name), and records its result in its own fenced
// transaction, renewing the claim's lease. An error from fn is returned
// and nothing is recorded. ErrLockLost means the claim lapsed or was taken
// over: the handler must stop. ErrNotPhased outside a phased route,
// ErrTxBegun after Tx.
func Step(ctx context.Context, name string, fn func(ctx context.Context, downstreamKey string) ([]byte, error)) ([]byte, error) {
	return nil, errUnimplemented
}
