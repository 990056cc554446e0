package postgres

import (
	"context"

	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// observedTx is the pgx.Tx a handler gets (Tx): the request's
// transaction, whose statements tell the request the errors they meet
// (sqlkit.Work.Met), so that a serialization failure or a deadlock runs
// the transaction again whatever the handler makes of it. Statements run
// through its Conn are not observed.
type observedTx struct {
	pgx.Tx
	w sqlkit.Work
}

func (t observedTx) met(err error) error {
	if err != nil {
		t.w.Met(err)
	}
	return err
}

func (t observedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, t.met(err)
	}
	return observedTx{tx, t.w}, nil
}

func (t observedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.Tx.CopyFrom(ctx, table, columns, src)
	return n, t.met(err)
}

func (t observedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return observedBatch{t.Tx.SendBatch(ctx, b), t}
}

func (t observedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	d, err := t.Tx.Prepare(ctx, name, sql)
	return d, t.met(err)
}

func (t observedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, t.met(err)
}

func (t observedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return r, t.met(err)
	}
	return observedRows{r, t}, nil
}

func (t observedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return observedRow{t.Tx.QueryRow(ctx, sql, args...), t}
}

// observedRows reports the error that ends its rows.
type observedRows struct {
	pgx.Rows
	t observedTx
}

func (r observedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.t.met(r.Rows.Err())
	return false
}

func (r observedRows) Close() {
	r.Rows.Close()
	r.t.met(r.Rows.Err())
}

// observedRow reports the error its Scan meets.
type observedRow struct {
	r pgx.Row
	t observedTx
}

func (r observedRow) Scan(dest ...any) error { return r.t.met(r.r.Scan(dest...)) }

// observedBatch reports the errors of a batch's statements.
type observedBatch struct {
	pgx.BatchResults
	t observedTx
}

func (b observedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.t.met(err)
}

func (b observedBatch) Query() (pgx.Rows, error) {
	r, err := b.BatchResults.Query()
	if err != nil {
		return r, b.t.met(err)
	}
	return observedRows{r, b.t}, nil
}

func (b observedBatch) QueryRow() pgx.Row { return observedRow{b.BatchResults.QueryRow(), b.t} }

func (b observedBatch) Close() error { return b.t.met(b.BatchResults.Close()) }
