package pgjournal_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// TestALeaseIsRenewedWhileTheAttemptRuns is F3.3: an attempt that runs
// past the machine's LeaseTTL keeps the lease, renewed in the database
// while it runs, so another machine's Do of the operation still waits,
// and the attempt's outcome is recorded.
func TestALeaseIsRenewedWhileTheAttemptRuns(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const lease = 3 * time.Second // renewed every second
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: lease})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	srv := newServer(t)
	heldByA := make(chan error, 1)
	srv.hold = func(r *http.Request) int {
		// Answer once the lease was renewed twice (its end moved twice,
		// which takes over LeaseTTL), or when the client gives up.
		var ends []time.Time
		for len(ends) < 3 && r.Context().Err() == nil {
			var until *time.Time
			err := conn.QueryRow(r.Context(), `SELECT lease_until FROM idem_operations WHERE op_id = 'charge'`).Scan(&until)
			if err == nil && until != nil && (len(ends) == 0 || until.After(ends[len(ends)-1])) {
				ends = append(ends, *until)
			}
			time.Sleep(10 * time.Millisecond) // polls the database; the renewals come every LeaseTTL/3
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		c, err := b.Claim(ctx, "charge")
		if err == nil {
			c.Release()
		}
		heldByA <- err
		return 0
	}
	resp, err := client(t, a).Do("charge", srv.post(t, context.Background()))
	if err != nil {
		t.Fatalf("a Do whose attempt outlived LeaseTTL: %v", err)
	}
	resp.Body.Close()
	var held *journal.HeldError
	if err := <-heldByA; !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("another machine's claim during the renewed attempt: %v, want a *HeldError naming a", err)
	}
	if got, _, _ := b.Lookup(context.Background(), "charge"); got.State != journal.StateDone {
		t.Fatalf("state %s, want done", got.State)
	}
}

// TestTheDatabasesClockIsReadAtEveryClaim is F4.4: when the database's
// clock steps (a failover to a server whose clock differs, an NTP step),
// the journal's Now follows it at the next claim, not only at Open.
func TestTheDatabasesClockIsReadAtEveryClaim(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	exec(t, dsn, `CREATE TABLE clock_step (d interval NOT NULL)`)
	exec(t, dsn, `INSERT INTO clock_step VALUES ('0')`)
	exec(t, dsn, `CREATE SCHEMA stepped`)
	exec(t, dsn, `CREATE FUNCTION stepped.clock_timestamp() RETURNS timestamptz LANGUAGE sql
		AS $$ SELECT pg_catalog.clock_timestamp() + (SELECT d FROM public.clock_step) $$`)
	stepped := dsn + "&options=-c%20search_path%3Dpublic,stepped,pg_catalog"
	if !strings.Contains(dsn, "?") {
		stepped = dsn + "?options=-c%20search_path%3Dpublic,stepped,pg_catalog"
	}
	j := openJournal(t, stepped, pgjournal.Options{})
	ctx := context.Background()
	c, err := j.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Begin(ctx, journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if d := time.Until(j.Now()); d > time.Minute || d < -time.Minute {
		t.Fatalf("before the step the journal's clock is %s off this machine's", d)
	}
	exec(t, dsn, `UPDATE clock_step SET d = '2 hours'`)
	c, err = j.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if d := time.Until(j.Now()); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
		t.Fatalf("after the step and a claim the journal's clock is %s ahead, want the database's 2h", d)
	}
}

// TestADatabaseThatStopsAnsweringFailsDoBeforeSending is F6.2 on Do: a
// database that stops answering (no error, no close) makes Do fail within
// Options.Timeout with journal.ErrUnavailable, nothing sent.
func TestADatabaseThatStopsAnsweringFailsDoBeforeSending(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	openJournal(t, dsn, pgjournal.Options{}) // the tables exist
	p, via := newProxy(t, dsn)
	j := openJournal(t, via, pgjournal.Options{Timeout: 2 * time.Second, NoMigrate: true})
	srv := newServer(t)
	p.Freeze(true)
	_, err := client(t, j).Do("charge", srv.post(t, context.Background()))
	p.Freeze(false)
	if !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("Do with the database not answering: %v, want journal.ErrUnavailable", err)
	}
	if n, _ := srv.requests(); n != 0 {
		t.Fatalf("%d requests sent while the database did not answer", n)
	}
}

// TestANamespaceIsAJournalOfItsOwn is F2.3 for claims: a claim in one
// namespace neither answers from another's completed operation nor waits
// for another's lease, and its outcome leaves the other's pending
// operation of the same ID as it was.
func TestANamespaceIsAJournalOfItsOwn(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Namespace: "a", Owner: "a", LeaseTTL: time.Hour})
	b := openJournal(t, dsn, pgjournal.Options{Namespace: "b", Owner: "b"})
	srv := newServer(t)
	ctx := context.Background()

	resp, err := client(t, a).Do("done-in-a", srv.post(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ca, err := a.Claim(ctx, "pending-in-a") // held for the whole test
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Release()
	pending := journal.Operation{ID: "pending-in-a", Key: "a-key", Method: "POST", URL: srv.URL + "/charges", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(ctx, pending); err != nil {
		t.Fatal(err)
	}

	// A claim in namespace b (a batch's path, which reads the row
	// before it begins) finds neither of a's operations.
	for _, id := range []string{"done-in-a", "pending-in-a"} {
		cb, err := b.Claim(ctx, id)
		if err != nil {
			t.Fatalf("namespace b's Claim of %s: %v", id, err)
		}
		op, ok := cb.Operation()
		cb.Release()
		if ok {
			t.Fatalf("namespace b's Claim of %s found namespace a's operation %+v", id, op)
		}
	}
	for _, id := range []string{"done-in-a", "pending-in-a"} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client(t, b).Do(id, srv.post(t, wctx))
		cancel()
		if err != nil {
			t.Fatalf("namespace b's Do of %s: %v", id, err)
		}
		resp.Body.Close()
		if idem.Recorded(resp) {
			t.Fatalf("namespace b answered %s from namespace a's outcome", id)
		}
	}
	if n, keys := srv.requests(); n != 3 || len(keys) != 3 {
		t.Fatalf("%d requests under %d keys, want 3 under 3: each namespace mints its own", n, len(keys))
	}
	got, ok, err := a.Lookup(ctx, "pending-in-a")
	if err != nil || !ok || got.State != journal.StatePending || got.Key != "a-key" {
		t.Fatalf("namespace a's pending operation is now %+v (%v, %v), want it pending under a-key", got, ok, err)
	}
}

// renewal is the text by which a traced statement is known as a lease's
// renewal.
const renewal = "SET lease_until = clock_timestamp() + $4"

// F3.5 and F3.8 when a renewal's answer comes back late: the end the
// holder believes its lease has is counted from when the renewal was
// sent, not from when its answer arrived, so a holder whose renewal
// answered late and that renews no more believes its lease lapsed (and
// closes Lost) a tenth of LeaseTTL before another machine can take it in
// the database. The end is read from the claim, and compared with when
// the renewal went out, rather than raced against the other machine's
// claim: the race is the timer's, which a loaded machine may delay.
func TestALateRenewalAnswerMovesTheLeaseFromWhenItWasSent(t *testing.T) {
	const ttl = 4 * time.Second
	dsn := pgtest.NewDatabase(t)
	p, viaProxy := newProxy(t, dsn)
	tr := &tracer{}
	a := tracedJournal(t, viaProxy, pgjournal.Options{Owner: "a", LeaseTTL: ttl}, tr)
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	var renewals atomic.Int32
	var firstSent time.Time       // no earlier than the holder noted the first renewal's send
	second := make(chan struct{}) // closed as the second renewal goes out: the first one's end is kept
	tr.mu.Lock()
	tr.before = func(sql string) {
		if !strings.Contains(sql, renewal) {
			return
		}
		switch renewals.Add(1) {
		case 1:
			firstSent = time.Now()
		case 2:
			p.Cut() // no later renewal reaches the database
			close(second)
		default:
			p.Cut()
		}
	}
	tr.after = func(sql string) {
		if strings.Contains(sql, renewal) && renewals.Load() == 1 {
			time.Sleep(ttl / 2) // the first renewal is made, its answer arrives late
		}
	}
	tr.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := a.ClaimBegin(ctx, journal.Operation{ID: "op", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Release()
	select {
	case <-second:
	case <-ctx.Done():
		t.Fatalf("%d renewals in a minute; want the late one and one after it", renewals.Load())
	}
	// The database set the lease's end LeaseTTL after it ran the first
	// renewal, which was after firstSent.
	end := pgjournal.LeaseDeadline(ca)
	if latest := firstSent.Add(ttl - ttl/10); end.After(latest) {
		t.Fatalf("the holder believes its lease ends %s after its renewal was sent, whose answer came %s late; want at most %s, nine tenths of LeaseTTL",
			end.Sub(firstSent), ttl/2, ttl-ttl/10)
	}
	cb, err := b.Claim(ctx, "op") // waits until the lease has ended in the database
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Release()
	if taken := time.Now(); !end.Before(taken) {
		t.Fatalf("another machine took the lease %s before the end its holder believed it had", end.Sub(taken))
	}
	select {
	case <-ca.Lost():
	case <-ctx.Done():
		t.Fatal("the holder's Lost was not closed within a minute of its lease's end")
	}
}

// TestAFailedRenewalIsTriedAgainAndMovesNothing is F3.8: a lease renewal
// that fails (its connection broken here) is tried again after a tenth of
// LeaseTTL, and only a renewal the database made moves the end the holder
// believes its lease has: one failure keeps the claim, renewals that keep
// failing lose it at that end.
func TestAFailedRenewalIsTriedAgainAndMovesNothing(t *testing.T) {
	const ttl = 2 * time.Second // a retry after a tenth has 0.9 s to land before the lease's end
	for _, failing := range []string{"once", "always"} {
		t.Run(failing, func(t *testing.T) {
			dsn := pgtest.NewDatabase(t)
			p, viaProxy := newProxy(t, dsn)
			tr := &tracer{}
			j := tracedJournal(t, viaProxy, pgjournal.Options{Owner: "a", LeaseTTL: ttl}, tr)
			var renewals atomic.Int32
			tr.mu.Lock()
			tr.before = func(sql string) {
				if strings.Contains(sql, renewal) {
					if renewals.Add(1) == 1 || failing == "always" {
						p.Cut() // the statement goes out on a broken connection
					}
				}
			}
			tr.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := j.ClaimBegin(ctx, journal.Operation{ID: "op", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			taken := time.Now()
			switch failing {
			case "once":
				select {
				case <-c.Lost():
					t.Fatalf("the claim was lost %s after it was taken, its first renewal failed and %d made; want it kept", time.Since(taken), renewals.Load())
				case <-time.After(3 * ttl):
				}
				if n := renewals.Load(); n < 3 {
					t.Fatalf("%d renewals in three LeaseTTL, the first failed; want it tried again, and the lease renewed since", n)
				}
			case "always":
				select {
				case <-c.Lost():
					if lost := time.Since(taken); lost >= 2*ttl {
						t.Fatalf("the claim was lost %s after it was taken, every renewal failing; want it lost within its lease", lost)
					}
				case <-time.After(5 * ttl):
					t.Fatalf("the claim was kept for five LeaseTTL while %d renewals failed; want it lost at its lease's end", renewals.Load())
				}
				if n := renewals.Load(); n < 3 {
					t.Fatalf("%d renewals before the lease's end, every one failing; want each tried again after a tenth of LeaseTTL", n)
				}
			}
		})
	}
}
