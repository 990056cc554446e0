package pgjournal_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// leaseOwner returns who holds the live lease on id in dsn's database, or
// "" for none.
func leaseOwner(t *testing.T, dsn, id string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var owner string
	err = conn.QueryRow(ctx, `SELECT coalesce(lease_owner, '') FROM idem_operations
		WHERE op_id = $1 AND lease_until > clock_timestamp()`, id).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// TestTryClaimDoesNotWaitForAnotherMachine is F7.1 on a shared journal: a
// lease another machine holds ends TryClaim at once with a *HeldError
// naming the holder and its lease's end, and no Err (the lease, an hour,
// outlives the call's context, a minute: a TryClaim that waited would end
// with the context's error).
func TestTryClaimDoesNotWaitForAnotherMachine(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := a.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	op := journal.Operation{ID: "charge", Key: "key-1", Fingerprint: sha256.Sum256(nil), Method: http.MethodPost, KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := held.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}

	_, err = b.TryClaim(ctx, "charge")
	var he *journal.HeldError
	if !errors.As(err, &he) || !errors.Is(err, journal.ErrClaimed) || he.Holder != "a" || he.Err != nil || he.Until.IsZero() {
		t.Fatalf("b.TryClaim = %v (%+v), want a *HeldError naming a, its lease's end, and no Err", err, he)
	}
	// Another Do of this process holds it too: the same answer, at once.
	if _, err := a.TryClaim(ctx, "charge"); !errors.As(err, &he) || he.Holder != "a" || he.Err != nil {
		t.Fatalf("a.TryClaim = %v, want a *HeldError naming a and no Err", err)
	}
	// A free ID is claimed.
	other, err := b.TryClaim(ctx, "refund")
	if err != nil {
		t.Fatalf("b.TryClaim of a free ID: %v", err)
	}
	other.Release()
}

// TestAJournalTakesBackItsOwnLeaseAtOnce is F8.1 and F8.2: the database
// stops answering while an attempt is at the server, so the completion and
// the release fail and the lease stays in the database under this
// Journal's name. Once the database answers again, another Journal given
// the same Owner still finds the lease held (F8.2), and the next Do of the
// ID through this Journal resumes under the same key at once (F8.1): the
// lease, an hour, outlives that Do's context, a minute, so a Do that
// waited for it would end with a *HeldError.
func TestAJournalTakesBackItsOwnLeaseAtOnce(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	p, viaProxy := newProxy(t, dsn)
	j := openJournal(t, viaProxy, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Timeout: time.Second})
	srv := newServer(t)
	srv.mu.Lock()
	srv.hold = func(*http.Request) int { p.Freeze(true); return 0 } // the database goes with the answer on its way
	srv.mu.Unlock()
	c := client(t, j)

	resp, err := c.Do("charge", srv.post(t, context.Background()))
	if err != nil {
		t.Fatalf("first Do: %v", err)
	}
	resp.Body.Close()
	p.Cut() // what the completion and the release sent is lost with the connections
	srv.mu.Lock()
	srv.hold = nil
	srv.mu.Unlock()
	if got := leaseOwner(t, dsn, "charge"); got != "a" {
		t.Fatalf("after the failed release the lease is held by %q, want a", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	twin := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour})
	var he *journal.HeldError
	if _, err := twin.TryClaim(ctx, "charge"); !errors.As(err, &he) || he.Holder != "a" {
		t.Fatalf("another Journal named a: TryClaim = %v, want a *HeldError: the lease is not its own", err)
	}

	resp, err = c.Do("charge", srv.post(t, ctx))
	if err != nil {
		t.Fatalf("second Do: %v", err)
	}
	resp.Body.Close()
	if n, keys := srv.requests(); n != 2 || len(keys) != 1 {
		t.Fatalf("the server got %d requests with keys %v, want 2 with one key", n, keys)
	}
	if op, ok := journalhelp.MustLookup(j, "charge"); !ok || op.State != journal.StateDone {
		t.Fatalf("after the second Do the journal holds %+v, %v; want it done", op, ok)
	}
}

// TestAKeptLeaseTakenSinceIsForgotten is F8.3: a lease a failed release
// left, which lapsed and another machine took since, is forgotten when
// the journal reads the row, whether the other machine completed the
// operation or still holds it. Kept, it would match a later lease of the
// same fence under the same owner name, another Journal's, and this one
// would take that lease from under it.
func TestAKeptLeaseTakenSinceIsForgotten(t *testing.T) {
	for _, completed := range []bool{true, false} {
		t.Run(fmt.Sprint("completed=", completed), func(t *testing.T) {
			dsn := pgtest.NewDatabase(t)
			p, viaProxy := newProxy(t, dsn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			j := openJournal(t, viaProxy, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Timeout: time.Second})
			first, err := j.ClaimBegin(ctx, journal.Operation{ID: "charge", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
			if err != nil {
				t.Fatal(err)
			}
			p.Freeze(true)
			first.Release() // fails: j keeps its lease, fence 1 (F8)
			p.Cut()
			if got := leaseOwner(t, dsn, "charge"); got != "a" {
				t.Fatalf("after the failed release the lease is held by %q, want a", got)
			}
			queryRow(t, dsn, `UPDATE idem_operations SET lease_until = clock_timestamp() WHERE op_id = 'charge' RETURNING op_id`, new(string))

			x := openJournal(t, dsn, pgjournal.Options{Owner: "x", LeaseTTL: time.Hour})
			taken, err := x.Claim(ctx, "charge") // the lapsed lease, fence 2
			if err != nil {
				t.Fatal(err)
			}
			forget := func() error { return x.Forget(ctx, "charge") }
			if completed {
				op, _ := taken.Operation()
				op.State, op.Status = journal.StateDone, 201
				if err := taken.Complete(ctx, op); err != nil {
					t.Fatal(err)
				}
				forget = func() error { return x.ForgetCompleted(ctx, "charge", "key-a") }
			}
			read, err := j.TryClaim(ctx, "charge") // j reads the row: completed, or held by x
			switch {
			case completed && err == nil:
				read.Release()
			case completed:
				t.Fatal(err)
			case !errors.Is(err, journal.ErrClaimed):
				t.Fatalf("TryClaim of an operation x holds = %v; want journal.ErrClaimed", err)
			}
			taken.Release()
			if err := forget(); err != nil {
				t.Fatal(err)
			}
			twin := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour})
			held, err := twin.ClaimBegin(ctx, journal.Operation{ID: "charge", Key: "key-twin", KeyTTL: 24 * time.Hour, State: journal.StatePending}) // fence 1 again
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			var he *journal.HeldError
			if c, err := j.TryClaim(ctx, "charge"); !errors.As(err, &he) || he.Holder != "a" {
				if c != nil {
					c.Release()
				}
				t.Fatalf("TryClaim of an operation another Journal named a holds at the fence j once kept = %v; want a *HeldError", err)
			}
		})
	}
}

// TestBeginUnderTryClaimDoesNotWait is F7.1 for the race to begin a new
// ID: TryClaim of an ID no machine has begun takes no lease (Begin takes
// it with the intent); when another machine begins the ID first, Begin
// under that claim returns the holder at once instead of waiting for it.
func TestBeginUnderTryClaimDoesNotWait(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := journal.Operation{ID: "charge", Key: "key-a", Fingerprint: sha256.Sum256(nil), Method: http.MethodPost, KeyTTL: 24 * time.Hour, State: journal.StatePending}

	tried, err := a.TryClaim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer tried.Release()
	won, err := b.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer won.Release()
	bop := op
	bop.Key = "key-b"
	if err := won.Begin(ctx, bop); err != nil {
		t.Fatal(err)
	}

	err = tried.Begin(ctx, op)
	var he *journal.HeldError
	if !errors.As(err, &he) || he.Holder != "b" || he.Err != nil {
		t.Fatalf("Begin under TryClaim of an ID b began = %v, want a *HeldError naming b, without Err", err)
	}
	if got, _ := journalhelp.MustLookup(b, "charge"); got.Key != "key-b" {
		t.Fatalf("the journal holds key %q, want b's", got.Key)
	}
}
