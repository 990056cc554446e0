package idemserver

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // registers the pure-Go driver "sqlite"
)

// OpenSQLite opens (creating if needed) the SQLite database at path the way
// Keys needs it: WAL with synchronous=FULL (a reported commit survives a
// power cut), a 5 s busy_timeout, every transaction BEGIN IMMEDIATE (the
// write lock is taken first, so two requests under one key run one after
// the other), and one connection, so that writers queue in Go in order.
// A handler must therefore use Tx, never the *sql.DB, while it runs.
func OpenSQLite(path string) (*sql.DB, error) {
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
		return nil, fmt.Errorf("idemserver: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}
