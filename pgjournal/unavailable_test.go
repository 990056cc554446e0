package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// F6, F9.5: what the server says when it cannot serve now is typed as
// journal.ErrUnavailable: a protocol violation (08P01, which
// pgbouncer also sends), a read-only server (25006), too many
// connections (53300); what will not clear by itself is left as it is.
func TestClassify(t *testing.T) {
	for code, want := range map[string]bool{
		"08P01": true, "08006": true, "25006": true, "53300": true, "57P01": true, "57014": true,
		"23505": false, "42501": false, "42P01": false, "22021": false, "54000": false,
	} {
		err := classify(context.Background(), fmt.Errorf("statement: %w", &pgconn.PgError{Code: code}))
		if got := errors.Is(err, journal.ErrUnavailable); got != want {
			t.Errorf("%s: unavailable %v, want %v", code, got, want)
		}
	}
	// An error already typed is returned as it was, not typed twice; one
	// that meets the caller's ended context is the caller's doing.
	typed := classify(context.Background(), &pgconn.PgError{Code: "08006"})
	if again := classify(context.Background(), typed); again != typed {
		t.Errorf("classify of a typed error: %v, want it as it was: %v", again, typed)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := classify(ended, &pgconn.PgError{Code: "08006"}); errors.Is(err, journal.ErrUnavailable) {
		t.Errorf("with the caller's context ended: %v, want the error left alone", err)
	}
}

// F9.3: a connection refused as one too many is tried again after a
// pause that starts at a few milliseconds and grows, so a full server is
// not hammered; the wait ends with the statement's context.
func TestARefusedConnectionIsTriedAgainAfterAPause(t *testing.T) {
	// The pool never connects: shed finds no connection to close.
	pool, err := pgxpool.New(context.Background(), "postgres://idem@127.0.0.1:1/idem")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	refused := fmt.Errorf("connecting: %w: %w", &pgconn.ConnectError{}, &pgconn.PgError{Code: "53300"})
	if !tooManyConnections(refused) {
		t.Fatal("the test's refusal is not one too many connections")
	}

	// Pauses from 5 ms, growing by half each time and randomized by
	// half, allow at most 11 tries in 300 ms, and the 12th succeeds; a
	// slower machine makes fewer. Without a pause there are thousands.
	const window = 300 * time.Millisecond
	tries := 0
	start := time.Now()
	err = waitRefused(context.Background(), pool, func(context.Context) error {
		tries++
		if time.Since(start) < window {
			return refused
		}
		return nil
	})
	if err != nil || tries < 2 || tries > 12 {
		t.Fatalf("waitRefused: %v after %d tries in %v; want success after 2 to 12 tries", err, tries, window)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = waitRefused(ctx, pool, func(context.Context) error { return refused })
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "53300" || ctx.Err() == nil {
		t.Fatalf("waitRefused until the context ends: %v; want the refusal, once the context ended", err)
	}
}

// F9.3: only a new connection refused as one too many is waited for:
// PostgreSQL's 53300, or pgbouncer's max_client_conn, a protocol
// violation (08P01) with its own message. Another protocol violation is
// unavailable at once (F9.5), and a statement's error is no refusal.
func TestTooManyConnections(t *testing.T) {
	connecting := func(pe *pgconn.PgError) error {
		return fmt.Errorf("connecting: %w: %w", &pgconn.ConnectError{}, pe)
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"PostgreSQL's too many clients", connecting(&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}), true},
		{"pgbouncer's max_client_conn", connecting(&pgconn.PgError{Code: "08P01", Message: "no more connections allowed (max_client_conn)"}), true},
		{"another protocol violation", connecting(&pgconn.PgError{Code: "08P01", Message: "server conn crashed?"}), false},
		{"that message under another code", connecting(&pgconn.PgError{Code: "57P03", Message: "no more connections allowed"}), false},
		{"53300 from a statement", fmt.Errorf("statement: %w", &pgconn.PgError{Code: "53300"}), false},
		{"no PostgreSQL error", fmt.Errorf("connecting: %w", &pgconn.ConnectError{}), false},
	} {
		if got := tooManyConnections(c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
