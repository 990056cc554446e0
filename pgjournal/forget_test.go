package pgjournal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// begin journals a pending operation id in j.
func beginOp(t *testing.T, j *pgjournal.Journal, id string) {
	t.Helper()
	ctx := context.Background()
	c, err := j.Claim(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := c.Begin(ctx, journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "https://api.example.test/x", KeyTTL: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// TestForgetAndSettle: Forget deletes a pending or a completed row (and
// nothing else), waits for a machine holding the lease, and reports an
// unknown ID; idem.Settle records an outcome by hand through the lease.
func TestForgetAndSettle(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a, b := openJournal(t, dsn, pgjournal.Options{}), openJournal(t, dsn, pgjournal.Options{})
	ctx := context.Background()
	for _, id := range []string{"p", "d", "keep", "held"} {
		beginOp(t, a, id)
	}
	if err := idem.Settle(ctx, a, "d", idem.Settlement{State: journal.StateDone, Status: 201, Note: "seen in the dashboard"}); err != nil {
		t.Fatal(err)
	}
	op, ok, err := b.Lookup(ctx, "d")
	if err != nil || !ok || op.State != journal.StateDone || op.Status != 201 || !op.Settled || op.SettledNote != "seen in the dashboard" {
		t.Fatalf("settled op on another machine: %+v %v %v", op, ok, err)
	}
	if err := idem.Settle(ctx, b, "d", idem.Settlement{State: journal.StateRejected, Status: 400}); !errors.Is(err, journal.ErrAlreadyCompleted) {
		t.Fatalf("Settle of a completed op = %v, want ErrAlreadyCompleted", err)
	}
	if err := b.Forget(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := b.Forget(ctx, "d"); !errors.Is(err, journal.ErrAlreadyCompleted) {
		t.Fatalf("Forget of a completed op = %v, want ErrAlreadyCompleted", err)
	}
	// F5: a completed operation is deleted only under the key it was
	// seen with.
	if err := b.ForgetCompleted(ctx, "d", "another-key"); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("ForgetCompleted under another key = %v, want ErrNoSuchOperation", err)
	}
	if err := b.ForgetCompleted(ctx, "d", op.Key); err != nil {
		t.Fatal(err)
	}
	if err := b.Forget(ctx, "nope"); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("Forget of an unknown ID = %v, want ErrNoSuchOperation", err)
	}
	for id, want := range map[string]bool{"p": false, "d": false, "keep": true} {
		if _, ok, err := a.Lookup(ctx, id); ok != want || err != nil {
			t.Fatalf("Lookup(%s) after Forget = %v, %v; want %v", id, ok, err, want)
		}
	}
	// A machine holding the lease makes Forget wait.
	held, err := a.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := b.Forget(short, "held"); !errors.Is(err, journal.ErrClaimed) {
		t.Fatalf("Forget while another machine holds the lease = %v, want ErrClaimed", err)
	}
	held.Release()
	if err := b.Forget(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	// A forgotten ID begins again, with a new key.
	beginOp(t, b, "p")
}

// TestForgetStopsTheRenewalsOfItsLease: Forget of a pending operation
// takes its lease to delete the row, and stops renewing the lease with
// it: a renewal left running would find no row and report the lease
// taken over.
func TestForgetStopsTheRenewalsOfItsLease(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	beginOp(t, j, "op")
	if err := j.Forget(context.Background(), "op"); err != nil {
		t.Fatal(err)
	}
	if n := pgjournal.Held(j); n != 0 {
		t.Fatalf("after Forget returned the journal renews %d leases; want none", n)
	}
}
