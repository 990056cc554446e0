package sqlitekit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
	"modernc.org/sqlite"
)

// Connector returns a connector of modernc's SQLite at dsn, whose busy
// timeout is busy, with connections that take one gate, in Go and in
// arrival order, before each transaction begins, and let it go when it
// ends: the database's transactions run one at a time, no transaction
// waits in SQLite's busy handler for another, and a connection is always
// free for a statement run outside them. A statement or transaction begun
// on the database with the context of a request whose transaction is open
// is refused at once with sqlkit.ErrOutsideTx; one whose context names no
// request fails so once it has waited out the busy timeout while a
// request's transaction held the write lock, its handler running, all
// along (with busy 0, it waits as long as it takes). Either is reported
// to the request (sqlkit.Work.Misused).
func Connector(dsn string, busy time.Duration) (driver.Connector, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &connector{c: c, g: &gate{busy: busy, ch: make(chan struct{}, 1)}}, nil
}

type connector struct {
	c driver.Connector
	g *gate
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{c: dc, g: c.g}, nil
}

// Driver is modernc's, so that the database is told SQLite by its driver.
func (c *connector) Driver() driver.Driver { return c.c.Driver() }

// gate is the database's transaction lock.
type gate struct {
	busy    time.Duration // the busy timeout
	ch      chan struct{} // holds a value while a transaction is open
	waiting atomic.Int64  // transactions waiting for it
	mu      sync.Mutex
	taken   uint64      // how often the gate was taken
	held    bool        // whether it is now
	holder  sqlkit.Work // the request whose transaction holds it, if any
}

// take waits for the gate in arrival order, or until ctx ends. A
// transaction begun outside idemserver and outside any request (its
// context names none) gives up with sqlkit.ErrOutsideTx once a request's
// transaction has held the gate, its handler running, for a whole busy
// timeout: that handler most likely began it, on the database, and waits
// for its own transaction. The request is told.
func (g *gate) take(ctx context.Context, w sqlkit.Work) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	var timeout <-chan time.Time
	var taking uint64
	if w == nil && !sqlkit.Internal(ctx) && g.busy > 0 {
		taking = g.now()
		t := time.NewTimer(g.busy)
		defer t.Stop()
		timeout = t.C
		for {
			select {
			case g.ch <- struct{}{}:
				g.took(w)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-timeout:
				if h := g.heldSince(taking); h != nil {
					err := fmt.Errorf("idemserver/sqlite: %w (a transaction begun on the database waited out the busy timeout "+
						"for the request's own transaction)", sqlkit.ErrOutsideTx)
					h.Misused(err)
					return err
				}
				taking = g.now()
				t.Reset(g.busy)
			}
		}
	}
	select {
	case g.ch <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.took(w)
	return nil
}

// took records that the gate is taken, by w's request if any.
func (g *gate) took(w sqlkit.Work) {
	g.mu.Lock()
	g.taken++
	g.held, g.holder = true, w
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	g.held, g.holder = false, nil
	g.mu.Unlock()
	<-g.ch
}

// Waiting returns how many transactions of db, opened through Connector,
// wait for the one before them to end; 0 for another database.
func Waiting(ctx context.Context, db *sql.DB) (int, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n := 0
	err = c.Raw(func(dc any) error {
		if c, ok := dc.(*conn); ok {
			n = int(c.g.waiting.Load())
		}
		return nil
	})
	return n, err
}

// now returns which taking of the gate holds it, 0 if none.
func (g *gate) now() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.held {
		return 0
	}
	return g.taken
}

// heldSince returns the request holding the gate, its handler running,
// if taking (from now) has held it since; nil if another holds it, none,
// or not a request's handler.
func (g *gate) heldSince(taking uint64) sqlkit.Work {
	g.mu.Lock()
	defer g.mu.Unlock()
	if taking == 0 || !g.held || g.taken != taking || g.holder == nil || !g.holder.Holding() {
		return nil
	}
	return g.holder
}

// conn is a connection of modernc's SQLite behind the gate.
type conn struct {
	c  driver.Conn // implements the context interfaces below
	g  *gate
	tx bool // a transaction of this connection holds the gate
}

// Unwrap returns modernc's connection.
func (c *conn) Unwrap() driver.Conn { return c.c }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) Close() error {
	c.end()
	return c.c.Close()
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if _, err := c.outside(ctx); err != nil {
		return nil, err
	}
	if err := c.g.take(ctx, sqlkit.WorkFrom(ctx)); err != nil {
		return nil, err
	}
	t, err := c.c.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		c.g.release()
		return nil, err
	}
	c.tx = true
	return &tx{t: t, c: c}, nil
}

// end lets the gate go if this connection's transaction holds it.
func (c *conn) end() {
	if c.tx {
		c.tx = false
		c.g.release()
	}
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if _, err := c.outside(ctx); err != nil {
		return nil, err
	}
	s, err := c.c.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{s: s, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	taking, err := c.outside(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.c.(driver.ExecerContext).ExecContext(ctx, query, args)
	return r, c.busy(taking, err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	taking, err := c.outside(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.c.(driver.QueryerContext).QueryContext(ctx, query, args)
	return r, c.busy(taking, err)
}

func (c *conn) Ping(ctx context.Context) error { return c.c.(driver.Pinger).Ping(ctx) }

func (c *conn) ResetSession(ctx context.Context) error {
	return c.c.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return c.c.(driver.Validator).IsValid() }

// outside checks a statement (or a transaction's begin) on c: on the
// connection of an open transaction it is that transaction's. Otherwise,
// with the context of a request whose transaction is open, it is refused
// and reported to the request; else it returns the gate's taking now.
func (c *conn) outside(ctx context.Context) (uint64, error) {
	if c.tx {
		return 0, nil
	}
	if w := sqlkit.WorkFrom(ctx); w != nil && w.Holding() {
		err := fmt.Errorf("idemserver/sqlite: %w", sqlkit.ErrOutsideTx)
		w.Misused(err)
		return 0, err
	}
	return c.g.now(), nil
}

// busy names the cause of err, a statement's outside any transaction,
// when it is SQLite's busy timeout run out while a request's transaction
// held the gate since the statement began: the request's handler waited
// for its own transaction's write lock. The request is told.
func (c *conn) busy(taking uint64, err error) error {
	if err == nil || !Busy(err) {
		return err
	}
	w := c.g.heldSince(taking)
	if w == nil {
		return err
	}
	err = fmt.Errorf("idemserver/sqlite: %w (the statement waited out the busy timeout for the write lock "+
		"that the request's own transaction held): %w", sqlkit.ErrOutsideTx, err)
	w.Misused(err)
	return err
}

type tx struct {
	t driver.Tx
	c *conn
}

func (t *tx) Commit() error {
	defer t.c.end()
	return t.t.Commit()
}

func (t *tx) Rollback() error {
	defer t.c.end()
	return t.t.Rollback()
}

// stmt is a prepared statement of a conn, checked as the conn's are.
type stmt struct {
	s driver.Stmt // implements the context interfaces below
	c *conn
}

func (s *stmt) Close() error  { return s.s.Close() }
func (s *stmt) NumInput() int { return s.s.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	//lint:ignore SA1019 driver.Stmt's own method, forwarded to the wrapped statement
	return s.s.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	//lint:ignore SA1019 driver.Stmt's own method, forwarded to the wrapped statement
	return s.s.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	taking, err := s.c.outside(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.s.(driver.StmtExecContext).ExecContext(ctx, args)
	return r, s.c.busy(taking, err)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	taking, err := s.c.outside(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.s.(driver.StmtQueryContext).QueryContext(ctx, args)
	return r, s.c.busy(taking, err)
}
