package pgjournal

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5/pgconn"
)

// F6, F9.5: what the server says when it cannot serve now is typed as
// idem.ErrJournalUnavailable: a protocol violation (08P01, which
// pgbouncer also sends), a read-only server (25006), too many
// connections (53300); what will not clear by itself is left as it is.
func TestClassify(t *testing.T) {
	for code, want := range map[string]bool{
		"08P01": true, "08006": true, "25006": true, "53300": true, "57P01": true, "57014": true,
		"23505": false, "42501": false, "42P01": false, "22021": false, "54000": false,
	} {
		err := classify(context.Background(), fmt.Errorf("statement: %w", &pgconn.PgError{Code: code}))
		if got := errors.Is(err, idem.ErrJournalUnavailable); got != want {
			t.Errorf("%s: unavailable %v, want %v", code, got, want)
		}
	}
}
