package sqlitekit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver/internal/sqlitekit"
	"github.com/idemkit/idem/internal/sqlkit"
)

// work is a request as the gate sees it.
type work struct {
	holding atomic.Bool
	mu      sync.Mutex
	misused []error
}

func (w *work) Holding() bool { return w.holding.Load() }
func (w *work) Met(error)     {}
func (w *work) Misused(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.misused = append(w.misused, err)
}
func (w *work) told() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.misused)
}

const busy = 200 * time.Millisecond

// open opens a database through Connector with a table t.
func open(t *testing.T) *sql.DB { return openBusy(t, busy) }

// openBusy is open with the gate's busy timeout b.
func openBusy(t *testing.T, b time.Duration) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "g.db") + fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_txlock=immediate", busy.Milliseconds())
	c, err := sqlitekit.Connector(dsn, b)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// hold begins a request's transaction on db that has written, its
// handler running.
func hold(t *testing.T, db *sql.DB) (*sql.Tx, *work, context.Context) {
	t.Helper()
	w := &work{}
	ctx := sqlkit.WithWork(context.Background(), w)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	w.holding.Store(true)
	return tx, w, ctx
}

func TestARequestsContextOutsideItsOpenTransactionIsRefused(t *testing.T) {
	db := open(t)
	if _, err := db.Prepare(`NOT SQL`); err == nil {
		t.Fatal("a statement that is no SQL prepared")
	}
	// Statements prepared on a connection of their own, before the
	// request began, and run with its context.
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	insert, err := c.PrepareContext(context.Background(), `INSERT INTO t VALUES (?)`)
	if err != nil {
		t.Fatal(err)
	}
	defer insert.Close()
	count, err := c.PrepareContext(context.Background(), `SELECT count(*) FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	defer count.Close()
	tx, w, ctx := hold(t, db)
	if _, err := insert.ExecContext(ctx, 2); !errors.Is(err, sqlkit.ErrOutsideTx) {
		t.Fatalf("a prepared statement's Exec on the database: %v, want ErrOutsideTx", err)
	}
	if _, err := count.QueryContext(ctx); !errors.Is(err, sqlkit.ErrOutsideTx) {
		t.Fatalf("a prepared statement's Query on the database: %v, want ErrOutsideTx", err)
	}
	if w.told() != 2 {
		t.Fatalf("the request was told %d times, want 2", w.told())
	}
	w.misused = nil
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the transaction's own statement: %d, %v", n, err)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO t VALUES (2)`)
	err2 := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n)
	_, err3 := db.BeginTx(ctx, nil)
	_, err4 := db.PrepareContext(ctx, `SELECT 1`)
	for i, err := range []error{err, err2, err3, err4} {
		if !errors.Is(err, sqlkit.ErrOutsideTx) {
			t.Errorf("statement %d on the database: %v, want ErrOutsideTx", i, err)
		}
	}
	if w.told() != 4 {
		t.Fatalf("the request was told %d times, want 4", w.told())
	}
	w.holding.Store(false) // its handler returned: the context is a plain one
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a read once the handler returned: %d, %v; want 0 (the write is uncommitted)", n, err)
	}
	if w.told() != 4 {
		t.Fatalf("the request was told %d times, want 4", w.told())
	}
}

func TestABusyStatementBehindARequestIsNamed(t *testing.T) {
	db := open(t)
	tx, w, _ := hold(t, db)
	_, err := db.Exec(`INSERT INTO t VALUES (2)`)
	if !errors.Is(err, sqlkit.ErrOutsideTx) || !sqlitekit.Busy(err) || w.told() != 1 {
		t.Fatalf("%v (told %d); want ErrOutsideTx wrapping SQLITE_BUSY, told once", err, w.told())
	}
	if _, err := db.Exec(`NOT SQL`); err == nil || errors.Is(err, sqlkit.ErrOutsideTx) || w.told() != 1 {
		t.Fatalf("a statement that fails on its own: %v (told %d); want its own error", err, w.told())
	}
	w.holding.Store(false) // the lock held by a transaction whose handler returned
	_, err = db.Exec(`INSERT INTO t VALUES (3)`)
	if errors.Is(err, sqlkit.ErrOutsideTx) || !sqlitekit.Busy(err) || w.told() != 1 {
		t.Fatalf("%v (told %d); want SQLITE_BUSY alone", err, w.told())
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t VALUES (4)`); err != nil {
		t.Fatalf("once the gate is free: %v", err)
	}
}

func TestABusyStatementBehindAnotherProgramsTransactionIsBusy(t *testing.T) {
	db := open(t)
	tx, err := db.Begin() // no request's
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t VALUES (2)`); errors.Is(err, sqlkit.ErrOutsideTx) || !sqlitekit.Busy(err) {
		t.Fatalf("%v; want SQLITE_BUSY alone", err)
	}
}

func TestATransactionOutsideGivesUpBehindARequest(t *testing.T) {
	db := open(t)
	tx, w, _ := hold(t, db)
	if _, err := db.Begin(); !errors.Is(err, sqlkit.ErrOutsideTx) || w.told() != 1 {
		t.Fatalf("%v (told %d); want ErrOutsideTx, told once", err, w.told())
	}
	// idemserver's own transactions wait, however long.
	got := make(chan error, 1)
	go func() {
		tx, err := sqlkit.SQL(db, sqlitekit.Flavor).Begin(context.Background(), sql.LevelDefault)
		if err == nil {
			err = tx.Commit(context.Background())
		}
		got <- err
	}()
	waitFor(t, db, 1)
	time.Sleep(2 * busy) // past the busy timeout
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || w.told() != 1 {
		t.Fatalf("idemserver's transaction: %v (told %d)", err, w.told())
	}
}

func TestWithoutABusyTimeoutATransactionOutsideWaits(t *testing.T) {
	db := openBusy(t, 0)
	tx, w, _ := hold(t, db)
	got := make(chan error, 1)
	go func() {
		tx, err := db.Begin()
		if err == nil {
			err = tx.Commit()
		}
		got <- err
	}()
	waitFor(t, db, 1)
	time.Sleep(2 * busy) // past what would be the busy timeout
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || w.told() != 0 {
		t.Fatalf("the transaction outside: %v (told %d); want it begun once the request's ended", err, w.told())
	}
}

func TestTransactionsBeginInArrivalOrder(t *testing.T) {
	db := open(t)
	first, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := sqlkit.SQL(db, sqlitekit.Flavor).Begin(context.Background(), sql.LevelDefault)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			tx.Commit(context.Background())
		}()
		waitFor(t, db, i+1)
	}
	first.Commit()
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Fatalf("began in the order %v, want [0 1 2 3 4]", order)
	}
	if n, err := sqlitekit.Waiting(context.Background(), db); n != 0 || err != nil {
		t.Fatalf("%d waiting, %v", n, err)
	}
	plain, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if n, err := sqlitekit.Waiting(context.Background(), plain); n != 0 || err != nil {
		t.Fatalf("a database not of Connector: %d waiting, %v", n, err)
	}
}

// waitFor waits until n transactions of db wait for the gate.
func waitFor(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	for {
		got, err := sqlitekit.Waiting(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
