// Package postgres is idemserver on PostgreSQL (and CockroachDB) through
// pgx. Importing it lets idemserver.New take a *sql.DB of pgx's stdlib
// driver ("pgx"); Pool makes an idemserver.Store of a pgxpool.Pool, whose
// handlers get their transaction as a pgx.Tx from Tx, so that code written
// for pgx (sqlc's pgx/v5 mode) runs in it.
//
// Every transaction of a key runs at READ COMMITTED, the key row read FOR
// UPDATE, and a handler's at SERIALIZABLE on a route that asks for it
// (idemserver.Route.Serializable); a transaction runs again, handler
// included, after a serialization failure or a deadlock, also one that
// the handler's own statement met through Tx or a *sql.DB of Open,
// whatever the handler answered (idemserver's package doc says when).
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/internal/pgkit"
	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // registers the driver "pgx"
)

func init() { sqlkit.Register(pgkit.Flavor) }

// Open opens a *sql.DB of pgx's stdlib driver at dsn for
// idemserver.Config.DB whose connections tell Keys the errors of a
// request's transaction: a serialization failure or a deadlock that one
// of the handler's statements meets runs the transaction again, whatever
// the handler answers then. A *sql.DB opened otherwise (sql.Open("pgx",
// dsn)) serves as well, but Keys then learns of such an error only from
// idemserver.Fail. Its connections are pgx's behind a wrapper: the
// driver connection conn.Raw gives has an Unwrap method returning pgx's
// *stdlib.Conn.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("idemserver/postgres: %w", err)
	}
	return sql.OpenDB(sqlkit.Observe(stdlib.GetConnector(*cfg), pgkit.Flavor.Class)), nil
}

// Pool returns the store of idemserver.Config.Store for pool: Keys keeps
// its keys in pool's database and hands each handler its transaction as
// a pgx.Tx (Tx).
func Pool(pool *pgxpool.Pool) idemserver.Store {
	var db sqlkit.DB
	if pool != nil {
		db = poolDB(store{pool})
	}
	return sqlkit.MakeStore(db).(idemserver.Store)
}

// Tx returns the request's transaction on a Pool store (the one
// idemserver.Tx gives on a *sql.DB, with the same rules): the handler
// writes through it and must not commit or roll it back. It is nil
// outside idemserver and on a *sql.DB.
func Tx(ctx context.Context) pgx.Tx {
	tx := sqlkit.TxFrom(ctx)
	if tx == nil {
		return nil
	}
	ptx, _ := tx.Native().(pgx.Tx)
	return ptx
}

type store struct{ pool *pgxpool.Pool }

// poolDB is a pgxpool.Pool as the substrate sees it.
type poolDB store

func (d poolDB) Flavor() *sqlkit.Flavor { return pgkit.Flavor }
func (d poolDB) Native() any            { return d.pool }

// Pool counts as waited the acquires that found the pool empty: those
// that got a connection after waiting, and those whose context ended
// first.
func (d poolDB) Pool() sqlkit.PoolStats {
	s := d.pool.Stat()
	return sqlkit.PoolStats{Waited: s.EmptyAcquireCount() + s.CanceledAcquireCount()}
}

func (d poolDB) Begin(ctx context.Context, level sql.IsolationLevel) (sqlkit.Tx, error) {
	opts := pgx.TxOptions{}
	switch level {
	case sql.LevelSerializable:
		opts.IsoLevel = pgx.Serializable
	case sql.LevelRepeatableRead:
		opts.IsoLevel = pgx.RepeatableRead
	case sql.LevelReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	}
	tx, err := d.pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return poolTx{tx, sqlkit.WorkFrom(ctx)}, nil
}

func (d poolDB) Exec(ctx context.Context, q string, args ...any) (sqlkit.Result, error) {
	return result(d.pool.Exec(ctx, q, args...))
}

func (d poolDB) QueryRow(ctx context.Context, q string, args ...any) sqlkit.Row {
	return row{d.pool.QueryRow(ctx, q, args...)}
}

func (d poolDB) Query(ctx context.Context, q string, args ...any) (sqlkit.Rows, error) {
	r, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

// poolTx is a transaction of the pool; w is the request it is of, if
// any, whose handler gets the transaction observed (observedTx).
type poolTx struct {
	tx pgx.Tx
	w  sqlkit.Work
}

func (t poolTx) Native() any {
	if t.w == nil {
		return t.tx
	}
	return observedTx{t.tx, t.w}
}

func (t poolTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// rollbackTimeout bounds a rollback, which runs even after the work's
// context has ended (a rollback on an ended context would only close the
// connection).
const rollbackTimeout = 5 * time.Second

func (t poolTx) Rollback(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil // after Commit, a no-op, as database/sql's is
	}
	return err
}

func (t poolTx) Exec(ctx context.Context, q string, args ...any) (sqlkit.Result, error) {
	return result(t.tx.Exec(ctx, q, args...))
}

func (t poolTx) QueryRow(ctx context.Context, q string, args ...any) sqlkit.Row {
	return row{t.tx.QueryRow(ctx, q, args...)}
}

func (t poolTx) Query(ctx context.Context, q string, args ...any) (sqlkit.Rows, error) {
	r, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

func result(tag pgconn.CommandTag, err error) (sqlkit.Result, error) {
	if err != nil {
		return sqlkit.Result{}, err
	}
	return sqlkit.Result{RowsAffected: tag.RowsAffected()}, nil
}

// row reports no row as sql.ErrNoRows, as database/sql does.
type row struct{ r pgx.Row }

func (r row) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

type rows struct{ r pgx.Rows }

func (r rows) Next() bool             { return r.r.Next() }
func (r rows) Scan(dest ...any) error { return r.r.Scan(dest...) }
func (r rows) Err() error             { return r.r.Err() }
func (r rows) Close() error {
	r.r.Close()
	return r.r.Err()
}
