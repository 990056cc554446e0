package pgjournal_test

// F11 clause by clause, in one process: the liveness declared dead and
// not renewed, a slow journal kept alive, the upgrade from schema
// version 1, and what the liveness costs.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// Messages a journal logs when its liveness ends.
const (
	logLifeRefused = "pgjournal: this journal's liveness was declared over; its claims are lost"
	logLifeLapsed  = "pgjournal: this journal's liveness lapsed before it could be renewed; its claims are lost"
)

// TestALapsedLifeIsDeclaredDeadAndNotRenewed is F11.3 in the database:
// machine a's sessions read a clock an hour behind the database's, so its
// liveness has lapsed by b's clock while a renews it by its own; its
// leases are three hours long. b's claim of one of a's operations takes
// it at once, in one statement after the read, and declares a's life
// dead; a's next renewal is refused, and
// that refusal (not a's own deadline) loses a's other claim, which b then
// takes too; a's outcome on the first is refused and leaves b's row.
func TestALapsedLifeIsDeclaredDeadAndNotRenewed(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const w = 600 * time.Millisecond
	aLog := &logMessages{}
	a := openJournal(t, behind(t, dsn, 1), pgjournal.Options{Owner: "a", LeaseTTL: 3 * time.Hour, Liveness: w, Logger: slog.New(aLog)})
	tr := &tracer{}
	b := tracedJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: time.Hour}, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := func(id string) journal.Claim {
		t.Helper()
		c := claimWithin(t, a, id)
		if err := c.Begin(ctx, journal.Operation{ID: id, Key: "a-key-" + id, Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ax, ay := begin("x"), begin("y")
	defer ax.Release()
	defer ay.Release()

	tr.take()
	bx, err := b.TryClaim(ctx, "x")
	if err != nil {
		t.Fatalf("b's claim of x, whose holder's liveness lapsed by the database's clock: %v", err)
	}
	defer bx.Release()
	if sql := tr.takeOps(); len(sql) != 2 || !strings.Contains(sql[1], "UPDATE idem_lives SET dead = true") {
		t.Fatalf("b's claim of x sent %q; want the read, then the statement that declares a's life dead and takes the lease", sql)
	}
	if op, _ := bx.Operation(); op.Key != "a-key-x" {
		t.Fatalf("b took x under key %q, want a-key-x", op.Key)
	}
	if !lifeDead(t, dsn, "a") {
		t.Fatal("b's takeover did not declare a's liveness dead")
	}
	bs := readLease(t, dsn, "x")

	select {
	case <-ay.Lost():
	case <-time.After(20 * w / 3): // twenty renewals
		t.Fatal("a still holds y: its liveness was renewed after b declared it dead")
	}
	if !aLog.has(logLifeRefused) || aLog.has(logLifeLapsed) {
		t.Fatalf("a lost its claims without its renewal being refused (logged: %q)", aLog.all())
	}
	by, err := b.TryClaim(ctx, "y")
	if err != nil {
		t.Fatalf("b's claim of y after a's liveness was declared dead: %v", err)
	}
	by.Release()

	late := journal.Operation{ID: "x", Key: "a-key-x", Method: "POST", URL: "http://x/", State: journal.StateDone, Status: 201, Body: []byte("a's late answer")}
	if err := ax.Complete(ctx, late); !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("a's Complete of x after b took it: %v, want ErrClaimLost", err)
	}
	wantLease(t, dsn, "x", "a's Complete", bs)
}

// TestASlowButLiveJournalIsNotDeclaredDead is F11.5: a journal whose
// every statement takes a third of its liveness (a slow network to the
// database) stays alive: its liveness is renewed again and again, and all
// the while another machine's claim of its operation finds it held by it.
// The network slows once the first renewal is made: the renewals keep
// that connection, their statement prepared on it, so that each renewal
// is one round trip, a third of the liveness, and not a new connection's
// many (which a loaded machine's pool may or may not need). A renewal
// sent a third of the liveness after the last must answer within nine
// tenths of it from the last one's send: 0.23 of the liveness in hand,
// 0.7 s with a liveness of 3 s, for a loaded machine's own delays. The
// mutants that renew less often are late by a tenth of it.
func TestASlowButLiveJournalIsNotDeclaredDead(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	p, via := newProxy(t, dsn)
	const w = 3 * time.Second
	a := openJournal(t, via, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: w})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca := claimWithin(t, a, "charge")
	defer ca.Release()
	if err := ca.Begin(ctx, journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	aliveUntil := func() time.Time {
		t.Helper()
		var end time.Time
		if err := conn.QueryRow(ctx, `SELECT alive_until FROM idem_lives WHERE owner = 'a' AND NOT dead`).Scan(&end); err != nil {
			t.Fatalf("a's liveness row: %v", err)
		}
		return end
	}
	for started := aliveUntil(); !aliveUntil().After(started); {
		select {
		case <-ca.Lost():
			t.Fatal("a's claim was lost before its first renewal, the network not yet slow")
		case <-time.After(10 * time.Millisecond): // polls the database; the first renewal comes a third of the liveness after the claim
		}
	}
	p.Delay(w / 6) // each way: a statement takes a third of the liveness
	var ends []time.Time
	for len(ends) < 6 { // five renewals, each seen by the end it moved: over a liveness and a half
		end := aliveUntil()
		if len(ends) > 0 && !end.After(ends[len(ends)-1]) {
			select {
			case <-ca.Lost():
				t.Fatalf("a's claim was lost after %d renewals while a was slow but alive", len(ends)-1)
			case <-time.After(10 * time.Millisecond): // polls the database; the renewals come every third of the liveness
			}
			continue
		}
		ends = append(ends, end)
		var held *journal.HeldError
		if _, err := b.TryClaim(ctx, "charge"); !errors.As(err, &held) || held.Holder != "a" {
			t.Fatalf("b's claim while a is slow but alive (renewal %d): %v, want a *HeldError naming a", len(ends), err)
		}
	}
	select {
	case <-ca.Lost():
		t.Fatal("a's claim was lost while its liveness was renewed")
	default:
	}
	if st := a.Stats(); st.Lives != 1 {
		t.Fatalf("a started %d lives, want 1: its liveness never lapsed", st.Lives)
	}
}

// schemaV1 is the journal's tables at schema version 1, before
// liveness.
const schemaV1 = `CREATE TABLE idem_schema (
		singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
		version   integer NOT NULL
	);
	INSERT INTO idem_schema (version) VALUES (1);
	CREATE TABLE idem_operations (
		namespace    text     NOT NULL,
		op_id        text     NOT NULL,
		op_key       text     NOT NULL,
		fingerprint  bytea    NOT NULL,
		method       text     NOT NULL DEFAULT '',
		url          text     NOT NULL DEFAULT '',
		created_ns   bigint   NOT NULL DEFAULT 0,
		state        smallint NOT NULL,
		completed_ns bigint   NOT NULL DEFAULT 0,
		status       integer  NOT NULL DEFAULT 0,
		flags        smallint NOT NULL DEFAULT 0,
		header       bytea,
		body         bytea,
		lease_owner  text,
		lease_until  timestamptz,
		fence        bigint   NOT NULL DEFAULT 0,
		PRIMARY KEY (namespace, op_id)
	);
	CREATE INDEX idem_operations_by_state ON idem_operations (namespace, state, created_ns)`

// v1Takeover is the statement with which a journal of schema version 1
// takes a lease: it names no liveness.
const v1Takeover = `UPDATE idem_operations SET lease_owner = 'v1', lease_until = clock_timestamp() + interval '1 hour',
	fence = fence + 1 WHERE namespace = 'default' AND op_id = $1`

// TestAVersion1DatabaseIsUpgraded is F11.7: Open upgrades a database of
// schema version 1 in place, its rows kept, and a lease that a journal
// of the previous release holds, or takes after this release's, is judged
// by its own end alone, during a rolling upgrade as before it: another
// machine's claim finds it held, even when the lease it took over was
// taken under a liveness that has ended.
func TestAVersion1DatabaseIsUpgraded(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	exec(t, dsn, schemaV1)
	exec(t, dsn, `INSERT INTO idem_operations (namespace, op_id, op_key, fingerprint, state, lease_owner, lease_until, fence)
		VALUES ('default', 'old', 'old-key', decode(repeat('00', 32), 'hex'), 1, 'v1', clock_timestamp() + interval '1 hour', 1)`)
	ctx := context.Background()
	n := openJournal(t, dsn, pgjournal.Options{Owner: "n"})
	var v int
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&v); err != nil || v != pgjournal.SchemaVersion {
		t.Fatalf("schema version %d (%v) after Open, want %d", v, err, pgjournal.SchemaVersion)
	}
	var held *journal.HeldError
	if _, err := n.TryClaim(ctx, "old"); !errors.As(err, &held) || held.Holder != "v1" {
		t.Fatalf("a claim of an operation a version 1 journal holds: %v, want a *HeldError naming v1", err)
	}
	if op, ok, err := n.Lookup(ctx, "old"); err != nil || !ok || op.Key != "old-key" || op.State != journal.StatePending {
		t.Fatalf("the version 1 row after the upgrade: %+v %v %v; want it pending under old-key", op, ok, err)
	}

	c := claimWithin(t, n, "new")
	if err := c.Begin(ctx, journal.Operation{ID: "new", Key: "new-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	n.Close() // its liveness ends: the lease is free
	c.Release()
	exec(t, dsn, v1Takeover, "new")
	m := openJournal(t, dsn, pgjournal.Options{Owner: "m"})
	if _, err := m.TryClaim(ctx, "new"); !errors.As(err, &held) || held.Holder != "v1" {
		t.Fatalf("a claim of a lease a version 1 journal took over from an ended liveness: %v, want a *HeldError naming v1", err)
	}
}

// envLiveness, set to a duration, is the Options.Liveness that
// TestTheLivenessCostsAStatementPerJournal measures: DefaultLiveness for
// the figures in BENCHMARKS.md.
const envLiveness = "IDEM_LIVENESS"

// TestTheLivenessCostsAStatementPerJournal is F11.6: the liveness costs
// one statement per third of Options.Liveness per journal, whatever the
// number of operations and callers: at 64 callers running operations and
// idle alike, the journal sends one statement to start its liveness and
// at most one renewal per third of the liveness, and the start-to-start
// spacing of the renewals is that third. It logs the figures.
func TestTheLivenessCostsAStatementPerJournal(t *testing.T) {
	w := 2 * time.Second
	if s := os.Getenv(envLiveness); s != "" {
		var err error
		if w, err = time.ParseDuration(s); err != nil {
			t.Fatalf("%s=%q: %v", envLiveness, s, err)
		}
	}
	dsn := pgtest.NewDatabase(t)
	tr := &tracer{}
	j := tracedJournal(t, dsn, pgjournal.Options{Liveness: w}, tr)
	srv := newServer(t)
	srv.hold = func(*http.Request) int { time.Sleep(20 * time.Millisecond); return 0 } // an API's latency
	c := client(t, j)
	const callers = 64
	each := 20 * max(int(w/(600*time.Millisecond)), 1) // a dozen renewals' time, or more
	start := time.Now()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for k := range each {
				resp, err := c.Do(fmt.Sprintf("op-%d-%d", i, k), srv.post(t, context.Background()))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	busy := time.Since(start)
	starts, renewals, others := countLiveness(tr.take())
	if starts != 1 || renewals > int(busy/(w/3))+1 {
		t.Fatalf("%d operations at %d callers over %s: %d liveness starts, %d renewals; want 1 start, at most %d renewals",
			callers*each, callers, busy, starts, renewals, int(busy/(w/3))+1)
	}
	t.Logf("liveness %s, %d callers: %d liveness statements in %s (%.2f/s) beside %d statements for %d operations (%.2f per operation)",
		w, callers, starts+renewals, busy.Round(time.Millisecond), float64(starts+renewals)/busy.Seconds(), others, callers*each,
		float64(others)/float64(callers*each))

	const idle = 4
	first := j.Stats().LivenessRenewals
	for j.Stats().LivenessRenewals == first {
		time.Sleep(time.Millisecond) // to the next renewal: the idle period starts with one
	}
	tr.take()
	idleStart := time.Now()
	for j.Stats().LivenessRenewals < first+1+idle {
		time.Sleep(time.Millisecond)
	}
	quiet := time.Since(idleStart)
	starts, renewals, others = countLiveness(tr.take())
	if starts != 0 || renewals < idle || renewals > idle+1 || others != 0 || quiet < (idle-1)*(w/3) {
		t.Fatalf("idle, %d renewals in %s: %d starts, %d renewals, %d other statements; want %d renewals a third of %s apart, nothing else",
			idle, quiet, starts, renewals, others, idle, w)
	}
	t.Logf("liveness %s, idle: %d renewals in %s (%.2f/s)", w, idle, quiet.Round(time.Millisecond), float64(idle)/quiet.Seconds())
}

// countLiveness counts, of the statements sql, the starts of a liveness,
// its renewals, and the others.
func countLiveness(sql []string) (starts, renewals, others int) {
	for _, s := range sql {
		switch {
		case strings.Contains(s, "INSERT INTO idem_lives"):
			starts++
		case strings.Contains(s, "UPDATE idem_lives SET alive_until"):
			renewals++
		default:
			others++
		}
	}
	return starts, renewals, others
}

// TestALeaseTakenAsTheLivenessEndsIsLost is F11.3 on the way: a claim
// whose statement is on its way while the journal's liveness lapses (by
// the journal's own clock: the database stopped answering its renewals)
// takes the lease under a liveness that is over, and is lost as soon as
// its statement returns, so that nothing is sent under it.
func TestALeaseTakenAsTheLivenessEndsIsLost(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	p, via := newProxy(t, dsn)
	log := &logMessages{}
	tr := &tracer{}
	var once sync.Once
	tr.before = func(sql string) {
		if !strings.Contains(sql, "INSERT INTO idem_operations") {
			return
		}
		once.Do(func() {
			p.Freeze(true) // the renewals go unanswered until the liveness lapses
			for deadline := time.Now().Add(time.Minute); !log.has(logLifeLapsed); {
				if time.Now().After(deadline) {
					t.Error("the liveness did not lapse within a minute of its renewals going unanswered")
					break
				}
				time.Sleep(time.Millisecond)
			}
			p.Freeze(false)
		})
	}
	j := tracedJournal(t, via, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: 300 * time.Millisecond, Logger: slog.New(log)}, tr)
	ctx := context.Background()
	c, err := j.ClaimBegin(ctx, journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatalf("ClaimBegin as the liveness lapsed: %v", err)
	}
	defer c.Release()
	select {
	case <-c.Lost():
	default:
		t.Fatal("a lease taken under a liveness that ended on the way is not lost")
	}
	if !log.has("pgjournal: a lease taken as this journal's liveness ended is lost") {
		t.Fatalf("logged %q, want the lease lost as it was taken", log.all())
	}
}

// TestALapsedLifeIsNotRenewed is F11's "a renewal moves only a life
// neither dead nor lapsed": a's liveness lapses by the database's clock
// (its end set a second behind it, as a pause past Liveness leaves it)
// before any claim declared it dead. Its next renewal is refused and loses
// its claim, the life stays over in the database (a life that ended never
// comes back), and a's next claim, after a Liveness idle, starts another,
// renewed as the first was.
func TestALapsedLifeIsNotRenewed(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const w = 600 * time.Millisecond
	aLog := &logMessages{}
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: w, Logger: slog.New(aLog)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := claimWithin(t, a, "x")
	if err := c.Begin(ctx, journal.Operation{ID: "x", Key: "a-key-x", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, `UPDATE idem_lives SET alive_until = clock_timestamp() - interval '1 second' WHERE owner = 'a'`)
	select {
	case <-c.Lost():
	case <-time.After(20 * w / 3): // twenty renewals
		t.Fatal("a still holds x: its liveness, lapsed by the database's clock, was renewed")
	}
	c.Release()
	if !aLog.has(logLifeRefused) {
		t.Errorf("a lost x without its renewal being refused (logged: %q)", aLog.all())
	}
	if n := livesAliveNow(t, dsn, "a"); n != 0 {
		t.Fatalf("%d of a's lives are alive by the database's clock after its liveness lapsed; want 0", n)
	}
	// a stays idle for a Liveness with its life ended, its heartbeat
	// ticking over it, before its next claim starts another.
	time.Sleep(w)
	again := claimWithin(t, a, "x")
	defer again.Release()
	if got := a.Stats().Lives; got != 2 {
		t.Fatalf("a's claim after its liveness ended: %d lives started, want 2", got)
	}
	if n := livesAliveNow(t, dsn, "a"); n != 1 {
		t.Fatalf("%d of a's lives alive after its next claim, want 1 (the new one)", n)
	}
	// The new life is renewed as the first was, and its claim kept past
	// several Liveness.
	renewed := a.Stats().LivenessRenewals
	for deadline := time.Now().Add(20 * w); a.Stats().LivenessRenewals < renewed+3; time.Sleep(w / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals of a's next life in twenty Liveness; want 3", a.Stats().LivenessRenewals-renewed)
		}
	}
	select {
	case <-again.Lost():
		t.Fatal("a lost the claim of its next life, though that life was renewed")
	default:
	}
}

// livesAliveNow counts owner's lives alive by the database's clock.
func livesAliveNow(t *testing.T, dsn, owner string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idem_lives WHERE owner = $1 AND NOT dead AND alive_until > clock_timestamp()`,
		owner).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAPoolOfOneConnectionIsSharedWithTheRenewals is F11's "on a
// connection of the pool it keeps to itself (unless the pool has only
// one)": a journal whose DSN says pool_max_conns=1 goes on recording
// intents and outcomes once its liveness has been renewed, each within
// Options.Timeout; the renewals give the one connection back.
func TestAPoolOfOneConnectionIsSharedWithTheRenewals(t *testing.T) {
	u, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	const w = 300 * time.Millisecond
	j := openJournal(t, u.String(), pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: w, Timeout: 3 * time.Second})
	ctx := context.Background()
	begin := func(id string) journal.Claim {
		t.Helper()
		c, err := j.ClaimBegin(ctx, journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err != nil {
			t.Fatalf("ClaimBegin of %s: %v", id, err)
		}
		return c
	}
	first := begin("first")
	for deadline := time.Now().Add(20 * w); j.Stats().LivenessRenewals < 2; time.Sleep(w / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals of the liveness in twenty Liveness; want 2", j.Stats().LivenessRenewals)
		}
	}
	done := func(c journal.Claim, id string) {
		t.Helper()
		err := c.Complete(ctx, journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "http://x/", State: journal.StateDone, Status: 201})
		if err != nil {
			t.Fatalf("Complete of %s after the liveness was renewed: %v", id, err)
		}
		c.Release()
	}
	done(first, "first")
	done(begin("second"), "second")
}

// TestARenewalWhoseConnectionBrokeIsTriedAgainOnAnother is F11's "a
// renewal that fails is tried again sooner" and "a connection that failed
// is given back, and another taken": every connection of a's pool is
// terminated by the database (a failover, an idle timeout in between);
// the renewal on the one it kept fails, the next takes another, in time,
// and a's claim is never lost.
func TestARenewalWhoseConnectionBrokeIsTriedAgainOnAnother(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const w = 900 * time.Millisecond
	aLog := &logMessages{}
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: w, Logger: slog.New(aLog)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := claimWithin(t, a, "x")
	defer c.Release()
	if err := c.Begin(ctx, journal.Operation{ID: "x", Key: "a-key-x", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	waitRenewals := func(n uint64) {
		t.Helper()
		from := a.Stats().LivenessRenewals
		for deadline := time.Now().Add(20 * w); a.Stats().LivenessRenewals < from+n; time.Sleep(w / 20) {
			if time.Now().After(deadline) {
				t.Fatalf("%d renewals in twenty Liveness, want %d", a.Stats().LivenessRenewals-from, n)
			}
		}
	}
	waitRenewals(1) // the renewals now keep a connection
	exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	waitRenewals(3)
	select {
	case <-c.Lost():
		t.Fatalf("a lost its claim when its renewal's connection broke (logged: %q)", aLog.all())
	default:
	}
	if aLog.has(logLifeLapsed) || aLog.has(logLifeRefused) {
		t.Fatalf("a's liveness ended when its renewal's connection broke (logged: %q)", aLog.all())
	}
}
