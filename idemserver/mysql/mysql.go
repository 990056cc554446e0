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
// Every transaction of a key runs at READ COMMITTED (a handler's at
// SERIALIZABLE on a route that asks for it, idemserver.Route.Serializable,
// with the gap locks that follow), with the key row read FOR UPDATE: REPEATABLE READ and SERIALIZABLE would lock the gap around
// each key not yet stored until its request commits, making unrelated
// requests wait on each other and concurrent duplicates deadlock. A
// concurrent duplicate waits on the first request's row and is replayed.
// A handler's reads are therefore not repeatable: a handler that reads a
// row and writes what it read locks it first (SELECT ... FOR UPDATE) or
// writes relative to it (UPDATE ... SET n = n + 1), or a concurrent
// request's update is lost. A deadlock (1213), a lock wait timeout (1205)
// or, with innodb_snapshot_isolation, a row changed since it was read
// (1020) runs the transaction again, handler included, as a serialization
// failure does on PostgreSQL; on a *sql.DB of Open, Keys sees such an
// error of the handler's own statements, whatever the handler answers
// (elsewhere the handler reports it with idemserver.Fail). A deadlock
// rolls back the whole transaction, and the connection's later statements
// would commit on their own: Open's connections fail them instead. A server or transaction that takes
// no writes (1290, 1792: a replica, --read-only) and a connection lost
// are unavailable: 503 with Retry-After.
package mysql

import (
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/idemserver/internal/mysqlkit"
	"github.com/idemkit/idem/internal/sqlkit"
)

func init() { sqlkit.Register(mysqlkit.Flavor) }

// Open opens a *sql.DB of go-sql-driver/mysql at dsn for
// idemserver.Config.DB whose connections tell Keys the errors of a
// request's transaction: a deadlock or a lock wait timeout that one of
// the handler's statements meets runs the transaction again, whatever
// the handler answers then, and after a deadlock (which rolls the whole
// transaction back) the transaction's later statements fail with it
// instead of committing on their own. A *sql.DB opened otherwise
// (sql.Open("mysql", dsn)) serves as well, but Keys then learns of such
// an error only from idemserver.Fail. The driver connection conn.Raw
// gives has an Unwrap method returning the driver's own.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("idemserver/mysql: %w", err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("idemserver/mysql: %w", err)
	}
	return sql.OpenDB(sqlkit.Observe(c, mysqlkit.Flavor.Class)), nil
}

// ErrSession is wrapped by the error of idemserver.New for a MySQL or
// MariaDB session whose settings would let Keys break its promises (a
// sql_mode that is not strict); the error names what is missing.
var ErrSession = mysqlkit.ErrSession

// MaxText is the longest key, principal or Step name, in bytes, that the
// key tables hold on MySQL.
const MaxText = mysqlkit.MaxText
