package testserver

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/idemkit/idem/idemserver/sqlite" // SQLite through modernc, for the layer too
)

// store is the database under the server: SQLite, or PostgreSQL shared by
// any number of server processes (replicas). Everything above it is one
// code path; the dialect differences live here and in dialect.go:
// placeholders, how a write transaction begins, column types, and the
// locking clause of the sweeper's batches.
//
// SQLite is opened as two pools: one connection for writes and a few for
// reads (or none, and reads share the write connection).
//
// SQLite allows one writer at a time. Funnelling every write through a single
// pooled connection makes writers queue in Go, in order, instead of spinning
// in SQLite's busy handler; the busy_timeout still covers the other writers
// of the same file (the gateway, a second process). Readers in WAL mode never
// block the writer nor each other.
//
// The queue in Go's pool has no timeout of its own: busy_timeout bounds
// waits for SQLite's lock between connections, not the wait for the pool's
// one connection. A transaction that never ends (a request hung at an
// injected crash point with -crash=hang) holds every later writer until
// the server closes, since a request's work context outlives its client.
//
// Durability: journal_mode=WAL with synchronous=FULL fsyncs the WAL at every
// commit, so a transaction that COMMIT reported as done survives a crash of
// the process and of the machine. A key's stored answer is only worth
// something if it is at least as durable as the effect it describes; here
// both are in the same commit. (synchronous=NORMAL would survive a process
// crash but could lose the last commits on power loss.)
//
// PostgreSQL is one pool for reads and writes. Its write transactions run
// at SERIALIZABLE, which gives what BEGIN IMMEDIATE gives on SQLite (they
// behave as if run one at a time) without a global lock; the price is that
// PostgreSQL may abort one with a serialization failure or a deadlock, and
// inTx runs it again.
type store struct {
	dialect sqlDialect
	write   *sql.DB
	read    *sql.DB

	// retries counts transactions run again after a serialization failure
	// or a deadlock, or a unique violation under a request's key.
	retries atomic.Int64
}

// inMemory reports whether path names the in-memory database.
func inMemory(path string) bool { return path == "" || path == ":memory:" }

// dsn returns the data source name for path. Pragmas go in the DSN, not in a
// one-off Exec, so that every connection the pool opens, now or after one is
// recycled, gets them.
func dsn(path string, busy time.Duration, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	if !inMemory(path) {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
	}
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	}
	// Every write transaction starts with BEGIN IMMEDIATE: it takes the write
	// lock at BEGIN, so a transaction never reads under a shared lock and
	// then fails to upgrade it halfway through (SQLITE_BUSY mid-transaction
	// would not be retried by busy_timeout).
	q.Set("_txlock", "immediate")
	if inMemory(path) {
		return ":memory:?" + q.Encode()
	}
	// A file: URI, so that a path with '?' or '#' in it stays a path.
	return "file:" + escapePath(path) + "?" + q.Encode()
}

// escapePath escapes the characters that end or escape the path of a SQLite
// file: URI.
func escapePath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// openStore opens (creating if needed) the database at path and applies the
// schema given. readers is the size of the read pool; with 0 there is none,
// and reads go through the write connection. A postgres:// or
// postgresql:// path opens PostgreSQL, with one pool of pgServerConns
// connections, or pgGatewayConns for a store without readers.
//
// An in-memory database lives inside one connection: a second connection
// would see a different, empty database. So in memory there is a single
// pool of exactly one connection, kept forever, used for reads and writes.
func openStore(ctx context.Context, path string, busy time.Duration, readers int, schema []string) (*store, error) {
	if isPostgres(path) {
		conns := pgServerConns
		if readers == 0 {
			conns = pgGatewayConns
		}
		return openPostgres(ctx, path, conns, schema)
	}
	if inMemory(path) {
		db, err := sql.Open("sqlite", dsn(path, busy, false))
		if err != nil {
			return nil, fmt.Errorf("testserver: opening in-memory database: %w", err)
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s := &store{write: db, read: db}
		if err := s.migrate(ctx, schema); err != nil {
			s.close()
			return nil, err
		}
		return s, nil
	}
	if err := checkDatabasePath(path); err != nil {
		return nil, err
	}
	w, err := sql.Open("sqlite", dsn(path, busy, false))
	if err != nil {
		return nil, fmt.Errorf("testserver: opening %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	s := &store{write: w, read: w}
	if err := s.migrate(ctx, schema); err != nil { // creates the file, switches it to WAL
		w.Close()
		return nil, err
	}
	if readers == 0 {
		return s, nil
	}
	r, err := sql.Open("sqlite", dsn(path, busy, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("testserver: opening %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	s.read = r
	return s, nil
}

// migrate applies the schema statements in one transaction. They are all
// CREATE ... IF NOT EXISTS, so reopening an existing database is a no-op.
// On PostgreSQL the transaction first takes an advisory lock, so that
// replicas opening one empty database at once create it one after the
// other (two concurrent CREATE TABLE IF NOT EXISTS of one table can both
// miss it, and the second then fails).
//
// On PostgreSQL the schema's digest is also recorded (schemaVersions), and a
// replica that finds it runs no DDL at all: CREATE INDEX IF NOT EXISTS takes
// a table lock before it looks, and a replica started beside others that are
// serving would deadlock with their transactions (40P01) and fail to start.
func (s *store) migrate(ctx context.Context, schema []string) error {
	digest := schemaDigest(schema)
	if s.dialect == dialectPostgres {
		var one int
		err := s.write.QueryRowContext(ctx, `SELECT 1 FROM testserver_schema WHERE digest = $1`, digest).Scan(&one)
		if err == nil {
			return nil
		}
		if unavailable(err) {
			return s.dialect.connectError("creating schema", err)
		}
		// No such table, or no such row yet: create below.
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.dialect.connectError("creating schema", err)
	}
	defer tx.Rollback()
	if lock := s.dialect.schemaLock(); lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return s.dialect.connectError("creating schema", err)
		}
	}
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, s.dialect.types(stmt)); err != nil {
			return fmt.Errorf("testserver: creating schema: %w", err)
		}
	}
	if s.dialect == dialectPostgres {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS testserver_schema (digest TEXT PRIMARY KEY)`); err != nil {
			return fmt.Errorf("testserver: creating schema: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO testserver_schema (digest) VALUES ($1) ON CONFLICT DO NOTHING`, digest); err != nil {
			return fmt.Errorf("testserver: creating schema: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("testserver: creating schema: %w", err)
	}
	return nil
}

// schemaDigest names a list of schema statements: the hex SHA-256 of the
// statements, each followed by a NUL.
func schemaDigest(schema []string) string {
	h := sha256.New()
	for _, stmt := range schema {
		h.Write([]byte(stmt))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (s *store) close() error {
	err := s.write.Close()
	if s.read != s.write {
		err = errors.Join(err, s.read.Close())
	}
	return err
}

// serverSchema is the server's part of the database: the business tables.
// The keys are the layer's (package idemserver), in idempotency_keys and
// idempotency_keys_steps, created by idemserver.New.
var serverSchema = []string{
	`CREATE TABLE IF NOT EXISTS inventory (
		item_id    TEXT    PRIMARY KEY,
		available  {{int64}} NOT NULL CHECK (available >= 0),
		updated_at {{int64}} NOT NULL
	)`,

	// The business tables carry the key that created each row, UNIQUE per
	// client: even a bug in the key handling could not insert a second row
	// for one key. The sweeper sets the column to NULL when it forgets the
	// key (NULLs are distinct under UNIQUE), so that the key can be used
	// again as a new request.
	`CREATE TABLE IF NOT EXISTS reservations (
		id              TEXT    PRIMARY KEY,
		client_id       TEXT    NOT NULL,
		idempotency_key TEXT,
		item_id         TEXT    NOT NULL,
		quantity        {{int64}} NOT NULL CHECK (quantity > 0),
		reference       TEXT,
		created_at      {{int64}} NOT NULL,
		UNIQUE (client_id, idempotency_key)
	)`,
	`CREATE INDEX IF NOT EXISTS reservations_reference ON reservations (client_id, reference)`,

	`CREATE TABLE IF NOT EXISTS charges (
		id                TEXT    PRIMARY KEY,
		client_id         TEXT    NOT NULL,
		idempotency_key   TEXT,
		customer          TEXT    NOT NULL,
		amount            {{int64}} NOT NULL CHECK (amount > 0),
		currency          TEXT    NOT NULL,
		reference         TEXT,
		gateway_charge_id TEXT    NOT NULL UNIQUE,
		status            TEXT    NOT NULL,
		created_at        {{int64}} NOT NULL,
		UNIQUE (client_id, idempotency_key)
	)`,
	`CREATE INDEX IF NOT EXISTS charges_customer ON charges (client_id, customer)`,
	`CREATE INDEX IF NOT EXISTS charges_reference ON charges (client_id, reference)`,
}

// checkDatabasePath names what is wrong with a database file's path before
// SQLite reports it as "unable to open database file": a directory where
// the file should be, or a directory that does not exist.
func checkDatabasePath(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("testserver: database %s is a directory, not a file", path)
	case errors.Is(err, fs.ErrNotExist):
		if _, derr := os.Stat(filepath.Dir(path)); errors.Is(derr, fs.ErrNotExist) {
			return fmt.Errorf("testserver: database %s: directory %s does not exist", path, filepath.Dir(path))
		}
	}
	return nil
}
