package pgtest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/idemkit/idem/lab/testkit/pgserver"
)

// NewBouncer starts pgbouncer in front of the server dsn names, as
// pgserver.StartBouncer does with mode and extra, and stops it when t
// ends. Without pgbouncer t skips, or fails when CI=true.
func NewBouncer(t testing.TB, dsn, mode string, extra ...string) *pgserver.Bouncer {
	t.Helper()
	b, err := pgserver.StartBouncer(context.Background(), dsn, mode, extra...)
	if errors.Is(err, pgserver.ErrNoBouncer) {
		if ci, _ := strconv.ParseBool(os.Getenv(envCI)); ci {
			t.Fatalf("pgtest: %v; failing since CI=true", err)
		}
		t.Skipf("pgtest: %v; skipping (CI=true makes this a failure)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("pgtest: stopping pgbouncer: %v", err)
		}
	})
	return b
}
