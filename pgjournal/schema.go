package pgjournal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the version of the tables this package reads and
// writes. Migrate brings a database to it.
const SchemaVersion = 3

// ErrSchemaTooNew: the database was migrated by a newer release of idem,
// whose tables this one may not read correctly. Upgrade idem.
var ErrSchemaTooNew = errors.New("pgjournal: database schema is newer than this idem")

// ErrNotMigrated: the database has no journal tables, or tables older
// than SchemaVersion, and the Journal was opened with Options.NoMigrate,
// which creates and upgrades nothing. Run Migrate, or `idem journal
// migrate URL`, once the DSN is known to name the right database.
var ErrNotMigrated = errors.New("pgjournal: the database's journal tables are missing or older than this idem: run Migrate")

// ErrInvalidOptions is returned when Open is given Options it cannot use.
// Nothing is written.
var ErrInvalidOptions = errors.New("pgjournal: invalid options")

// migrations[i] takes the schema from version i to i+1. Each runs in the
// transaction that records the new version, so a migration is applied
// whole or not at all. The SQL sticks to what PostgreSQL, CockroachDB and
// YugabyteDB all run: no advisory locks, no LISTEN, no extensions.
var migrations = []string{
	// 0 -> 1: one row per operation, inserted with its intent (state 1,
	// pending; 2 done, 3 rejected). Times of the operation are Unix
	// nanoseconds by the journal's clock (the database's, F4); the lease's
	// expiry is a timestamptz set and compared by the database itself.
	`CREATE TABLE IF NOT EXISTS idem_operations (
		namespace    text     NOT NULL,
		op_id        text     NOT NULL,
		op_key       text     NOT NULL,
		fingerprint  bytea    NOT NULL,
		method       text     NOT NULL DEFAULT '',
		url          text     NOT NULL DEFAULT '',
		created_ns   bigint   NOT NULL DEFAULT 0,
		state        smallint NOT NULL,
		completed_ns bigint   NOT NULL DEFAULT 0,
		status       integer  NOT NULL DEFAULT 0,
		flags        smallint NOT NULL DEFAULT 0,
		header       bytea,
		body         bytea,
		lease_owner  text,
		lease_until  timestamptz,
		fence        bigint   NOT NULL DEFAULT 0,
		PRIMARY KEY (namespace, op_id)
	);
	CREATE INDEX IF NOT EXISTS idem_operations_by_state ON idem_operations (namespace, state, created_ns)`,
	// 1 -> 2: the liveness of the journals that hold leases (F11,
	// life.go). A row per life of a Journal, renewed by the Journal; a
	// lease names the life it was taken under, and the fence it was taken
	// at, so that a lease taken since by a writer that does not know
	// lives (a process of the previous release, during a rolling
	// upgrade) is judged by its lease_until alone. Adding nullable
	// columns rewrites no row.
	`CREATE TABLE IF NOT EXISTS idem_lives (
		id          text        PRIMARY KEY,
		owner       text        NOT NULL,
		alive_until timestamptz NOT NULL,
		dead        boolean     NOT NULL DEFAULT false
	);
	ALTER TABLE idem_operations ADD COLUMN IF NOT EXISTS lease_life text;
	ALTER TABLE idem_operations ADD COLUMN IF NOT EXISTS lease_life_fence bigint`,
	// 2 -> 3: each operation's key lifetime, in nanoseconds, stored with
	// its intent, by which every machine judges the operation expired
	// (C6). The rows of earlier releases were judged by a lifetime the
	// journal was opened with, 24 hours unless set: they get 24 hours. A
	// constant default rewrites no row.
	`ALTER TABLE idem_operations ADD COLUMN IF NOT EXISTS key_ttl_ns bigint NOT NULL DEFAULT 86400000000000`,
}

// Migrate creates the journal's tables in the database, or upgrades them to
// SchemaVersion. It is safe to run from many machines at once, and does
// nothing to a database already at SchemaVersion. A database at a newer
// version is refused with ErrSchemaTooNew. Open runs it unless
// Options.NoMigrate is set; `idem journal migrate` runs it on its own.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	// The version table itself is created outside the migrations: two
	// machines creating it at once may both try, and the loser's error
	// (a unique violation in the catalog, a duplicate table or type)
	// means it now exists.
	const versionTable = `CREATE TABLE IF NOT EXISTS idem_schema (
		singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
		version   integer NOT NULL
	)`
	if _, err := pool.Exec(ctx, versionTable); err != nil && !isCode(err, "23505", "42P07", "42710") {
		return fmt.Errorf("pgjournal: migrating: %w", classify(ctx, err))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idem_schema (version) VALUES (0) ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("pgjournal: migrating: %w", classify(ctx, err))
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The row lock makes concurrent migrations take turns: the
		// second finds the version the first committed.
		var v int
		if err := tx.QueryRow(ctx, `SELECT version FROM idem_schema FOR UPDATE`).Scan(&v); err != nil {
			return err
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: the database is at version %d, this idem knows %d", ErrSchemaTooNew, v, SchemaVersion)
		}
		for ; v < SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("to version %d: %w", v+1, err)
			}
		}
		_, err := tx.Exec(ctx, `UPDATE idem_schema SET version = $1`, v)
		return err
	})
	if err != nil && !errors.Is(err, ErrSchemaTooNew) {
		return fmt.Errorf("pgjournal: migrating: %w", classify(ctx, err))
	}
	return err
}

// isCode reports whether err is a PostgreSQL error with one of the codes.
func isCode(err error, codes ...string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	for _, c := range codes {
		if pe.Code == c {
			return true
		}
	}
	return false
}
