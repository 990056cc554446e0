// Package mysqlkit is MySQL's and MariaDB's flavour of the SQL substrate,
// on github.com/go-sql-driver/mysql.
//
// Every transaction runs at READ COMMITTED (a handler's at SERIALIZABLE
// when its route asks for it), and the key row is read FOR UPDATE: the
// latest committed version, locked. InnoDB's stronger levels
// take gap locks: at REPEATABLE READ and SERIALIZABLE a request that
// looks up a key not yet stored locks the gap around it in the unique
// index until it commits, so every other request whose key falls in that
// gap (on a small table, every request) waits for it, and concurrent
// duplicates deadlock on each other's gap. READ COMMITTED takes no gap
// locks: a concurrent duplicate's look-up waits on the first one's
// uncommitted claim, then finds its row and is replayed; a takeover reads
// the claim locked, so two requests never both take over one lapsed
// claim. A
// handler's own reads are not repeatable: one that reads a row and then
// writes what it read locks it first (SELECT ... FOR UPDATE) or writes
// relative to it. A deadlock (1213), a lock wait timeout (1205) and, with
// innodb_snapshot_isolation, a row changed since the snapshot (1020) are
// Serialization: the transaction runs again.
package mysqlkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/internal/sqlkit"
)

// ErrSession is wrapped by the error of Check for a session of a MySQL or
// MariaDB database that Keys cannot keep its promises on.
var ErrSession = errors.New("idemserver/mysql: the database session does not meet Keys' requirements")

// MaxText is the length, in bytes, of the key table's text columns that
// are part of a key (principal, idem_key, a step's name): the two of the
// unique key together stay within InnoDB's 3072 bytes of an index key.
const MaxText = 768

// Flavor is MySQL's and MariaDB's flavour: ? placeholders, InnoDB tables
// of binary strings for what identifies a key (compared byte for byte,
// case and trailing spaces included), transactions at the isolation level
// asked for (see the package documentation), row locks.
var Flavor = &sqlkit.Flavor{
	Name:         "MySQL",
	Package:      "github.com/idemkit/idem/idemserver/mysql",
	Placeholders: sqlkit.Positional,
	Tokens: map[string]string{
		"{{serial}}":              "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
		"{{int64}}":               "BIGINT",
		"{{blob}}":                "LONGBLOB",
		"{{text}}":                fmt.Sprintf("VARBINARY(%d)", MaxText),
		"{{table_options}}":       " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
		"{{indexes}}":             ",\n\t\tKEY expires (finished, expires_at)",
		"{{lock_key}}":            " FOR UPDATE",
		"{{for_update}}":          " FOR UPDATE",
		"{{skip_locked}}":         " FOR UPDATE SKIP LOCKED",
		"{{on_conflict_nothing}}": " ON DUPLICATE KEY UPDATE id = id",
	},
	Returning:     false,
	InlineIndexes: true,
	Check:         Check,
	TxOptions:     txOptions,
	Classify:      Class,
	TimeoutHint: "did the handler write through the database instead of its transaction, to a row the " +
		"transaction locked? Such a statement waits for the transaction until the work times out, then commits on its own",
	TablesQuery: `SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name IN (?, ?)`,
	Driver: func(d driver.Driver) bool {
		_, ok := d.(*mysql.MySQLDriver)
		return ok
	},
	Probe: func(ctx context.Context, db *sql.DB) (bool, string, error) {
		// Neither PostgreSQL nor SQLite knows @@ variables.
		var v, comment string
		if err := db.QueryRowContext(ctx, `SELECT VERSION(), @@version_comment`).Scan(&v, &comment); err != nil {
			return false, "", err
		}
		return true, v + " (" + comment + ")", nil
	},
}

// txOptions runs a transaction at SERIALIZABLE when it is asked for (a
// route that asks for it), else at READ COMMITTED (see the package
// documentation).
func txOptions(level sql.IsolationLevel) *sql.TxOptions {
	if level == sql.LevelSerializable {
		return &sql.TxOptions{Isolation: sql.LevelSerializable}
	}
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// The server's error numbers Class knows.
const (
	errConCount        = 1040 // too many connections
	errServerShutdown  = 1053 // server shutdown in progress
	errDupEntry        = 1062 // duplicate entry for a unique key
	errCheckRead       = 1020 // record changed since last read (innodb_snapshot_isolation)
	errLockWaitTimeout = 1205 // lock wait timeout exceeded
	errLockDeadlock    = 1213 // deadlock found
	errOptionPrevents  = 1290 // --read-only (or --super-read-only) prevents the statement
	errReadOnlyTx      = 1792 // statement in a READ ONLY transaction
	errConnKilled      = 1927 // connection was killed (MariaDB)
	errQueryKilled     = 1317 // query execution was interrupted (KILL QUERY)
	errReadOnlyMode    = 1836 // running in read-only mode (MySQL)
	errStatementTime   = 1969 // max_statement_time exceeded (MariaDB)
	errExecutionTime   = 3024 // max_execution_time exceeded (MySQL)
)

// Class classifies what sqlkit.Generic leaves: the server's deadlock,
// lock wait timeout and changed-record errors are Serialization (the
// transaction runs again); a duplicate key is Unique; too many
// connections, a shutdown, a killed connection, a statement cancelled or
// past its time limit, and a server or transaction that takes no writes
// (a replica, --read-only) are Unavailable, as is a connection the driver
// found broken.
func Class(err error) sqlkit.Class {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errLockDeadlock, errLockWaitTimeout, errCheckRead:
			return sqlkit.Serialization
		case errDupEntry:
			return sqlkit.Unique
		case errConCount, errServerShutdown, errOptionPrevents, errReadOnlyTx, errConnKilled, errQueryKilled,
			errReadOnlyMode, errStatementTime, errExecutionTime:
			return sqlkit.Unavailable
		}
		return sqlkit.Other
	}
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, mysql.ErrPktSync) || errors.Is(err, mysql.ErrPktSyncMul) ||
		errors.Is(err, mysql.ErrMalformPkt) {
		return sqlkit.Unavailable
	}
	return sqlkit.Other
}

// Check reports, with an error wrapping ErrSession that names what is
// missing, whether the sessions of db let Keys keep its promises: a
// strict sql_mode (STRICT_TRANS_TABLES or STRICT_ALL_TABLES), without
// which a value too long for its column is cut short with a warning,
// and two keys that differ past the cut would be one.
func Check(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, `SELECT @@SESSION.sql_mode`).Scan(&mode); err != nil {
		return err
	}
	for _, m := range strings.Split(mode, ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return nil
		}
	}
	return fmt.Errorf("%w: sql_mode %q is not strict (it lacks STRICT_TRANS_TABLES and STRICT_ALL_TABLES), so a value too long "+
		"for its column would be cut short instead of refused; set it on the server, or add "+
		"sql_mode='STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION' (URL-encoded) to the DSN", ErrSession, mode)
}

// Unavailable reports whether err says MySQL could not be reached or
// cannot serve now.
func Unavailable(err error) bool { return Flavor.Class(err) == sqlkit.Unavailable }
