package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5/pgconn"
)

// classify marks an error of the database as idem.ErrJournalUnavailable
// when it says the database could not be reached or did not answer in time
// (F6), and leaves other errors (a constraint, a permission, a schema
// mismatch) as they are. When ctx, the caller's context, has ended, the
// error is the caller's doing, not the database's, and is left alone too.
func classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, idem.ErrJournalUnavailable) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && !unavailableCode(pe.Code) {
		return err
	}
	return fmt.Errorf("%w: %w", idem.ErrJournalUnavailable, err)
}

// unavailableCode reports whether a PostgreSQL error code says the server
// cannot serve now: connection exceptions (class 08), a server shutting
// down or starting up (57P01..57P03), too many connections (53300), or a
// statement cancelled by statement_timeout (57014).
func unavailableCode(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" ||
		code == "53300" || code == "57014"
}
