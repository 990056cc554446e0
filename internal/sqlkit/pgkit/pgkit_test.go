package pgkit_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem/internal/sqlkit/pgkit"
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
