package pgjournal_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// C16.3 for the shared journal: a row an earlier release completed holds
// the marks as fields of its header; it reads back with the marks in the
// operation's fields and the header without them. A row this release
// writes reads back the same marks.
func TestAnOldRowsHeaderMarksReadAsFields(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{})
	ctx := context.Background()
	beginOp(t, j, "old")
	old := http.Header{"Content-Type": {"application/json"}, "Idem-Key-Reused": {"IdempotentParameterMismatch"},
		"Idem-Settled": {"by hand"}, "Idem-Settled-Note": {"seen"}, "Idem-Unrecorded-Headers": {"Set-Cookie"}}
	exec(t, dsn, `UPDATE idem_operations SET state = 3, status = 400, completed_ns = created_ns + 1, header = $1 WHERE op_id = 'old'`,
		journalkit.EncodeHeader(old))
	got, ok, err := j.Lookup(ctx, "old")
	if err != nil || !ok {
		t.Fatalf("Lookup: %v %v", ok, err)
	}
	if got.KeyReused != "IdempotentParameterMismatch" || !got.Settled || got.SettledNote != "seen" || got.Applied ||
		!slices.Equal(got.Unrecorded, []string{"Set-Cookie"}) || len(got.Header) != 1 || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the old row reads as %+v; want its marks as fields, Content-Type alone in the header", got)
	}

	beginOp(t, j, "new")
	c, err := j.Claim(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	op, _ := c.Operation()
	op.State, op.Status, op.Completed = journal.StateDone, 409, time.Now()
	op.Applied, op.Unrecorded = true, []string{"Authorization"}
	op.Header = http.Header{"Idem-Already-Applied": {"false"}, "X-Server": {"s"}} // a server's field of a mark's name is not stored
	if err := c.Complete(ctx, op); err != nil {
		t.Fatal(err)
	}
	c.Release()
	got, _, err = j.Lookup(ctx, "new")
	if err != nil || !got.Applied || !slices.Equal(got.Unrecorded, []string{"Authorization"}) || len(got.Header) != 1 || got.Header.Get("X-Server") != "s" {
		t.Fatalf("the new row reads as %+v (%v); want applied, Authorization unrecorded, X-Server alone in the header", got, err)
	}
}
