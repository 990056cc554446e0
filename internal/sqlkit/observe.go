package sqlkit

import (
	"context"
	"database/sql/driver"
	"errors"
)

// Observe returns c with connections that tell a request the errors of
// its transaction's statements: while a transaction begun with the
// context of a request (WithWork) is open, every statement of its
// connection that fails reports its error to the request (Work.Met),
// whatever context the statement carries. Once one has failed with an
// error class calls Serialization, the transaction is lost (MySQL rolls
// back the whole transaction at a deadlock, and the connection's next
// statements would commit on their own): the connection's later
// statements until the transaction ends fail with the same error, and
// run nothing. A connection's Unwrap gives the driver's own.
func Observe(c driver.Connector, class func(error) Class) driver.Connector {
	return &observer{c: c, class: class}
}

type observer struct {
	c     driver.Connector
	class func(error) Class
}

func (o *observer) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := o.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &observedConn{c: dc, class: o.class}, nil
}

// Driver is the driver's own, so that the database is told by it.
func (o *observer) Driver() driver.Driver { return o.c.Driver() }

// observedConn is a connection of Observe. database/sql uses a
// connection from one goroutine at a time.
type observedConn struct {
	c     driver.Conn
	class func(error) Class
	w     Work  // the request whose transaction is open, if any
	lost  error // the serialization failure that lost that transaction
}

// Unwrap returns the driver's connection.
func (c *observedConn) Unwrap() driver.Conn { return c.c }

func (c *observedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *observedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *observedConn) Close() error { return c.c.Close() }

func (c *observedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var t driver.Tx
	var err error
	if b, ok := c.c.(driver.ConnBeginTx); ok {
		t, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 a driver without BeginTx has only Begin, as database/sql itself falls back to
		t, err = c.c.Begin()
	}
	if err != nil {
		return nil, err
	}
	c.w, c.lost = WorkFrom(ctx), nil
	return &observedTx{t: t, c: c}, nil
}

// check refuses a statement of a lost transaction.
func (c *observedConn) check() error { return c.lost }

// met reports err, a statement's, to the request whose transaction is
// open, and marks the transaction lost on a serialization failure.
// driver.ErrSkip is no failure: database/sql takes another way.
func (c *observedConn) met(err error) error {
	if err == nil || c.w == nil || errors.Is(err, driver.ErrSkip) {
		return err
	}
	c.w.Met(err)
	if c.class(err) == Serialization {
		c.lost = err
	}
	return err
}

func (c *observedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var s driver.Stmt
	var err error
	if p, ok := c.c.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = c.c.Prepare(query)
	}
	if err != nil {
		return nil, c.met(err)
	}
	return &observedStmt{s: s, c: c}, nil
}

func (c *observedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := e.ExecContext(ctx, query, args)
	return r, c.met(err)
}

func (c *observedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	r, err := q.QueryContext(ctx, query, args)
	return r, c.met(err)
}

func (c *observedConn) Ping(ctx context.Context) error {
	if p, ok := c.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *observedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *observedConn) IsValid() bool {
	if v, ok := c.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *observedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.c.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type observedTx struct {
	t driver.Tx
	c *observedConn
}

func (t *observedTx) Commit() error {
	defer t.end()
	if err := t.c.check(); err != nil {
		t.t.Rollback()
		return err
	}
	return t.t.Commit()
}

func (t *observedTx) Rollback() error {
	defer t.end()
	return t.t.Rollback()
}

func (t *observedTx) end() { t.c.w, t.c.lost = nil, nil }

// observedStmt is a prepared statement of an observedConn.
type observedStmt struct {
	s driver.Stmt
	c *observedConn
}

func (s *observedStmt) Close() error  { return s.s.Close() }
func (s *observedStmt) NumInput() int { return s.s.NumInput() }

func (s *observedStmt) Exec(args []driver.Value) (driver.Result, error) {
	if err := s.c.check(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 driver.Stmt's own method, forwarded to the wrapped statement
	r, err := s.s.Exec(args)
	return r, s.c.met(err)
}

func (s *observedStmt) Query(args []driver.Value) (driver.Rows, error) {
	if err := s.c.check(); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 driver.Stmt's own method, forwarded to the wrapped statement
	r, err := s.s.Query(args)
	return r, s.c.met(err)
}

func (s *observedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.s.(driver.StmtExecContext)
	if !ok {
		values, err := valuesOf(args)
		if err != nil {
			return nil, err
		}
		return s.Exec(values)
	}
	if err := s.c.check(); err != nil {
		return nil, err
	}
	r, err := e.ExecContext(ctx, args)
	return r, s.c.met(err)
}

func (s *observedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.s.(driver.StmtQueryContext)
	if !ok {
		values, err := valuesOf(args)
		if err != nil {
			return nil, err
		}
		return s.Query(values)
	}
	if err := s.c.check(); err != nil {
		return nil, err
	}
	r, err := q.QueryContext(ctx, args)
	return r, s.c.met(err)
}

// CheckNamedValue is the statement's checker, else its connection's, as
// database/sql would look for them on the driver's own.
func (s *observedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.s.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

// valuesOf turns named arguments into positional ones for a driver
// without the context interfaces.
func valuesOf(args []driver.NamedValue) ([]driver.Value, error) {
	values := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("sqlkit: the driver does not support named arguments")
		}
		values[i] = a.Value
	}
	return values, nil
}
