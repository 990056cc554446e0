// Package sqlitekit is SQLite's flavour of the SQL substrate, on
// modernc.org/sqlite.
package sqlitekit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/idemkit/idem/internal/sqlkit"
	"modernc.org/sqlite"
)

// Flavor is SQLite's flavour: ? and ?N as written, transactions serial
// by the write lock (BEGIN IMMEDIATE, from the data source name) and, on
// a database of Connector, by its gate; no row locks.
var Flavor = &sqlkit.Flavor{
	Name:         "SQLite",
	Package:      "github.com/idemkit/idem/idemserver/sqlite",
	Placeholders: sqlkit.Numbered,
	Tokens: map[string]string{
		"{{serial}}":              "INTEGER PRIMARY KEY",
		"{{int64}}":               "INTEGER",
		"{{blob}}":                "BLOB",
		"{{text}}":                "TEXT",
		"{{table_options}}":       "",
		"{{indexes}}":             "",
		"{{lock_key}}":            "",
		"{{for_update}}":          "",
		"{{skip_locked}}":         "",
		"{{on_conflict_nothing}}": " ON CONFLICT (principal, idem_key) DO NOTHING",
	},
	Returning: true,
	Classify:  Class,
	Driver: func(d driver.Driver) bool {
		_, ok := d.(*sqlite.Driver)
		return ok
	},
	Probe: func(ctx context.Context, db *sql.DB) (bool, string, error) {
		var v string
		if err := db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v); err != nil {
			return false, "", err
		}
		return true, "SQLite " + v, nil
	},
}

// Class classifies an error of modernc's SQLite: SQLITE_BUSY and
// SQLITE_LOCKED (the busy_timeout ran out waiting for another
// connection's lock) are Unavailable.
func Class(err error) sqlkit.Class {
	var se *sqlite.Error
	if errors.As(err, &se) {
		if c := se.Code() & 0xff; c == 5 || c == 6 {
			return sqlkit.Unavailable
		}
	}
	return sqlkit.Other
}

// Busy reports whether err is SQLITE_BUSY or SQLITE_LOCKED.
func Busy(err error) bool { return Class(err) == sqlkit.Unavailable }
