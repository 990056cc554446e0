package pgkit_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem/idemserver/internal/pgkit"
	"github.com/jackc/pgx/v5/pgconn"
)

// A database without advisory locks (CockroachDB) is told apart from a
// failure, so that New creates the tables without the lock.
func TestNoSchemaLock(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", &pgconn.PgError{Code: "42883"}), true},
		{&pgconn.PgError{Code: "0A000"}, true},
		{&pgconn.PgError{Code: "40001"}, false},
		{errors.New("42883"), false},
		{nil, false},
	} {
		if got := pgkit.Flavor.NoSchemaLock(c.err); got != c.want {
			t.Errorf("NoSchemaLock(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A connection attempt PostgreSQL never answered is Unavailable; one it
// answered is what its SQLSTATE says.
func TestConnectErrors(t *testing.T) {
	refused := &pgconn.ConnectError{Config: &pgconn.Config{}}
	if !pgkit.Unavailable(refused) {
		t.Error("ConnectError: not Unavailable")
	}
	if !pgkit.Serialization(fmt.Errorf("x: %w", &pgconn.PgError{Code: "40P01"})) {
		t.Error("40P01: not Serialization")
	}
	if pgkit.Unavailable(&pgconn.PgError{Code: "28P01"}) {
		t.Error("28P01 (a wrong password): Unavailable")
	}
}

// A connection attempt PostgreSQL answered with an error is classified by
// that error's SQLSTATE, not as a connection that failed.
func TestAnsweredConnectErrorIsItsSQLState(t *testing.T) {
	dsn := "postgres://postgres@127.0.0.1:1/x"
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgconn.ConnectConfig(t.Context(), cfg)
	if !pgkit.Unavailable(err) {
		t.Fatalf("a refused connection (%v): not Unavailable", err)
	}
	answered := fmt.Errorf("connect: %w", &wrapped{&pgconn.ConnectError{Config: cfg}, &pgconn.PgError{Code: "3D000"}})
	if pgkit.Unavailable(answered) {
		t.Errorf("%v: Unavailable, want a database that does not exist", answered)
	}
}

// wrapped is a ConnectError around a PgError, as pgx returns for a
// server that refused the connection with an error.
type wrapped struct {
	ce *pgconn.ConnectError
	pe *pgconn.PgError
}

func (w *wrapped) Error() string   { return w.ce.Error() + ": " + w.pe.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.ce, w.pe} }
