package idemserver

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A database without advisory locks (CockroachDB) is told apart from a
// failure, so that New creates the tables without the lock.
func TestNoAdvisoryLocks(t *testing.T) {
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
		if got := noAdvisoryLocks(c.err); got != c.want {
			t.Errorf("noAdvisoryLocks(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// rebind numbers ? in order and keeps ?N.
func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`a = ? AND b = ?`:             `a = $1 AND b = $2`,
		`a = ?1 OR b = ?1 AND c = ?2`: `a = $1 OR b = $1 AND c = $2`,
		`no placeholders`:             `no placeholders`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}
