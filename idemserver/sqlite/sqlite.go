// Package sqlite is idemserver on SQLite, through modernc.org/sqlite (pure
// Go, no cgo). Importing it lets idemserver.New take a *sql.DB of the
// driver "sqlite"; Open opens one as Keys needs it.
//
// SQLite takes one writer at a time: with Open, every transaction takes
// the write lock at its start (BEGIN IMMEDIATE), so the write lock is the
// lock on every key, and the one connection makes writers queue in Go, in
// order. A handler therefore writes through idemserver.Tx, never through
// the *sql.DB, while it runs: the *sql.DB waits for the connection the
// request's own transaction holds, until the request's work times out.
package sqlite

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/idemkit/idem/internal/sqlkit/sqlitekit"
)

func init() { sqlkit.Register(sqlitekit.Flavor) }

// Open opens (creating if needed) the SQLite database at path the way
// Keys needs it: WAL with synchronous=FULL (a reported commit survives a
// power cut), a 5 s busy_timeout, every transaction BEGIN IMMEDIATE (the
// write lock is taken first, so two requests under one key run one after
// the other), and one connection, so that writers queue in Go in order.
// "" or ":memory:" opens a database in memory.
func Open(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	name := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) + "?" + q.Encode()
	if path == "" || path == ":memory:" {
		name = ":memory:?" + q.Encode()
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, fmt.Errorf("idemserver/sqlite: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}
