package sqlkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
)

// Flavor is one database's flavour of SQL, as the protocol above needs
// it. A flavour's package fills it in and registers it.
type Flavor struct {
	// Name is the database's name for messages ("PostgreSQL").
	Name string

	// Package is the import path of the flavour's package, named in the
	// error of a database whose flavour no imported package registered.
	Package string

	// Placeholders is how statements spell their parameters.
	Placeholders Placeholders

	// Tokens are replaced in statements before their placeholders:
	// {{serial}} (an id column with its PRIMARY KEY), {{int64}},
	// {{blob}}, {{text}} (text in a UNIQUE or PRIMARY KEY),
	// {{table_options}} (after a CREATE TABLE's closing parenthesis: its
	// engine and character set, or ""), {{indexes}} (more indexes inside
	// the key table's CREATE TABLE, each led by a comma, or ""),
	// {{lock_key}} (the end of the SELECT that reads a key's row: " FOR
	// UPDATE" where plain reads neither lock nor conflict, as at READ
	// COMMITTED, else ""), {{for_update}} (a lock on the rows a
	// SELECT reads, or ""), {{skip_locked}} (a lock that skips rows locked
	// by others, or ""), {{on_conflict_nothing}} (the end of an INSERT of
	// a key row that does nothing if the key has one).
	Tokens map[string]string

	// TimeoutHint, if set, names in the log of a request whose work
	// timed out what makes a handler hang on this database.
	TimeoutHint string

	// Returning says whether INSERT ... RETURNING id works; if not, the
	// id is the statement's LastInsertId.
	Returning bool

	// TxOptions gives the options of a transaction at level on
	// database/sql; nil options mean the driver's default, which may
	// come from the data source name (SQLite's BEGIN IMMEDIATE).
	TxOptions func(level sql.IsolationLevel) *sql.TxOptions

	// Classify classifies an error of the driver that Generic leaves
	// Other; nil classifies nothing more.
	Classify func(error) Class

	// SchemaLock is run first in the transaction that creates tables, so
	// that processes starting together create them one after the other;
	// "" runs nothing. NoSchemaLock reports whether its failure says the
	// database has no such lock (the tables are then created without).
	SchemaLock   string
	NoSchemaLock func(error) bool

	// InlineIndexes says that the key table's indexes are declared in its
	// CREATE TABLE ({{indexes}}), and no CREATE INDEX runs: MySQL has no
	// CREATE INDEX IF NOT EXISTS.
	InlineIndexes bool

	// TablesQuery counts which of two tables (? and ?) exist; when both
	// do, no DDL runs. "" always runs the (IF NOT EXISTS) DDL.
	TablesQuery string

	// Driver reports whether a database/sql driver is this flavour's.
	Driver func(driver.Driver) bool

	// Probe asks a database behind a driver Driver does not know whether
	// it is of this flavour. An error it returns is the database's,
	// classified by Generic.
	Probe func(ctx context.Context, db *sql.DB) (bool, string, error)

	// Check, if set, reports whether the sessions of a *sql.DB of this
	// flavour are set as the protocol needs them (an error naming what is
	// missing), before any table is touched.
	Check func(ctx context.Context, db *sql.DB) error
}

// Class classifies err: an SQLSTATE it carries decides (an error the
// database sent, even inside a failed connection attempt: a server that
// answers "no such database" is reachable); else Generic's rules, then
// the flavour's.
func (f *Flavor) Class(err error) Class {
	var st sqlStater
	if errors.As(err, &st) {
		return SQLState(st.SQLState())
	}
	if c := Generic(err); c != Other || f == nil || f.Classify == nil {
		return c
	}
	return f.Classify(err)
}

// Options returns the database/sql options of a transaction at level.
func (f *Flavor) Options(level sql.IsolationLevel) *sql.TxOptions {
	if f.TxOptions == nil {
		return nil
	}
	return f.TxOptions(level)
}

var (
	flavorsMu sync.Mutex
	flavors   []*Flavor
)

// Register makes f one of the flavours New may find for a *sql.DB. A
// flavour's package registers it in its init.
func Register(f *Flavor) {
	flavorsMu.Lock()
	defer flavorsMu.Unlock()
	for _, g := range flavors {
		if g == f {
			return
		}
	}
	flavors = append(flavors, f)
}

// Flavors returns the registered flavours, in the order registered.
func Flavors() []*Flavor {
	flavorsMu.Lock()
	defer flavorsMu.Unlock()
	return append([]*Flavor(nil), flavors...)
}
