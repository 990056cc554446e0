package idemserver

// Boundaries of the package's unexported helpers that no request can reach
// deterministically: the errors that mean an unreachable database, the
// lease's renewal and how inTx counts reruns.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver/internal/pgkit"
	"github.com/idemkit/idem/idemserver/sqlite"
	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/jackc/pgx/v5/pgconn"
)

// Every error that says the database cannot be reached or is busy makes
// the request 503 with Retry-After (the package doc's atomic rule: "503
// with Retry-After when the database is unreachable, busy or contended"),
// each on its own, and a failed statement does not.
func TestUnavailableTellsEachUnreachableDatabaseErrorOnItsOwn(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"ErrUnavailable", fmt.Errorf("x: %w", ErrUnavailable), true},
		{"driver.ErrBadConn", fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{"08006 connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"53300 too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"57P01 admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"57P02 crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"57P03 cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"57P04 database dropped", &pgconn.PgError{Code: "57P04"}, false},
		{"23505 unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"pgconn.ConnectError", &pgconn.ConnectError{Config: &pgconn.Config{}}, true},
		{"net.OpError", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}, true},
		{"net.ErrClosed", fmt.Errorf("x: %w", net.ErrClosed), true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true},
		{"a failed statement", errors.New("syntax error"), false},
	} {
		k := &Keys{db: sqlkit.SQL(nil, pgkit.Flavor)}
		if got := k.class(c.err) == sqlkit.Unavailable; got != c.want {
			t.Errorf("unavailable(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// L5.5: a lease whose context has ended cannot be renewed, whether it
// ended by its timer or by end, so that a holder never works on past it.
func TestRenewRefusesAnEndedLease(t *testing.T) {
	ended := newLease(context.Background(), time.Hour)
	ended.end()
	if ended.renew(time.Hour) {
		t.Error("renew after end: true, want false")
	}
	// The context ended while the timer still runs (a cancelled parent).
	parent, cancel := context.WithCancel(context.Background())
	cut := newLease(parent, time.Hour)
	cancel()
	<-cut.ctx.Done()
	if cut.renew(time.Hour) {
		t.Error("renew of a lease whose context ended: true, want false")
	}
	cut.end()
	lapsed := newLease(context.Background(), time.Millisecond)
	<-lapsed.ctx.Done()
	if lapsed.renew(time.Hour) {
		t.Error("renew after the lease ran out: true, want false")
	}
	if err := context.Cause(lapsed.ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", err)
	}
	live := newLease(context.Background(), time.Hour)
	defer live.end()
	if !live.renew(time.Hour) {
		t.Error("renew of a live lease: false, want true")
	}
}

// After Config.Reruns reruns inTx gives up with ErrContention, saying how
// many runs it made: the first and each rerun.
func TestInTxCountsItsRuns(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "k.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := New(context.Background(), Config{DB: db, Reruns: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	runs := 0
	err = k.inTx(context.Background(), sql.LevelSerializable, func(sqlkit.Tx) error {
		runs++
		return &pgconn.PgError{Code: "40001"}
	})
	if !errors.Is(err, ErrContention) || !strings.Contains(err.Error(), "(3 runs)") || runs != 3 {
		t.Fatalf("after %d runs: %v; want 3 runs and ErrContention saying (3 runs)", runs, err)
	}
}
