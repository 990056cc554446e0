package pgjournal_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/journaltest"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg)) // a process of life_test.go's, not the tests
	}
	goleak.VerifyTestMain(withPostgres{m})
}

var quiet = slog.New(slog.DiscardHandler)

// openJournal opens the journal in dsn's database, closed when t ends.
func openJournal(t testing.TB, dsn string, o pgjournal.Options) *pgjournal.Journal {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	j, err := pgjournal.Open(context.Background(), dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// exec runs sql on dsn's database.
func exec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestConforms runs the journal conformance suite against the PostgreSQL
// journal: each case in a namespace of its own, reopened as another
// process (another pool, another owner) would open it.
func TestConforms(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	var n atomic.Int64
	journaltest.Run(t, func(t *testing.T) journaltest.Backend {
		o := pgjournal.Options{Namespace: fmt.Sprint("conformance-", n.Add(1))}
		j := openJournal(t, dsn, o)
		return journaltest.Backend{Journal: j, Reopen: func(t *testing.T) journal.Journal {
			j.Close()
			return openJournal(t, dsn, o)
		}}
	})
}

// server counts the requests of each key and answers 201, or what hold
// says for a request.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]int
	hold func(r *http.Request) int // the status to answer, 0 for 201
}

func newServer(t *testing.T) *server {
	s := &server{keys: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.keys[r.Header.Get("Idempotency-Key")]++
		hold := s.hold
		s.mu.Unlock()
		status := http.StatusCreated
		if hold != nil {
			if st := hold(r); st != 0 {
				status = st
			}
		}
		w.WriteHeader(status)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(s.Close)
	return s
}

// requests returns the number of requests, and the keys they carried.
func (s *server) requests() (n int, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.keys {
		n += c
		keys = append(keys, k)
	}
	return n, keys
}

func (s *server) post(t testing.TB, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/charges", strings.NewReader(`{"amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// client returns a Client of j that tries once per Do.
func client(t testing.TB, j journal.Journal) *idem.Client {
	t.Helper()
	c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIntentIsCommittedBeforeTheFirstByte is F1.1 and F1.2: when the server
// gets the first attempt, another machine already reads the operation as
// pending under the key the attempt carries; and an intent whose commit
// fails sends nothing.
func TestIntentIsCommittedBeforeTheFirstByte(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{})
	other := openJournal(t, dsn, pgjournal.Options{})
	srv := newServer(t)
	var seen atomic.Value
	srv.hold = func(r *http.Request) int {
		op, ok, err := other.Lookup(r.Context(), "charge-1")
		seen.Store(fmt.Sprintf("%v %v %v %v", ok, op.State, op.Key == r.Header.Get("Idempotency-Key"), err))
		return 0
	}
	resp, err := client(t, a).Do("charge-1", srv.post(t, context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := seen.Load(); got != "true pending true <nil>" {
		t.Fatalf("at the first byte, another machine read (found, state, same key, err) = %v; want true pending true <nil>", got)
	}

	// A commit that fails: the database refuses this one intent.
	exec(t, dsn, `CREATE FUNCTION refuse_intent() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'refused'; END $$`)
	exec(t, dsn, `CREATE TRIGGER refuse_intent BEFORE INSERT OR UPDATE ON idem_operations
		FOR EACH ROW WHEN (NEW.op_id = 'charge-2' AND NEW.state = 1) EXECUTE FUNCTION refuse_intent()`)
	before, _ := srv.requests()
	_, err = client(t, a).Do("charge-2", srv.post(t, context.Background()))
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Do with a failed intent commit: %v, want the database's refusal", err)
	}
	if after, _ := srv.requests(); after != before {
		t.Fatalf("%d requests sent for an intent that was not committed", after-before)
	}
	if _, ok, _ := other.Lookup(context.Background(), "charge-2"); ok {
		t.Fatal("an intent whose commit failed is in the journal")
	}
}

// TestAnotherMachineResumesAndReplays is F2.1 to F2.3: an operation left
// pending by one machine is resumed by another under the same key; once
// done, a third machine answers it from the journal with no request;
// another namespace is another journal.
func TestAnotherMachineResumesAndReplays(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	srv := newServer(t)
	var fail atomic.Bool
	fail.Store(true)
	srv.hold = func(*http.Request) int {
		if fail.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	a, b, c := openJournal(t, dsn, pgjournal.Options{}), openJournal(t, dsn, pgjournal.Options{}), openJournal(t, dsn, pgjournal.Options{})
	_, err := client(t, a).Do("charge", srv.post(t, context.Background()))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown {
		t.Fatalf("first machine: %v, want an unknown outcome", err)
	}
	fail.Store(false)
	resp, err := client(t, b).Do("charge", srv.post(t, context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	n, keys := srv.requests()
	if n != 2 || len(keys) != 1 || keys[0] != oe.Key {
		t.Fatalf("%d requests under keys %q; want 2 under the first machine's key %q", n, keys, oe.Key)
	}
	resp, err = client(t, c).Do("charge", srv.post(t, context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m, _ := srv.requests(); m != 2 || !idem.Recorded(resp) || resp.StatusCode != http.StatusCreated || string(body) != `{"ok":true}` {
		t.Fatalf("third machine: %d requests, recorded %v, %d %q; want 2, true, 201 and the recorded body", m, idem.Recorded(resp), resp.StatusCode, body)
	}
	other := openJournal(t, dsn, pgjournal.Options{Namespace: "elsewhere"})
	if _, ok, err := other.Lookup(context.Background(), "charge"); ok || err != nil {
		t.Fatalf("another namespace finds the operation (%v, %v)", ok, err)
	}
}

// TestOneSenderAtATime is F3.1 and F3.2: while one machine's attempt of an
// operation is in flight, another machine's Do of it waits; if its context
// ends first it gets a *HeldError naming the holder, and otherwise it
// answers from the outcome the holder recorded, with nothing sent.
func TestOneSenderAtATime(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	srv := newServer(t)
	inside, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's Close, which waits for the held handler
	var first sync.Once
	srv.hold = func(*http.Request) int {
		sent := false
		first.Do(func() { sent = true; close(inside) })
		if !sent {
			return http.StatusTeapot // a second sender: the test fails below, without hanging
		}
		<-release
		return 0
	}
	a := openJournal(t, dsn, pgjournal.Options{Owner: "machine-a"})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "machine-b"})
	firstDo := make(chan error, 1)
	go func() {
		resp, err := client(t, a).Do("charge", srv.post(t, context.Background()))
		if err == nil {
			resp.Body.Close()
		}
		firstDo <- err
	}()
	<-inside
	// The deadline must end while b waits on a's lease, not inside b's
	// claim statements (an insert that loses, then a read): a's lease is
	// held until release, so a deadline well past a loaded database's
	// round trips ends in the wait, and only makes the test that long.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := client(t, b).Do("charge", srv.post(t, ctx))
	var held *journal.HeldError
	if !errors.As(err, &held) || !errors.Is(err, journal.ErrClaimed) || !errors.Is(err, context.DeadlineExceeded) ||
		held.Holder != "machine-a" || !held.Until.After(b.Now()) {
		t.Fatalf("second machine's Do while the first sends: %v; want a *HeldError naming machine-a with a lease in the future", err)
	}
	second := make(chan error, 1)
	go func() {
		resp, err := client(t, b).Do("charge", srv.post(t, context.Background()))
		if err == nil {
			if !idem.Recorded(resp) {
				err = errors.New("the waiting Do did not answer from the journal")
			}
			resp.Body.Close()
		}
		second <- err
	}()
	free()
	if err := <-firstDo; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.requests(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// heldElsewhere has machine a begin operation "op" and hold its lease
// until the test ends, and returns machine b's journal on the same
// database, its statements traced.
func heldElsewhere(t *testing.T) (*pgjournal.Journal, *tracer) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	held, err := a.ClaimBegin(context.Background(), journal.Operation{ID: "op", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(held.Release)
	tr := &tracer{}
	return tracedJournal(t, dsn, pgjournal.Options{Owner: "b"}, tr), tr
}

// pendingElsewhere has machine a begin operation "op" and give its lease
// back (the operation pending, its lease free), and returns a's journal
// and machine b's on the same database, its statements traced.
func pendingElsewhere(t *testing.T) (a, b *pgjournal.Journal, tr *tracer) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	a = openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	first, err := a.ClaimBegin(context.Background(), journal.Operation{ID: "op", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	first.Release()
	tr = &tracer{}
	return a, tracedJournal(t, dsn, pgjournal.Options{Owner: "b"}, tr), tr
}

// F3.2 at its edge: a wait whose context ends while the claim reads the
// row again, not while it sleeps, is still the *HeldError naming the
// holder and the lease's end.
func TestAWaitEndingInAStatementNamesTheHolder(t *testing.T) {
	b, tr := heldElsewhere(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reads atomic.Int32
	tr.mu.Lock()
	tr.before = func(sql string) {
		if sql == pgjournal.ReadSQL && reads.Add(1) == 2 {
			cancel() // the second look, after a first that found a's lease
		}
	}
	tr.mu.Unlock()
	_, err := b.Claim(ctx, "op")
	var he *journal.HeldError
	if !errors.As(err, &he) || he.ID != "op" || he.Holder != "a" || !he.Until.After(time.Now()) || !errors.Is(err, context.Canceled) || reads.Load() != 2 {
		t.Fatalf("Claim whose context ended in its second read (%d reads): %v; want a *HeldError naming a and its lease's end, and context.Canceled", reads.Load(), err)
	}
}

// TestAWaitingClaimLooksAgainLessAndLessOften is F3.6: a claim waiting on
// another machine's lease reads the row again after 10ms, then after
// twice its last wait, up to 250ms: a waiting fleet does not hammer the
// database.
func TestAWaitingClaimLooksAgainLessAndLessOften(t *testing.T) {
	b, tr := heldElsewhere(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const looks = 8
	var mu sync.Mutex
	var at []time.Time
	tr.mu.Lock()
	tr.before = func(sql string) {
		if sql != pgjournal.ReadSQL {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if at = append(at, time.Now()); len(at) == looks {
			cancel()
		}
	}
	tr.mu.Unlock()
	_, err := b.Claim(ctx, "op")
	if !errors.Is(err, journal.ErrClaimed) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim of a held operation whose context ended: %v; want journal.ErrClaimed and context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != looks {
		t.Fatalf("%d reads of the row; want %d", len(at), looks)
	}
	wait := 10 * time.Millisecond
	for i := 1; i < looks; i++ {
		if gap := at[i].Sub(at[i-1]); gap < wait {
			t.Errorf("read %d came %s after the one before; want at least %s", i+1, gap, wait)
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// TestALeaseTakenBetweenTheReadAndTheTakeIsWaitedFor is F3.7: when
// another machine takes the lease after a claim read the row free and
// before its own take, the take changes nothing, and the claim looks
// again and waits for the new holder, as for any held lease.
func TestALeaseTakenBetweenTheReadAndTheTakeIsWaitedFor(t *testing.T) {
	a, b, tr := pendingElsewhere(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reads, takes atomic.Int32
	var taken journal.Claim
	tr.mu.Lock()
	tr.before = func(sql string) {
		switch {
		case sql == pgjournal.LeaseSQL && takes.Add(1) == 1:
			var err error
			if taken, err = a.Claim(context.Background(), "op"); err != nil {
				t.Error(err)
			}
		case sql == pgjournal.ReadSQL && reads.Add(1) == 3:
			cancel() // b looked again, saw a's lease and waited once
		}
	}
	tr.mu.Unlock()
	_, err := b.Claim(ctx, "op")
	if taken != nil {
		defer taken.Release()
	}
	var he *journal.HeldError
	if !errors.As(err, &he) || he.Holder != "a" || !errors.Is(err, context.Canceled) || reads.Load() != 3 || takes.Load() != 1 {
		t.Fatalf("Claim whose take lost to a's (%d reads, %d takes): %v; want a *HeldError naming a, and context.Canceled", reads.Load(), takes.Load(), err)
	}
}

// TestAClaimBeginThatFindsTheRowForgottenInsertsAgain is F1.4: when
// ClaimBegin's insert finds another machine's row, and that row is
// forgotten before ClaimBegin reads it, ClaimBegin inserts its own intent
// again, and takes it: the operation is new.
func TestAClaimBeginThatFindsTheRowForgottenInsertsAgain(t *testing.T) {
	ctx := context.Background()
	a, b, tr := pendingElsewhere(t)
	var reads atomic.Int32
	tr.mu.Lock()
	tr.before = func(sql string) {
		if sql == pgjournal.ReadSQL && reads.Add(1) == 1 {
			if err := a.Forget(ctx, "op"); err != nil { // after b's insert lost to a's row
				t.Error(err)
			}
		}
	}
	tr.mu.Unlock()
	c, err := b.ClaimBegin(ctx, journal.Operation{ID: "op", Key: "key-b", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatalf("ClaimBegin of an operation forgotten after its insert lost (%d reads): %v; want the claim of a new operation", reads.Load(), err)
	}
	defer c.Release()
	stored, _, err := a.Lookup(ctx, "op")
	var he *journal.HeldError
	_, terr := a.TryClaim(ctx, "op")
	if op, ok := c.Operation(); !ok || op.Key != "key-b" || err != nil || stored.Key != "key-b" || !errors.As(terr, &he) || he.Holder != "b" || reads.Load() != 1 {
		t.Fatalf("ClaimBegin after the row was forgotten (%d reads): %+v %v, the row under %s (%v), a's TryClaim %v; want b's intent under key-b, leased by b", reads.Load(), op, ok, stored.Key, err, terr)
	}
}

// TestAnInsertThatFoundARowLeavesTheClockAsItWas is F4.5:
// a shared insert that returns no row (each of its intents found another
// machine's pending row) read no time from the database, and the
// journal's clock keeps the last time it read.
func TestAnInsertThatFoundARowLeavesTheClockAsItWas(t *testing.T) {
	ctx := context.Background()
	_, b, tr := pendingElsewhere(t)
	var between time.Time // b's clock after its insert lost, before it reads the row
	tr.mu.Lock()
	tr.before = func(sql string) {
		if sql == pgjournal.ReadSQL && between.IsZero() {
			between = b.Now()
		}
	}
	tr.mu.Unlock()
	c, err := b.ClaimBegin(ctx, journal.Operation{ID: "op", Key: "key-b", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if d := time.Since(between); d < -time.Minute || d > time.Minute {
		t.Fatalf("b's clock after an insert that found a's row read %s, %s from this machine's; want the database's time", between, d)
	}
}

// F3.2's other side: a wait whose context ends as it takes the lease its
// second read found free is that statement's context error, not the
// holder it saw first, who is gone.
func TestAWaitEndingAsItTakesTheLeaseNamesNoHolder(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	held, err := a.ClaimBegin(context.Background(), journal.Operation{ID: "op", Key: "key-a", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{}
	b := tracedJournal(t, dsn, pgjournal.Options{Owner: "b"}, tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reads, takes atomic.Int32
	tr.mu.Lock()
	tr.before = func(sql string) {
		switch {
		case sql == pgjournal.ReadSQL && reads.Add(1) == 2:
			held.Release() // a gives the lease back before b looks again
		case sql == pgjournal.LeaseSQL && takes.Add(1) == 1:
			cancel()
		}
	}
	tr.mu.Unlock()
	_, err = b.Claim(ctx, "op")
	var he *journal.HeldError
	if errors.As(err, &he) || !errors.Is(err, context.Canceled) || reads.Load() != 2 || takes.Load() != 1 {
		t.Fatalf("Claim whose context ended as it took the lease (%d reads, %d takes): %v; want context.Canceled and no *HeldError", reads.Load(), takes.Load(), err)
	}
}

// TestADeadHoldersLeaseLapses is F3.4: a machine that dies with the lease
// held (its connections gone, nothing released, its liveness longer than
// the lease) holds up the operation for LeaseTTL, after which another
// machine resumes it under the same key.
func TestADeadHoldersLeaseLapses(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const lease = 500 * time.Millisecond
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dead, err := pgjournal.New(context.Background(), pool, pgjournal.Options{LeaseTTL: lease, Liveness: time.Hour, Owner: "dead", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c, err := dead.Claim(context.Background(), "charge")
	if err != nil {
		t.Fatal(err)
	}
	op := journal.Operation{ID: "charge", Key: "the-first-key", Method: "POST", URL: "http://x/charges", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	diedAt := time.Now()
	pool.Close()
	dead.Close() // the process dies: no renewal, no release, no end of its liveness reaches the database
	defer c.Release()

	next := openJournal(t, dsn, pgjournal.Options{LeaseTTL: lease})
	c2, err := next.Claim(context.Background(), "charge")
	took := time.Since(diedAt)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Release()
	got, ok := c2.Operation()
	if !ok || got.Key != "the-first-key" || got.State != journal.StatePending {
		t.Fatalf("after the lapse the next machine finds %+v (%v); want the pending operation under the-first-key", got, ok)
	}
	if took < lease/2 || took > lease+2*time.Second {
		t.Fatalf("takeover after %s, want about the lease (%s)", took, lease)
	}
	t.Logf("lease takeover after %s (LeaseTTL %s)", took, lease)
}

// TestExpiryByTheDatabasesClock is F4.1 to F4.3: a database whose clock
// runs two hours ahead of this machine's (a shadowing clock_timestamp)
// makes a key minted by this machine's clock an hour ago expired, for the
// listings and for Do.
func TestExpiryByTheDatabasesClock(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	exec(t, dsn, `CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql
		AS $$ SELECT pg_catalog.clock_timestamp() + interval '2 hours' $$`)
	skewed := dsn + "&options=-c%20search_path%3Dpublic,pg_catalog"
	if !strings.Contains(dsn, "?") {
		skewed = dsn + "?options=-c%20search_path%3Dpublic,pg_catalog"
	}
	j := openJournal(t, skewed, pgjournal.Options{})
	if ahead := time.Until(j.Now()); ahead < 2*time.Hour-time.Minute || ahead > 2*time.Hour+time.Minute {
		t.Fatalf("journal clock %s ahead of this machine's, want the database's 2h", ahead)
	}
	srv := newServer(t)
	srv.hold = func(*http.Request) int { return http.StatusServiceUnavailable }
	// No Config.Now: the journal's clock. Keys live 90m.
	c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 1, Logger: quiet, Dialect: idem.Dialect{Retention: 90 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("charge", srv.post(t, context.Background())); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do: %v, want an unknown outcome", err)
	}
	op, _, _ := j.Lookup(context.Background(), "charge")
	if d := time.Until(op.Created); d < 2*time.Hour-time.Minute {
		t.Fatalf("key minted at %s, %s from this machine's clock; want the database's, 2h ahead", op.Created, d)
	}
	// Say this machine's clock had minted it an hour ago: fresh by this
	// machine's clock (KeyTTL 90m), 3h old by the database's.
	exec(t, skewed, `UPDATE idem_operations SET created_ns = $1`, time.Now().Add(-time.Hour).UnixNano())
	ops, err := j.List(context.Background(), journal.ListExpired)
	if err != nil || len(ops) != 1 {
		t.Fatalf("expired listing: %d operations (%v), want the one", len(ops), err)
	}
	if ops, _ := j.List(context.Background(), journal.ListPending); len(ops) != 0 {
		t.Fatalf("pending listing holds %d operations, want none", len(ops))
	}
	if _, err := c.Do("charge", srv.post(t, context.Background())); !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("Do of the operation: %v, want ErrKeyExpired", err)
	}
	if n, _ := srv.requests(); n != 1 {
		t.Fatalf("%d requests, want only the first", n)
	}
}

// TestALapsedHolderCannotOverwrite is F5.2 on a completed row: a machine
// whose lease lapsed and was taken over cannot record its outcome over the
// next holder's, and its Begin is refused too.
func TestALapsedHolderCannotOverwrite(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: 3 * time.Second})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ca, err := a.Claim(context.Background(), "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Release()
	op := journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	// a stalls past its lease (a long GC pause, a frozen VM): the lease
	// lapses and b takes the operation over.
	exec(t, dsn, `UPDATE idem_operations SET lease_until = clock_timestamp() - interval '1 second'`)
	cb, err := b.Claim(context.Background(), "charge")
	if err != nil {
		t.Fatal(err)
	}
	done := op
	done.State, done.Status, done.Body = journal.StateDone, 201, []byte("b's answer")
	if err := cb.Complete(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	cb.Release()
	late := op
	late.State, late.Status, late.Body = journal.StateRejected, 500, []byte("a's late answer")
	if err := ca.Complete(context.Background(), late); !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("the lapsed holder's Complete: %v, want ErrClaimLost", err)
	}
	got, _, _ := b.Lookup(context.Background(), "charge")
	if got.State != journal.StateDone || got.Status != 201 || string(got.Body) != "b's answer" {
		t.Fatalf("recorded %s %d %q, want b's done 201", got.State, got.Status, got.Body)
	}
	if err := ca.Begin(context.Background(), op); !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("the lapsed holder's Begin: %v, want ErrOperationExists", err)
	}
	select {
	case <-ca.Lost():
	case <-time.After(time.Minute):
		t.Fatal("the lapsed holder's claim is never reported lost")
	}
}

// TestALapsedHolderCannotCompleteTheOperationBegunAgain is F5.2 where the
// fence starts over: a holder's lease lapses, the pending operation is
// forgotten (idem settle --forget) and begun again under another key, so
// the new row has fence 1 as the old one had. The lapsed holder's outcome
// is refused with ErrClaimLost by the row's key, and the new operation is
// left pending under its own key.
func TestALapsedHolderCannotCompleteTheOperationBegunAgain(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ctx := context.Background()
	ca, err := a.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Release()
	op := journal.Operation{ID: "charge", Key: "k1", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, `UPDATE idem_operations SET lease_until = clock_timestamp() - interval '1 second'`)
	if err := b.Forget(ctx, "charge"); err != nil {
		t.Fatal(err)
	}
	cb, err := b.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	again := op
	again.Key = "k2"
	if err := cb.Begin(ctx, again); err != nil {
		t.Fatal(err)
	}
	if fence := readLease(t, dsn, "charge").fence; fence != 1 {
		t.Fatalf("the operation begun again has fence %d, want 1 as the forgotten one had", fence)
	}
	late := op
	late.State, late.Status, late.Body = journal.StateDone, 201, []byte("a's late answer")
	if err := ca.Complete(ctx, late); !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("the lapsed holder's Complete: %v, want ErrClaimLost", err)
	}
	cb.Release()
	got, ok, err := b.Lookup(ctx, "charge")
	if err != nil || !ok || got.State != journal.StatePending || got.Key != "k2" || got.Body != nil {
		t.Fatalf("journal holds %s under %q, body %q (%v, %v); want pending under k2", got.State, got.Key, got.Body, ok, err)
	}
}

// TestALostLeaseStopsTheAttempts is F3.5 from the sender's side: a Do whose
// lease is taken over while its attempt is in flight stops, ends unknown
// with ErrClaimLost, and records nothing.
func TestALostLeaseStopsTheAttempts(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	srv := newServer(t)
	inside := make(chan struct{})
	srv.hold = func(r *http.Request) int {
		close(inside)
		<-r.Context().Done() // the client gives the attempt up
		return 0
	}
	const lease = 300 * time.Millisecond
	a := openJournal(t, dsn, pgjournal.Options{LeaseTTL: lease})
	done := make(chan error, 1)
	go func() {
		_, err := client(t, a).Do("charge", srv.post(t, context.Background()))
		done <- err
	}()
	<-inside
	exec(t, dsn, `UPDATE idem_operations SET fence = fence + 1`) // another machine took it
	select {
	case err := <-done:
		var oe *idem.OutcomeError
		if !errors.Is(err, journal.ErrClaimLost) || !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown {
			t.Fatalf("Do whose lease was taken: %v, want an unknown outcome matching ErrClaimLost", err)
		}
	case <-time.After(10 * lease):
		t.Fatal("the attempt went on after the lease was taken over")
	}
	if got, _, _ := a.Lookup(context.Background(), "charge"); got.State != journal.StatePending {
		t.Fatalf("state %s, want pending", got.State)
	}
}

// TestDatabaseDownFailsBeforeSending is F6.1 and F6.3: with the database
// stopped, Do fails with journal.ErrUnavailable and sends nothing; once it
// is back, the same Client works.
func TestDatabaseDownFailsBeforeSending(t *testing.T) {
	pg := pgtest.Own(t)
	j := openJournal(t, pg.DSN(), pgjournal.Options{Timeout: 2 * time.Second})
	srv := newServer(t)
	c := client(t, j)
	ctx := context.Background()
	if err := pg.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.Do("charge", srv.post(t, ctx))
	if !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("Do with the database down: %v, want journal.ErrUnavailable", err)
	}
	if n, _ := srv.requests(); n != 0 {
		t.Fatalf("%d requests sent with the database down", n)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do("charge", srv.post(t, ctx))
	if err != nil {
		t.Fatalf("Do once the database is back: %v", err)
	}
	resp.Body.Close()
	if n, _ := srv.requests(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestMigrate: a second Migrate does nothing, concurrent ones agree, and a
// database from a newer idem is refused.
func TestMigrate(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	if err := openAtOnce(dsn, 4); err != nil {
		t.Fatalf("concurrent opens of a new database: %v", err)
	}
	j, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{NoMigrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("NoMigrate on a migrated database: %v", err)
	}
	j.Close()
	exec(t, dsn, `UPDATE idem_schema SET version = $1`, pgjournal.SchemaVersion+1)
	if _, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{Logger: quiet}); !errors.Is(err, pgjournal.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema: %v, want ErrSchemaTooNew", err)
	}
	fresh := pgtest.NewDatabase(t)
	if _, err := pgjournal.Open(context.Background(), fresh, pgjournal.Options{NoMigrate: true, Logger: quiet}); !errors.Is(err, pgjournal.ErrNotMigrated) {
		t.Fatalf("NoMigrate on a database without the journal's tables: %v, want ErrNotMigrated", err)
	}
	// A table of that name that is not the journal's is named as it is,
	// not taken for a database to migrate.
	exec(t, fresh, `CREATE TABLE idem_schema (release text)`)
	_, err = pgjournal.Open(context.Background(), fresh, pgjournal.Options{NoMigrate: true, Logger: quiet})
	if err == nil || errors.Is(err, pgjournal.ErrNotMigrated) || !strings.Contains(err.Error(), `column "version" does not exist`) {
		t.Fatalf("NoMigrate on another program's idem_schema: %v, want its error, not ErrNotMigrated", err)
	}
	// A migration that fails names the version it was taking the
	// database to: here a database at version 1 whose operations table
	// was dropped.
	broken := pgtest.NewDatabase(t)
	exec(t, broken, `CREATE TABLE idem_schema (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), version integer NOT NULL)`)
	exec(t, broken, `INSERT INTO idem_schema (version) VALUES (1)`)
	_, err = pgjournal.Open(context.Background(), broken, pgjournal.Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "to version 2: ") || !strings.Contains(err.Error(), `"idem_operations" does not exist`) {
		t.Fatalf("Open of a database whose migration to version 2 fails: %v, want the version and the reason", err)
	}
}

// TestEachBadOptionIsRefused: each field New checks is refused on its
// own with pgjournal.ErrInvalidOptions, before anything is sent, and each bound
// is taken at its edge.
func TestEachBadOptionIsRefused(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	for name, o := range map[string]pgjournal.Options{
		"negative LeaseTTL":           {LeaseTTL: -time.Nanosecond},
		"negative Timeout":            {Timeout: -time.Nanosecond},
		"negative Liveness":           {Liveness: -time.Nanosecond},
		"LeaseTTL too short to renew": {LeaseTTL: 30*time.Millisecond - 1},
		"Liveness too short to renew": {Liveness: 30*time.Millisecond - 1},
		"Namespace not text":          {Namespace: "a\x00b"},
		"Namespace starting with NUL": {Namespace: "\x00ns"},
		"Namespace too long":          {Namespace: strings.Repeat("n", pgjournal.MaxNamespaceLen+1)},
		"Owner not text":              {Owner: "\xff"},
	} {
		o.Logger = quiet
		if _, err := pgjournal.Open(ctx, dsn, o); !errors.Is(err, pgjournal.ErrInvalidOptions) {
			t.Errorf("%s: Open = %v; want pgjournal.ErrInvalidOptions", name, err)
		}
	}
	edge := pgjournal.Options{LeaseTTL: 30 * time.Millisecond, Liveness: 30 * time.Millisecond,
		Namespace: strings.Repeat("n", pgjournal.MaxNamespaceLen), Logger: quiet}
	j, err := pgjournal.Open(ctx, dsn, edge)
	if err != nil {
		t.Fatalf("Open with each option at its bound: %v", err)
	}
	j.Close()
	// The default Owner names this host, for an operator reading a lease.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if j = openJournal(t, dsn, pgjournal.Options{}); !strings.HasPrefix(j.Owner(), host+"/") {
		t.Fatalf("the default Owner is %q; want it to start with this host's name, %q", j.Owner(), host)
	}
}

// TestNamespacesListsEachNamespaceHoldingOperations: Namespaces names
// every namespace of the database that holds an operation, once, in
// byte order, and a closed Journal refuses with journal.ErrClosed.
func TestNamespacesListsEachNamespaceHoldingOperations(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	for i, ns := range []string{"b", "a", "b"} {
		j := openJournal(t, dsn, pgjournal.Options{Namespace: ns})
		c, err := j.ClaimBegin(ctx, journal.Operation{ID: fmt.Sprint("op-", i), Key: "key", KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	j := openJournal(t, dsn, pgjournal.Options{Namespace: "empty"})
	if names, err := j.Namespaces(ctx); err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("Namespaces = %q, %v; want [a b]", names, err)
	}
	j.Close()
	if names, err := j.Namespaces(ctx); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("Namespaces of a closed Journal = %q, %v; want journal.ErrClosed", names, err)
	}
}

// TestBadOptionsAndDSN: bad input is a clear error, and a DSN's password
// never appears in it.
func TestBadOptionsAndDSN(t *testing.T) {
	ctx := context.Background()
	if _, err := pgjournal.Open(ctx, "postgres://u:s3cret@[::1", pgjournal.Options{}); err == nil || strings.Contains(err.Error(), "s3cret") || errors.Unwrap(err) == nil {
		t.Fatalf("Open of a DSN that does not parse: %v; want an error without the password, wrapping the parser's reason", err)
	}
	dsn := pgtest.NewDatabase(t)
	if _, err := pgjournal.Open(ctx, dsn, pgjournal.Options{LeaseTTL: -time.Second}); !errors.Is(err, pgjournal.ErrInvalidOptions) {
		t.Fatalf("negative LeaseTTL: %v, want ErrInvalidConfig", err)
	}
	j := openJournal(t, dsn, pgjournal.Options{})
	j.Close()
	if _, err := j.Claim(ctx, "x"); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("Claim after Close: %v, want ErrClosed", err)
	}
}

// TestTheLoserOfARaceToBeginACompletedOperationTakesItsOutcome is F1.3
// when the winner completed the operation before the loser's Begin: the
// insert finds the completed row, and Begin returns ErrOperationExists
// with the winner's outcome in the claim, without waiting.
func TestTheLoserOfARaceToBeginACompletedOperationTakesItsOutcome(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ctx := context.Background()
	cb, err := b.Claim(ctx, "charge") // a new ID: no row, no lease
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Release()
	ca, err := a.ClaimBegin(ctx, journal.Operation{ID: "charge", Key: "a-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if err != nil {
		t.Fatal(err)
	}
	done, _ := ca.Operation()
	done.State, done.Status = journal.StateDone, 201
	if err := ca.Complete(ctx, done); err != nil {
		t.Fatal(err)
	}
	ca.Release()
	err = cb.Begin(ctx, journal.Operation{ID: "charge", Key: "b-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	if !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("Begin of an operation a began and completed since the claim: %v, want ErrOperationExists", err)
	}
	if got, ok := cb.Operation(); !ok || got.Key != "a-key" || got.State != journal.StateDone || got.Status != 201 {
		t.Fatalf("the loser's claim holds %+v (%v), want a's outcome under a-key", got, ok)
	}
	if err := cb.Complete(ctx, done); !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("Complete under the loser's claim: %v, want ErrOperationExists: the operation is completed", err)
	}
}

// TestTheLoserOfARaceToBeginTakesTheWinnersOperation: two machines claim a
// new ID at once (neither finds a row), one begins it; the other's Begin
// waits for the winner's lease, then returns ErrOperationExists with the
// winner's operation, never its own key (F1, F2).
func TestTheLoserOfARaceToBeginTakesTheWinnersOperation(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ctx := context.Background()
	cb, err := b.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Release()
	ca, err := a.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	won := journal.Operation{ID: "charge", Key: "a-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := ca.Begin(ctx, won); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	go func() {
		lost <- cb.Begin(ctx, journal.Operation{ID: "charge", Key: "b-key", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending})
	}()
	select {
	case err := <-lost:
		t.Fatalf("the loser's Begin returned (%v) while the winner held the lease", err)
	case <-time.After(100 * time.Millisecond):
	}
	done := won
	done.State, done.Status = journal.StateDone, 201
	if err := ca.Complete(ctx, done); err != nil {
		t.Fatal(err)
	}
	ca.Release()
	if err := <-lost; !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("the loser's Begin: %v, want ErrOperationExists", err)
	}
	got, ok := cb.Operation()
	if !ok || got.Key != "a-key" || got.State != journal.StateDone {
		t.Fatalf("the loser's claim holds %+v (%v), want the winner's done operation under a-key", got, ok)
	}
	if op, _, _ := b.Lookup(ctx, "charge"); op.Key != "a-key" {
		t.Fatalf("the journal holds key %q, want a-key", op.Key)
	}
}

// TestShedClosesOneIdleConnection: when the server refuses a connection
// as one too many, the journal's pool gives one idle connection back to
// the server (F9), keeps the others in the pool, idle, and never gives
// back its last.
func TestShedClosesOneIdleConnection(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Closed on success only: Close waits for connections a broken shed
	// left acquired, and the test would hang instead of failing.
	const n = 4
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}
	for want := int32(n - 1); want >= 1; want-- {
		pgjournal.Shed(pool)
		if st := pool.Stat(); st.TotalConns() != want || st.IdleConns() != want || st.AcquiredConns() != 0 {
			t.Fatalf("after a shed: %d connections, %d idle, %d acquired; want %d, all idle", st.TotalConns(), st.IdleConns(), st.AcquiredConns(), want)
		}
	}
	pgjournal.Shed(pool)
	if st := pool.Stat(); st.TotalConns() != 1 {
		t.Fatalf("a shed of the last connection left %d; want it kept", st.TotalConns())
	}
	pool.Close()
}
