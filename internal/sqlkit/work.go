package sqlkit

import (
	"context"
	"errors"
)

// ErrOutsideTx is the error of a statement run on the database, not on
// the request's transaction, while that transaction was open, where the
// database's glue can tell (SQLite's).
var ErrOutsideTx = errors.New("the database was used outside the request's transaction while it was open: " +
	"a handler writes through the request's transaction (idemserver.Tx), never through the database itself")

// Work is what a request's context tells a database's glue about the
// request's transaction.
type Work interface {
	// Holding reports whether the request's transaction is open and its
	// handler running.
	Holding() bool
	// Misused reports err, a statement run outside the request's
	// transaction while it was open: the request then fails.
	Misused(err error)
	// Met reports err, the error a statement of the request's
	// transaction met, where the glue sees the transaction's statements
	// (Observe): a serialization failure or a deadlock runs the
	// transaction again, whatever the handler answered.
	Met(err error)
}

type workKey struct{}

// WithWork returns ctx carrying w.
func WithWork(ctx context.Context, w Work) context.Context {
	return context.WithValue(ctx, workKey{}, w)
}

// WorkFrom returns the Work ctx carries, or nil.
func WorkFrom(ctx context.Context) Work {
	w, _ := ctx.Value(workKey{}).(Work)
	return w
}

type internalKey struct{}

// Internal reports whether ctx is that of a transaction begun through a
// DB of this package (idemserver's own), not by a handler or a program on
// the database itself.
func Internal(ctx context.Context) bool { return ctx.Value(internalKey{}) != nil }
