package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/idemkit/idem/internal/sqlkit"
	"github.com/idemkit/idem/journal"
	"github.com/jackc/pgx/v5/pgconn"
)

// classify marks an error of the database as journal.ErrUnavailable
// when it says the database could not be reached or did not answer in time:
// a connection that failed or broke, a statement past
// Options.Timeout, a server shutting down or refusing connections. Other
// errors (a constraint, a permission, a schema mismatch, a row that does not
// decode) are left as they are: they will not clear by themselves. When
// ctx, the caller's context, has ended, the error is the caller's doing and
// is left alone too.
func classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, journal.ErrUnavailable) {
		return err
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %w", journal.ErrUnavailable, err)
	}
	return err
}

// unreachable reports whether err says the database did not answer.
func unreachable(err error) bool {
	var (
		pe *pgconn.PgError
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case errors.As(err, &pe):
		return unavailableCode(pe.Code)
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// unavailableCode reports whether a PostgreSQL error code says the server
// cannot serve now, by the SQL substrate's classification: connection
// exceptions (class 08, protocol violations 08P01 included, which a pooler
// such as pgbouncer also sends when it loses its server), a server
// shutting down or starting up (57P01..57P03), too many connections
// (53300), a statement cancelled by statement_timeout (57014), or a server
// that takes no writes (25006, a standby, or a primary demoted in a
// failover: a multi-host DSN without target_session_attrs=read-write can
// land on one).
func unavailableCode(code string) bool { return sqlkit.SQLState(code) == sqlkit.Unavailable }

// tooManyConnections reports whether err is a server refusing a new
// connection as one too many: PostgreSQL's 53300, or pgbouncer's
// max_client_conn, which it sends as a protocol violation (08P01). The
// statement was not sent.
func tooManyConnections(err error) bool {
	var (
		ce *pgconn.ConnectError
		pe *pgconn.PgError
	)
	return errors.As(err, &ce) && errors.As(err, &pe) &&
		(pe.Code == "53300" || pe.Code == "08P01" && strings.HasPrefix(pe.Message, "no more connections allowed"))
}
