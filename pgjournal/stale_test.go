package pgjournal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// The tests here wake a stale holder: a machine whose lease lapsed and was
// taken over, and which then renews, completes and releases as if it still
// held it. The lapse is made by the database's clock, not by waiting: each
// stale machine's sessions read a clock_timestamp() that runs hours
// behind, so every lease it takes or renews has already lapsed by the
// clock of the machines after it, and the next one takes the operation
// over at once, however the stale machine's renewals fall.

// behind returns dsn with its sessions' clock_timestamp() lag hours
// behind the database's, through a function in a schema of their own
// that their search_path puts before pg_catalog.
func behind(t *testing.T, dsn string, hours int) string {
	t.Helper()
	schema := fmt.Sprintf("behind_%d", hours)
	exec(t, dsn, `CREATE SCHEMA `+schema)
	exec(t, dsn, fmt.Sprintf(`CREATE FUNCTION %s.clock_timestamp() RETURNS timestamptz LANGUAGE sql
		AS $$ SELECT pg_catalog.clock_timestamp() - interval '%d hours' $$`, schema, hours))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c search_path=public,"+schema+",pg_catalog") // tables in public
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")         // pgx reads + as itself
	return u.String()
}

// logMessages is a slog.Handler that keeps the messages it gets.
type logMessages struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logMessages) Enabled(context.Context, slog.Level) bool { return true }
func (l *logMessages) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logMessages) WithGroup(string) slog.Handler            { return l }
func (l *logMessages) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}

func (l *logMessages) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

func (l *logMessages) has(msg string) bool { return slices.Contains(l.all(), msg) }

// Messages the renewal loop logs when it stops.
const (
	logTakenOver = "pgjournal: lease taken over"
	logLapsed    = "pgjournal: lease lapsed before it could be renewed"
)

// leaseRow is what the database holds of an operation's lease and outcome.
type leaseRow struct {
	owner  *string
	until  *time.Time
	fence  int64
	state  int16
	status int32
	body   string
}

func (r leaseRow) String() string {
	owner, until := "NULL", "NULL"
	if r.owner != nil {
		owner = *r.owner
	}
	if r.until != nil {
		until = r.until.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("owner %s until %s fence %d state %d status %d body %q", owner, until, r.fence, r.state, r.status, r.body)
}

// readLease reads the row of operation id in the default namespace.
func readLease(t *testing.T, dsn, id string) leaseRow {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var r leaseRow
	var body []byte
	err = conn.QueryRow(ctx, `SELECT lease_owner, lease_until, fence, state, status, body FROM idem_operations
		WHERE namespace = $1 AND op_id = $2`, pgjournal.DefaultNamespace, id).
		Scan(&r.owner, &r.until, &r.fence, &r.state, &r.status, &body)
	if err != nil {
		t.Fatal(err)
	}
	r.body = string(body)
	return r
}

// wantLease fails unless the row is still what it was.
func wantLease(t *testing.T, dsn, id, after string, want leaseRow) {
	t.Helper()
	if got := readLease(t, dsn, id); got.String() != want.String() {
		t.Fatalf("after %s the row is\n\t%s\nwant it untouched:\n\t%s", after, got, want)
	}
}

// claimWithin claims id on j, failing the test if that takes a minute:
// the lease it takes over has lapsed by its clock, so it must not wait.
func claimWithin(t *testing.T, j *pgjournal.Journal, id string) journal.Claim {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := j.Claim(ctx, id)
	if err != nil {
		t.Fatalf("%s's claim: %v", j.Owner(), err)
	}
	return c
}

// waitTakenOver waits until c's renewal loop finds its lease taken over.
// A renewal runs every third of the stale machine's LeaseTTL and each one
// leaves the lease lapsed for the others, so the first renewal after the
// takeover is refused; the log tells that refusal from the machine's own
// deadline passing.
func waitTakenOver(t *testing.T, who string, c journal.Claim, log *logMessages) {
	t.Helper()
	select {
	case <-c.Lost():
	case <-time.After(20 * staleLeaseTTL / 3): // twenty renewals
		t.Fatalf("%s renews a lease another machine took over", who)
	}
	if !log.has(logTakenOver) || log.has(logLapsed) {
		t.Fatalf("%s lost its lease without its renewal being refused (logged: %q)", who, log.all())
	}
}

// staleLeaseTTL is the LeaseTTL of a machine that goes stale: it renews
// every second, and its own deadline is far enough from each renewal that
// a renewal refused after a takeover is what stops it.
const staleLeaseTTL = 3 * time.Second

// TestAStaleHolderWakesAfterATakeover is F5 from the stale side: machine
// a's lease lapsed and b took the operation over; then a renews (F5.3),
// records an outcome (F5.2) and releases (F5.4). Each is refused, and none
// touches b's row: owner, lease, fence and the pending state stay b's;
// b then records its outcome.
func TestAStaleHolderWakesAfterATakeover(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	aLog := &logMessages{}
	a := openJournal(t, behind(t, dsn, 1), pgjournal.Options{Owner: "a", LeaseTTL: staleLeaseTTL, Logger: slog.New(aLog)})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: time.Hour}) // no renewal during the test
	ctx := context.Background()

	ca := claimWithin(t, a, "charge")
	defer ca.Release()
	op := journal.Operation{ID: "charge", Key: "a-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}
	cb := claimWithin(t, b, "charge")
	defer cb.Release()
	if got, _ := cb.Operation(); got.Key != "a-key" {
		t.Fatalf("b took over key %q, want a-key", got.Key)
	}
	bs := readLease(t, dsn, "charge")
	if bs.owner == nil || *bs.owner != "b" || bs.fence != 2 || bs.state != 1 {
		t.Fatalf("after the takeover: %s; want b's lease at fence 2, pending", bs)
	}

	waitTakenOver(t, "a", ca, aLog)
	wantLease(t, dsn, "charge", "a's renewal", bs)

	late := op
	late.State, late.Status, late.Body = journal.StateRejected, 500, []byte("a's late answer")
	if err := ca.Complete(ctx, late); !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("a's Complete after the takeover: %v, want ErrClaimLost", err)
	}
	wantLease(t, dsn, "charge", "a's Complete", bs)

	ca.Release()
	wantLease(t, dsn, "charge", "a's Release", bs)
	if err := ca.Complete(ctx, late); !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("a's Complete after its Release: %v, want ErrClaimLost", err)
	}

	done := op
	done.State, done.Status, done.Body = journal.StateDone, 201, []byte("b's answer")
	if err := cb.Complete(ctx, done); err != nil {
		t.Fatalf("b's Complete after a woke: %v", err)
	}
	if got := readLease(t, dsn, "charge"); got.owner != nil || got.until != nil || got.fence != 2 ||
		got.state != int16(journal.StateDone) || got.status != 201 || got.body != "b's answer" {
		t.Fatalf("b's outcome recorded as %s; want done 201 with b's answer, no lease", got)
	}
}

// TestThreeMachinesTwoStaleHolders is F5 across two takeovers: a's lease
// lapses and b takes over, b's lapses and c takes over (each new holder's
// fence one more, F5.1). Then a and b wake: their renewals, their outcomes
// on the pending row and on the row c completed (F5.2, on both states),
// and their releases are refused, and c's lease and outcome stand.
func TestThreeMachinesTwoStaleHolders(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	aLog, bLog := &logMessages{}, &logMessages{}
	a := openJournal(t, behind(t, dsn, 2), pgjournal.Options{Owner: "a", LeaseTTL: staleLeaseTTL, Logger: slog.New(aLog)})
	b := openJournal(t, behind(t, dsn, 1), pgjournal.Options{Owner: "b", LeaseTTL: staleLeaseTTL, Logger: slog.New(bLog)})
	c := openJournal(t, dsn, pgjournal.Options{Owner: "c", LeaseTTL: time.Hour})
	ctx := context.Background()

	ca := claimWithin(t, a, "charge")
	defer ca.Release()
	op := journal.Operation{ID: "charge", Key: "a-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}
	cb := claimWithin(t, b, "charge")
	defer cb.Release()
	if r := readLease(t, dsn, "charge"); r.owner == nil || *r.owner != "b" || r.fence != 2 {
		t.Fatalf("after b's takeover: %s; want b's lease at fence 2", r)
	}
	cc := claimWithin(t, c, "charge")
	defer cc.Release()
	cs := readLease(t, dsn, "charge")
	if cs.owner == nil || *cs.owner != "c" || cs.fence != 3 || cs.state != 1 {
		t.Fatalf("after c's takeover: %s; want c's lease at fence 3, pending", cs)
	}
	if got, _ := cc.Operation(); got.Key != "a-key" {
		t.Fatalf("c took over key %q, want a-key", got.Key)
	}

	waitTakenOver(t, "a", ca, aLog)
	waitTakenOver(t, "b", cb, bLog)
	wantLease(t, dsn, "charge", "a's and b's renewals", cs)

	stale := func(who string, cl journal.Claim, body string) {
		t.Helper()
		late := op
		late.State, late.Status, late.Body = journal.StateRejected, 500, []byte(body)
		if err := cl.Complete(ctx, late); !errors.Is(err, journal.ErrClaimLost) {
			t.Fatalf("%s's Complete after the takeovers: %v, want ErrClaimLost", who, err)
		}
	}
	stale("a", ca, "a's late answer")
	stale("b", cb, "b's late answer")
	wantLease(t, dsn, "charge", "a's and b's Complete on the pending row", cs)
	ca.Release()
	wantLease(t, dsn, "charge", "a's Release", cs)

	done := op
	done.State, done.Status, done.Body = journal.StateDone, 201, []byte("c's answer")
	if err := cc.Complete(ctx, done); err != nil {
		t.Fatalf("c's Complete: %v", err)
	}
	cs = readLease(t, dsn, "charge")
	if cs.owner != nil || cs.until != nil || cs.fence != 3 || cs.state != int16(journal.StateDone) || cs.body != "c's answer" {
		t.Fatalf("c's outcome recorded as %s; want done with c's answer, no lease", cs)
	}
	stale("b", cb, "b's later answer")
	wantLease(t, dsn, "charge", "b's Complete on the completed row", cs)
	cb.Release()
	wantLease(t, dsn, "charge", "b's Release", cs)
}
