package pgjournal_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// F9.6: a namespace or an owner PostgreSQL cannot store (NUL, invalid
// UTF-8, a namespace over MaxNamespaceLen) is refused at Open with
// pgjournal.ErrInvalidOptions, before anything is written.
func TestF9NamespaceCheckedAtOpen(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	for name, o := range map[string]pgjournal.Options{
		"NUL":          {Namespace: "night\x00ly"},
		"invalid UTF8": {Namespace: "night\xffly"},
		"too long":     {Namespace: strings.Repeat("n", pgjournal.MaxNamespaceLen+1)},
		"owner NUL":    {Owner: "host\x00"},
	} {
		o.Logger = quiet
		j, err := pgjournal.Open(ctx, dsn, o)
		if !errors.Is(err, pgjournal.ErrInvalidOptions) {
			if j != nil {
				j.Close()
			}
			t.Errorf("%s: Open: %v, want ErrInvalidConfig", name, err)
		}
	}
	// Nothing was migrated: the first Open to succeed creates the tables.
	var n int
	if err := pgxQueryRow(dsn, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'idem_%'`, &n); err != nil || n != 0 {
		t.Fatalf("after refused Opens: %d idem tables (%v), want 0", n, err)
	}
	openJournal(t, dsn, pgjournal.Options{Namespace: strings.Repeat("n", pgjournal.MaxNamespaceLen)})
}

// F9.7: an ID is checked at Claim against what the index can hold, the
// same whatever the ID's bytes compress to: MaxIDLen random bytes under
// the longest namespace are journaled and sent (no 54000); one byte more
// is refused with journal.ErrInvalidOperation before anything is sent, and
// the error names the ID once, shortened.
func TestF9IDCheckedAtClaim(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	j := openJournal(t, dsn, pgjournal.Options{Namespace: strings.Repeat("n", pgjournal.MaxNamespaceLen)})
	c := client(t, j)
	l := newLedger(t, 0)
	random := make([]byte, pgjournal.MaxIDLen/2)
	rand.Read(random)
	longest := hex.EncodeToString(random) // incompressible: the index holds it whole
	if err := l.do(ctx, c, longest); err != nil {
		t.Fatalf("Do of a %d-byte ID: %v", len(longest), err)
	}
	op, ok, err := j.Lookup(ctx, longest)
	if err != nil || !ok || op.State != journal.StateDone {
		t.Fatalf("Lookup of the %d-byte ID: %v %v %v", len(longest), ok, err, op.State)
	}

	for name, id := range map[string]string{
		"over MaxIDLen": longest + "x",
		"NUL":           "charge\x00",
		"invalid UTF8":  "charge\xff",
	} {
		err := l.do(ctx, c, id)
		if !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("%s: Do: %v, want ErrInvalidOperation", name, err)
			continue
		}
		if name == "over MaxIDLen" {
			if n := strings.Count(err.Error(), longest[:40]); n != 1 || len(err.Error()) > 300 {
				t.Errorf("the error names the ID %d times in %d bytes, want once, shortened: %v", n, len(err.Error()), err)
			}
			if !strings.Contains(err.Error(), "the journal refuses its ID") {
				t.Errorf("the error does not say what happened: %v", err)
			}
		}
	}
	if len(l.keys) != 1 {
		t.Fatalf("refused IDs were sent: %d operations on the server, want 1", len(l.keys))
	}
}

// pgxQueryRow scans the one row of sql, on a connection of its own to dsn.
func pgxQueryRow(dsn, sql string, dest ...any) error {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(context.Background(), sql).Scan(dest...)
}

// A nil *Journal given to idem.New is refused as an invalid Config, not
// a panic on its first call.
func TestNilJournalRefusedByNew(t *testing.T) {
	if _, err := idem.New(idem.Config{Journal: (*pgjournal.Journal)(nil)}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New with a nil *pgjournal.Journal = %v, want ErrInvalidConfig", err)
	}
}
