package idemserver

import (
	"errors"

	"github.com/idemkit/idem/internal/sqlkit"
)

var (
	// ErrUnauthorized, wrapped by a Config.Principal error, answers 401.
	ErrUnauthorized = errors.New("idemserver: unauthorized")

	// ErrLockLost means another request took a phased request's claim
	// over, or the holder's lease ended in real time; it can commit
	// nothing more and must stop.
	ErrLockLost = errors.New("idemserver: claim on the key taken over or its lease ended")

	// ErrNotPhased is returned by Step outside a phased route.
	ErrNotPhased = errors.New("idemserver: Step outside a phased route")

	// ErrTxBegun is returned by Step after the handler called Tx: the
	// final transaction is open and no recovery point can follow it.
	ErrTxBegun = errors.New("idemserver: Step after Tx")

	// ErrClosed is returned by Sweep after Close (requests get 503).
	ErrClosed = errors.New("idemserver: closed")

	// ErrContention means a transaction kept failing with serialization
	// failures or deadlocks after Config.Reruns runs.
	ErrContention = errors.New("idemserver: transaction kept conflicting with concurrent ones")

	// ErrUnavailable means the database could not be reached.
	ErrUnavailable = errors.New("idemserver: database unavailable")

	// ErrForeignTable is returned by New when Config.Table, or the table
	// of recovery points beside it, exists without the columns Keys
	// needs: another program's table, or a key table of an older
	// layout. Keys never alters or drops it; name another Config.Table,
	// or move the old table away.
	ErrForeignTable = errors.New("idemserver: key table exists with other columns")

	// ErrUnsupportedDatabase is returned by New when Config.DB is of no
	// kind the program's imported database packages speak (PostgreSQL
	// through pgx: idemserver/postgres; SQLite through modernc.org:
	// idemserver/sqlite); the error names the packages imported, the
	// driver, and what the database said it is.
	ErrUnsupportedDatabase = errors.New("idemserver: unsupported database: import the package of yours " +
		"(github.com/idemkit/idem/idemserver/postgres for PostgreSQL through pgx, " +
		"github.com/idemkit/idem/idemserver/sqlite for SQLite through modernc.org/sqlite)")

	// ErrOutsideTx is the error of a handler's statement, or transaction,
	// on the database itself instead of Tx while the request's transaction
	// is open; the request then answers 500, stores nothing, and logs it.
	// SQLite's package tells it (sqlite.Open says how). On PostgreSQL and
	// MySQL nothing can: such a statement on rows the transaction has not
	// locked commits on its own at once, is not undone when the request
	// fails, and runs again with a rerun; one on a row the transaction
	// locked (a row it wrote, its key row) waits for the transaction, which
	// waits for the handler, until Config.WorkTimeout: the request gets 503
	// with nothing stored, and the statement then runs and commits on its
	// own (given the request's context, it may be cancelled first). Once
	// the requests' transactions hold every connection of the pool, any
	// statement on the pool waits for one until Config.WorkTimeout, and the
	// log says the pool was exhausted.
	ErrOutsideTx = sqlkit.ErrOutsideTx

	// ErrKeyRowGone means a phased request's key row was deleted while
	// it ran (by something outside Keys, which never deletes one).
	ErrKeyRowGone = errors.New("idemserver: key row deleted while its request ran")
)
