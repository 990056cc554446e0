package sqlkit

import (
	"context"
	"database/sql"
	"errors"
)

// Queryer runs statements, in a transaction or not. Statements are given
// as the database takes them (see Stmts).
type Queryer interface {
	Exec(ctx context.Context, q string, args ...any) (Result, error)
	QueryRow(ctx context.Context, q string, args ...any) Row
	Query(ctx context.Context, q string, args ...any) (Rows, error)
}

// Result is what a statement changed.
type Result struct {
	RowsAffected int64
	LastInsertID int64 // where the database reports one
}

// Row is one row of a query; Scan returns sql.ErrNoRows if there is none.
type Row interface{ Scan(dest ...any) error }

// Rows are the rows of a query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// DB is a database through its driver.
type DB interface {
	Queryer
	// Begin begins a transaction at level (as Flavor.Options takes it).
	Begin(ctx context.Context, level sql.IsolationLevel) (Tx, error)
	// Flavor is the database's flavour.
	Flavor() *Flavor
	// Native is the driver's own handle (*sql.DB, *pgxpool.Pool).
	Native() any
	// Pool is what the connection pool says of itself now.
	Pool() PoolStats
}

// PoolStats is what a connection pool says of itself.
type PoolStats struct {
	// Waited counts, since the pool opened, the acquires that waited for
	// a connection because every one it may open was in use, ended or
	// not.
	Waited int64
}

// Tx is a transaction of a DB.
type Tx interface {
	Queryer
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Native is the driver's own transaction (*sql.Tx, pgx.Tx), the one a
	// handler writes through.
	Native() any
}

// SQL adapts a database/sql database of flavour f.
func SQL(db *sql.DB, f *Flavor) DB { return sqlDB{db, f} }

type sqlDB struct {
	db *sql.DB
	f  *Flavor
}

func (d sqlDB) Flavor() *Flavor { return d.f }
func (d sqlDB) Native() any     { return d.db }

func (d sqlDB) Pool() PoolStats {
	return PoolStats{Waited: d.db.Stats().WaitCount}
}

func (d sqlDB) Begin(ctx context.Context, level sql.IsolationLevel) (Tx, error) {
	tx, err := d.db.BeginTx(context.WithValue(ctx, internalKey{}, true), d.f.Options(level))
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

func (d sqlDB) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	return result(d.db.ExecContext(ctx, q, args...))
}

func (d sqlDB) QueryRow(ctx context.Context, q string, args ...any) Row {
	return d.db.QueryRowContext(ctx, q, args...)
}

func (d sqlDB) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return d.db.QueryContext(ctx, q, args...)
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Native() any                    { return t.tx }
func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

func (t sqlTx) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	return result(t.tx.ExecContext(ctx, q, args...))
}

func (t sqlTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (t sqlTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return t.tx.QueryContext(ctx, q, args...)
}

// result reads a database/sql result; a database that cannot report the
// last id (PostgreSQL) reports 0.
func result(r sql.Result, err error) (Result, error) {
	if err != nil {
		return Result{}, err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return Result{}, err
	}
	id, _ := r.LastInsertId()
	return Result{RowsAffected: n, LastInsertID: id}, nil
}

// ErrNoRows is what Row.Scan returns for no row.
var ErrNoRows = sql.ErrNoRows

// NoRows reports whether err says a query returned no row.
func NoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// txKey is the context key of a request's transaction.
type txKey struct{}

// WithTx returns ctx carrying tx, the function that gives the
// transaction of the work ctx belongs to (begun at its first call, for
// one that begins lazily; nil if it could not begin).
func WithTx(ctx context.Context, tx func() Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFrom returns the transaction ctx carries, or nil.
func TxFrom(ctx context.Context) Tx {
	f, _ := ctx.Value(txKey{}).(func() Tx)
	if f == nil {
		return nil
	}
	return f()
}

// MakeStore, set by package idemserver, returns an idemserver.Store of db:
// how a database package makes the store of idemserver.Config.Store
// without idemserver exporting its database's internal type.
var MakeStore func(db DB) any
