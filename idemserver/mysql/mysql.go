// Package mysql is idemserver on MySQL 8 and MariaDB 10.11 or later,
// through github.com/go-sql-driver/mysql. Importing it lets
// idemserver.New take a *sql.DB of the driver "mysql":
//
//	import (
//		"database/sql"
//
//		"github.com/idemkit/idem/idemserver"
//		_ "github.com/idemkit/idem/idemserver/mysql"
//	)
//
//	db, err := sql.Open("mysql", "shop:secret@tcp(db:3306)/shop")
//	...
//	keys, err := idemserver.New(ctx, idemserver.Config{DB: db})
//
// The DSN needs no parameter of its own: times are stored as integers
// (parseTime does not matter), and the claim's checks do not depend on
// clientFoundRows. The session's sql_mode must be strict
// (STRICT_TRANS_TABLES, the default of both servers, or
// STRICT_ALL_TABLES), so that a value too long for its column is refused
// rather than cut short; New fails with an error wrapping ErrSession,
// naming what is missing, when it is not. A key, a principal and a Step's
// name are each at most MaxText bytes (Config.MaxKeyLength must not
// exceed it); a stored answer must fit the server's max_allowed_packet.
//
// The tables are InnoDB's, their key columns binary strings (VARBINARY),
// so that keys compare byte for byte, case and trailing spaces included.
// Every transaction of a key runs at READ COMMITTED, with the key row read
// FOR UPDATE: REPEATABLE READ and SERIALIZABLE would lock the gap around
// each key not yet stored until its request commits, making unrelated
// requests wait on each other and concurrent duplicates deadlock. A
// concurrent duplicate waits on the first request's row and is replayed.
// A handler's reads are therefore not repeatable: a handler that reads a
// row and writes what it read locks it first (SELECT ... FOR UPDATE) or
// writes relative to it (UPDATE ... SET n = n + 1), or a concurrent
// request's update is lost. A deadlock (1213), a lock wait timeout (1205)
// or, with innodb_snapshot_isolation, a row changed since it was read
// (1020) runs the transaction again, handler included, as a serialization
// failure does on PostgreSQL; the handler reports such an error of its
// own statements with idemserver.Fail. A server or transaction that takes
// no writes (1290, 1792: a replica, --read-only) and a connection lost
// are unavailable: 503 with Retry-After.
package mysql

import (
	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/idemkit/idem/internal/sqlkit/mysqlkit"
)

func init() { sqlkit.Register(mysqlkit.Flavor) }

// ErrSession is wrapped by the error of idemserver.New for a MySQL or
// MariaDB session whose settings would let Keys break its promises (a
// sql_mode that is not strict); the error names what is missing.
var ErrSession = mysqlkit.ErrSession

// MaxText is the longest key, principal or Step name, in bytes, that the
// key tables hold on MySQL.
const MaxText = mysqlkit.MaxText
