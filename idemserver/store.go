package idemserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/idemkit/idem/internal/sqlkit"
)

// Store is a database Keys runs on through its driver's own interface
// rather than database/sql: postgres.Pool makes one of a pgxpool.Pool.
// Only this module's database packages make one; the zero Store is none.
type Store struct {
	db  sqlkit.DB // the store as the SQL substrate sees it
	set bool      // made by a database package, db maybe nil
}

func init() {
	sqlkit.MakeStore = func(db sqlkit.DB) any { return Store{db: db, set: true} }
}

// openStore returns the database of cfg: Config.Store, or Config.DB with
// the flavour of SQL found for it among the database packages the program
// imports: by its driver, or, behind a wrapping driver, by asking the
// database.
func openStore(ctx context.Context, cfg Config) (sqlkit.DB, error) {
	if cfg.Store.set {
		if cfg.DB != nil {
			return nil, errors.New("idemserver: Config.DB and Config.Store are both set; set one")
		}
		db := cfg.Store.db
		if db == nil {
			return nil, errors.New("idemserver: Config.Store has no database")
		}
		return db, nil
	}
	if cfg.DB == nil {
		return nil, errors.New("idemserver: Config.DB (or Config.Store) is required")
	}
	f, err := flavorOf(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	if f.Check != nil {
		if err := f.Check(ctx, cfg.DB); err != nil {
			if f.Class(err) == sqlkit.Unavailable {
				return nil, fmt.Errorf("idemserver: checking the database's settings: %w: %w", ErrUnavailable, err)
			}
			return nil, fmt.Errorf("idemserver: %w", err)
		}
	}
	return sqlkit.SQL(cfg.DB, f), nil
}

// flavorOf finds the flavour of db among the registered ones.
func flavorOf(ctx context.Context, db *sql.DB) (*sqlkit.Flavor, error) {
	flavors := sqlkit.Flavors()
	for _, f := range flavors {
		if f.Driver != nil && f.Driver(db.Driver()) {
			return f, nil
		}
	}
	var said []string
	for _, f := range flavors {
		ok, v, err := f.Probe(ctx, db)
		switch {
		case ok:
			return f, nil
		case err != nil && sqlkit.Generic(err) == sqlkit.Unavailable:
			return nil, fmt.Errorf("idemserver: telling the database's kind: %w: %w", ErrUnavailable, err)
		case err != nil:
			said = append(said, err.Error())
		default:
			said = append(said, v)
		}
	}
	if len(flavors) == 0 {
		// Nothing to ask with: the program imports no database package.
		var v string
		err := db.QueryRowContext(ctx, `SELECT version()`).Scan(&v)
		switch {
		case err != nil && sqlkit.Generic(err) == sqlkit.Unavailable:
			return nil, fmt.Errorf("idemserver: telling the database's kind: %w: %w", ErrUnavailable, err)
		case err != nil:
			v = err.Error()
		}
		said = append(said, v)
	}
	var linked []string
	for _, f := range flavors {
		linked = append(linked, f.Name+" ("+f.Package+")")
	}
	imported := "the program imports none of them"
	if len(linked) > 0 {
		imported = "the program imports " + strings.Join(linked, ", ")
	}
	return nil, fmt.Errorf("%w; %s; Config.DB's driver is %T, and its database says %q",
		ErrUnsupportedDatabase, imported, db.Driver(), strings.Join(said, "; "))
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,50}$`)

// Statements of this package are written once, with ? placeholders (?N
// for a value used twice), {{t}} and {{steps}} for the tables and the
// flavour's tokens ({{int64}}, {{for_update}}, ...), and rewritten for the
// database by k.stmts.

// exec runs a statement of this package on q.
func (k *Keys) exec(ctx context.Context, q sqlkit.Queryer, stmt string, args ...any) (sqlkit.Result, error) {
	text, args := k.stmts.Bind(stmt, args)
	return q.Exec(ctx, text, args...)
}

// queryRow runs a query of this package on q.
func (k *Keys) queryRow(ctx context.Context, q sqlkit.Queryer, stmt string, args ...any) sqlkit.Row {
	text, args := k.stmts.Bind(stmt, args)
	return q.QueryRow(ctx, text, args...)
}

// query runs a query of this package on q.
func (k *Keys) query(ctx context.Context, q sqlkit.Queryer, stmt string, args ...any) (sqlkit.Rows, error) {
	text, args := k.stmts.Bind(stmt, args)
	return q.Query(ctx, text, args...)
}

// schema is the key store: one row per (principal, key) with the
// fingerprint, the random seed of its downstream keys, whether it is
// finished (then with the answer), and, while a phased request holds it,
// its lock token and lease; and the recovery points of phased requests.
// Times are Unix nanoseconds of Config.Now.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS {{t}} (
		id              {{serial}},
		principal       {{text}} NOT NULL,
		idem_key        {{text}} NOT NULL,
		fingerprint     {{blob}} NOT NULL,
		seed            TEXT     NOT NULL,
		created_at      {{int64}} NOT NULL,
		expires_at      {{int64}} NOT NULL,
		finished        {{int64}} NOT NULL,
		lock_token      TEXT,
		lease_until     {{int64}},
		response_status {{int64}},
		response_header TEXT,
		response_body   {{blob}},
		UNIQUE (principal, idem_key){{indexes}}
	){{table_options}}`,
	createIndex,
	`CREATE TABLE IF NOT EXISTS {{steps}} (
		key_id {{int64}} NOT NULL,
		name   {{text}} NOT NULL,
		result {{blob}} NOT NULL,
		PRIMARY KEY (key_id, name)
	){{table_options}}`,
}

// createIndex is the schema's index of the sweep, which a flavour with
// InlineIndexes declares in the CREATE TABLE instead.
const createIndex = `CREATE INDEX IF NOT EXISTS {{t}}_expires ON {{t}} (finished, expires_at)`

// migrate creates the tables in one transaction. Where the flavour can
// tell which tables exist (PostgreSQL), a replica that finds both runs no
// DDL (CREATE INDEX IF NOT EXISTS takes a table lock before it looks, and
// would deadlock with serving replicas), and the creation runs under the
// flavour's schema lock, so that replicas starting together create the
// tables one after the other.
func (k *Keys) migrate(ctx context.Context) error {
	f := k.db.Flavor()
	if f.TablesQuery != "" {
		var n int
		if err := k.queryRow(ctx, k.db, f.TablesQuery, k.table, k.table+"_steps").Scan(&n); err != nil {
			return k.dbError("looking for the key tables", err)
		}
		if n == 2 {
			return nil
		}
	}
	err := k.createTables(ctx, f.SchemaLock)
	if f.SchemaLock != "" && f.NoSchemaLock != nil && f.NoSchemaLock(err) {
		err = k.createTables(ctx, "")
	}
	return err
}

// checkTables makes sure that the tables New is to use, where they exist
// already, are this package's: CREATE TABLE IF NOT EXISTS would leave
// another table of the same name as it is, and every request would then
// fail on a missing column. A table is there when selecting no row of it
// works; it is this package's when selecting every column it needs, of no
// row, works too.
func (k *Keys) checkTables(ctx context.Context) error {
	for _, t := range []struct{ name, cols string }{
		{k.table, "id, principal, idem_key, fingerprint, seed, created_at, expires_at, finished, lock_token, lease_until, response_status, response_header, response_body"},
		{k.table + "_steps", "key_id, name, result"},
	} {
		if k.selectNone(ctx, "*", t.name) != nil {
			continue // not there (migrate creates it), or unreachable (migrate says so)
		}
		if err := k.selectNone(ctx, t.cols, t.name); err != nil {
			if k.class(err) == sqlkit.Unavailable {
				return k.dbError("reading the key tables", err)
			}
			return fmt.Errorf("%w: %s lacks one of the columns %s (%w); set Config.Table to another name, or move the old table away", ErrForeignTable, t.name, t.cols, err)
		}
	}
	return nil
}

// selectNone selects cols of no row of table.
func (k *Keys) selectNone(ctx context.Context, cols, table string) error {
	rows, err := k.db.Query(ctx, "SELECT "+cols+" FROM "+table+" WHERE 1 = 0")
	if err != nil {
		return err
	}
	return rows.Close()
}

// createTables runs the schema in one transaction, after lock if any.
func (k *Keys) createTables(ctx context.Context, lock string) error {
	tx, err := k.db.Begin(ctx, sql.LevelDefault)
	if err != nil {
		return k.dbError("creating the key tables", err)
	}
	defer tx.Rollback(ctx)
	if lock != "" {
		if _, err := tx.Exec(ctx, lock); err != nil {
			return k.dbError("creating the key tables", err)
		}
	}
	for _, stmt := range schema {
		if stmt == createIndex && k.db.Flavor().InlineIndexes {
			continue
		}
		if _, err := k.exec(ctx, tx, stmt); err != nil {
			return k.dbError("creating the key tables", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return k.dbError("creating the key tables", err)
	}
	return nil
}

// class classifies an error of the database (ErrUnavailable wrapped is
// Unavailable).
func (k *Keys) class(err error) sqlkit.Class {
	switch {
	case errors.Is(err, ErrOutsideTx):
		return sqlkit.Other // the handler's mistake: no retry will mend it
	case errors.Is(err, ErrUnavailable):
		return sqlkit.Unavailable
	case errors.Is(err, errRaced), errors.Is(err, errTxLost):
		return sqlkit.Serialization
	}
	return k.db.Flavor().Class(err)
}

// retryable reports whether err is a serialization failure or a deadlock:
// the transaction did nothing and may run again.
func (k *Keys) retryable(err error) bool { return k.class(err) == sqlkit.Serialization }

// dbError wraps err, met while doing what, marking an unreachable database.
func (k *Keys) dbError(what string, err error) error {
	if k.class(err) == sqlkit.Unavailable && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("idemserver: %s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("idemserver: %s: %w", what, err)
}

// inTx runs fn in a transaction at level and commits it. If fn or the
// commit fails with a serialization failure or a deadlock, the whole
// transaction runs again, fn included, after a short random wait; after
// Config.Reruns reruns the error wraps ErrContention. Any error from fn
// rolls back.
func (k *Keys) inTx(ctx context.Context, level sql.IsolationLevel, fn func(tx sqlkit.Tx) error) error {
	runs, err := sqlkit.Rerun(ctx, k.cfg.Reruns, k.retryable, func() { k.stats.reruns.Add(1) },
		func() error { return k.runTx(ctx, level, fn) })
	if err != nil && k.retryable(err) {
		return fmt.Errorf("%w (%d runs): %w", ErrContention, runs, err)
	}
	return err
}

// runTx runs fn in one transaction and commits it.
func (k *Keys) runTx(ctx context.Context, level sql.IsolationLevel, fn func(tx sqlkit.Tx) error) error {
	tx, err := k.db.Begin(ctx, level)
	if err != nil {
		return k.dbError("beginning a transaction", err)
	}
	defer tx.Rollback(ctx) // after Commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return k.dbError("committing", err)
	}
	return nil
}
