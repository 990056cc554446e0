// Package sqlite is idemserver on SQLite, through modernc.org/sqlite (pure
// Go, no cgo). Importing it lets idemserver.New take a *sql.DB of the
// driver "sqlite"; Open opens one as Keys needs it.
//
// SQLite takes one writer at a time: with Open, every transaction takes
// the write lock at its start (BEGIN IMMEDIATE), so the write lock is the
// lock on every key, and transactions queue for it in Go, in order. A
// handler writes through idemserver.Tx, never through the *sql.DB, while
// it runs: Open's database tells such a statement (idemserver.ErrOutsideTx).
package sqlite

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemserver/internal/sqlitekit"
	"github.com/idemkit/idem/internal/sqlkit"
)

func init() { sqlkit.Register(sqlitekit.Flavor) }

// busyTimeout is how long a statement waits for the write lock.
const busyTimeout = 5 * time.Second

// memories numbers the databases Open opens in memory.
var memories atomic.Int64

// Open opens (creating if needed) the SQLite database at path the way
// Keys needs it: WAL with synchronous=FULL (a reported commit survives a
// power cut), a 5 s busy_timeout, and every transaction BEGIN IMMEDIATE
// (the write lock is taken first, so two requests under one key run one
// after the other) once the transactions before it, of any connection of
// the database, have ended, in the order they began. A statement outside
// any transaction runs on a connection of its own: given the context of
// a request whose transaction is open, it fails at once with
// idemserver.ErrOutsideTx; given none, it waits for the write lock up to
// the busy timeout, and fails so if the request held it all along. Either
// fails the request. "" or ":memory:" opens a database in memory, shared
// by the connections of the *sql.DB.
func Open(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	name := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) + "?" + q.Encode()
	if path == "" || path == ":memory:" {
		q.Set("vfs", "memdb")
		name = fmt.Sprintf("file:/idemserver-%d-%d?%s", os.Getpid(), memories.Add(1), q.Encode())
	}
	c, err := sqlitekit.Connector(name, busyTimeout)
	if err != nil {
		return nil, fmt.Errorf("idemserver/sqlite: opening %s: %w", path, err)
	}
	db := sql.OpenDB(c)
	// Transactions wait for each other at the gate, not for a connection,
	// so a statement outside them always finds one.
	db.SetMaxOpenConns(0)
	db.SetMaxIdleConns(2)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}
