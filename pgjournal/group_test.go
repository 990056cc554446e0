package pgjournal_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
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

// groups records the statements of a journal's group (pgjournal's
// GroupHooks): the IDs of each, sorted, and the IDs queued behind one in
// flight. A statement whose first ID is hold waits until release is
// closed, so that a test can queue rows behind it.
type groups struct {
	mu         sync.Mutex
	statements [][]string
	queued     []string
	senders    []string // the test function on whose stack each statement was sent, or ""

	hold     string
	leading  chan struct{} // closed when the held statement is about to be sent
	release  chan struct{}
	queuedCh chan string
}

func watchGroups(j *pgjournal.Journal, kind, hold string) *groups {
	g := &groups{hold: hold, leading: make(chan struct{}), release: make(chan struct{}), queuedCh: make(chan string, 100)}
	pgjournal.GroupHooks(j, kind, func(id string) {
		g.mu.Lock()
		g.queued = append(g.queued, id)
		g.mu.Unlock()
		g.queuedCh <- id
	}, func(ids []string) {
		ids = slices.Clone(ids)
		slices.Sort(ids)
		stack := make([]byte, 64<<10)
		stack = stack[:runtime.Stack(stack, false)]
		sender := ""
		if m := regexp.MustCompile(`pgjournal_test\.(Test\w+)\(`).FindSubmatch(stack); m != nil {
			sender = string(m[1])
		}
		g.mu.Lock()
		g.statements = append(g.statements, ids)
		g.senders = append(g.senders, sender)
		g.mu.Unlock()
		if slices.Contains(ids, g.hold) {
			close(g.leading)
			<-g.release
		}
	})
	return g
}

// waitQueued returns once n rows queued behind the held statement.
func (g *groups) waitQueued(n int) {
	for range n {
		<-g.queuedCh
	}
}

func (g *groups) seen() (statements [][]string, queued []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.statements), slices.Clone(g.queued)
}

// TestAFailedGroupCommitFailsItsGroupOnly is F10.3: a statement carrying
// the intents of three Do calls fails in the database (a trigger refuses
// one of its rows), so none of the three is journaled and none sends;
// the Do whose intent committed in the statement before, and one after,
// are unaffected.
func TestAFailedGroupCommitFailsItsGroupOnly(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{})
	g := watchGroups(j, "intent", "first")
	srv := newServer(t)
	exec(t, dsn, `CREATE FUNCTION refuse_intent() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'refused'; END $$`)
	exec(t, dsn, `CREATE TRIGGER refuse_intent BEFORE INSERT ON idem_operations
		FOR EACH ROW WHEN (NEW.op_id = 'poison') EXECUTE FUNCTION refuse_intent()`)
	c := client(t, j)
	do := func(id string) error {
		resp, err := c.Do(id, srv.post(t, context.Background()))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	first := make(chan error, 1)
	go func() { first <- do("first") }()
	<-g.leading // the first statement is in flight, carrying "first" alone
	group := []string{"b-1", "b-2", "poison"}
	errs := make(chan error, len(group))
	for _, id := range group {
		go func() { errs <- do(id) }()
	}
	g.waitQueued(len(group))
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("the Do of the statement before: %v", err)
	}
	for range group {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("a Do of the failed statement: %v, want the database's refusal", err)
		}
	}
	if err := do("after"); err != nil {
		t.Fatalf("the Do of the statement after: %v", err)
	}

	statements, _ := g.seen()
	want := [][]string{{"first"}, group, {"after"}}
	if !slices.EqualFunc(statements, want, slices.Equal) {
		t.Fatalf("statements %q, want %q", statements, want)
	}
	if n, _ := srv.requests(); n != 2 {
		t.Errorf("%d requests, want 2 (first and after; none of the failed statement's)", n)
	}
	for _, id := range group {
		if _, ok, err := j.Lookup(context.Background(), id); ok || err != nil {
			t.Errorf("Lookup(%s) of the failed statement = %v, %v; want no row", id, ok, err)
		}
	}
	for _, id := range []string{"first", "after"} {
		if op, ok, err := j.Lookup(context.Background(), id); !ok || err != nil || op.State != journal.StateDone {
			t.Errorf("Lookup(%s) = %v %v, %v; want it done", id, op.State, ok, err)
		}
	}
	if st := j.Stats(); st.Intents != 2 || st.IntentCommits != 2 {
		t.Errorf("stats %+v: want 2 intents in 2 commits (the failed statement counts neither)", st)
	}
}

// TestConcurrentBeginsShareACommit is F10.1: the Begins that arrive while
// an intent's statement is in flight ride the next statement together,
// one commit for all, each with its own lease; so do the outcomes.
func TestConcurrentBeginsShareACommit(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{Owner: "grouped"})
	g := watchGroups(j, "intent", "first")
	ctx := context.Background()
	begin := func(id string) (journal.Claim, error) {
		return j.ClaimBegin(ctx, journal.Operation{ID: id, Key: "key-" + id, KeyTTL: 24 * time.Hour, State: journal.StatePending})
	}
	first := make(chan error, 1)
	go func() {
		c, err := begin("first")
		if err == nil {
			c.Release()
		}
		first <- err
	}()
	<-g.leading
	const n = 20
	var ids []string
	claims := make(chan journal.Claim, n)
	for i := range n {
		id := fmt.Sprintf("op-%02d", i)
		ids = append(ids, id)
		go func() {
			c, err := begin(id)
			if err != nil {
				t.Error(err)
			}
			claims <- c
		}()
	}
	g.waitQueued(n)
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var held []journal.Claim
	for range n {
		if c := <-claims; c != nil {
			held = append(held, c)
		}
	}
	statements, _ := g.seen()
	if want := [][]string{{"first"}, ids}; !slices.EqualFunc(statements, want, slices.Equal) {
		t.Fatalf("statements %q, want %q", statements, want)
	}
	if st := j.Stats(); st.Intents != n+1 || st.IntentCommits != 2 {
		t.Errorf("stats %+v: want %d intents in 2 commits", st, n+1)
	}
	// Each row holds its own lease, fence 1.
	var leased int
	queryRow(t, dsn, `SELECT count(*) FROM idem_operations WHERE lease_owner = 'grouped' AND fence = 1 AND state = 1`, &leased)
	if leased != n {
		t.Errorf("%d rows leased by the journal with fence 1, want %d", leased, n)
	}
	for _, c := range held {
		op, _ := c.Operation()
		op.State, op.Status = journal.StateDone, 201
		if err := c.Complete(ctx, op); err != nil {
			t.Error(err)
		}
		c.Release()
	}
	if st := j.Stats(); st.Outcomes != n {
		t.Errorf("stats %+v: want %d outcomes", st, n)
	}
}

// TestALoneBeginIsNotDelayed is F10.2: a Begin that finds no statement in
// flight sends its own at once, alone, from the caller's own call (not
// from a timer's goroutine, or another's): no row queues, no other
// statement runs, and a Do of a new operation is one statement for its
// intent and one for its outcome.
func TestALoneBeginIsNotDelayed(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{})
	intents := watchGroups(j, "intent", "")
	outcomes := watchGroups(j, "outcome", "")
	srv := newServer(t)
	resp, err := client(t, j).Do("lone", srv.post(t, context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, g := range []*groups{intents, outcomes} {
		statements, queued := g.seen()
		if want := [][]string{{"lone"}}; !slices.EqualFunc(statements, want, slices.Equal) || len(queued) != 0 {
			t.Errorf("statements %q, queued %q: want the lone row's statement, sent by itself, nothing queued", statements, queued)
		}
		g.mu.Lock()
		senders := slices.Clone(g.senders)
		g.mu.Unlock()
		if !slices.Equal(senders, []string{"TestALoneBeginIsNotDelayed"}) {
			t.Errorf("statements sent from %q, want from the test's own call to Do", senders)
		}
	}
	if st := j.Stats(); st != (pgjournal.Stats{Intents: 1, IntentCommits: 1, Outcomes: 1, OutcomeCommits: 1, Lives: 1,
		LivenessRenewals: st.LivenessRenewals}) {
		t.Errorf("stats %+v: want one intent and one outcome, each its own commit, under one life", st)
	}
}

// TestAQueuedBeginWhoseContextEndsLeavesNoRow is F10.4: a Begin whose
// context ends while its row waits for the statement in flight leaves the
// queue: the next statement does not carry it, and the journal holds no
// row of it.
func TestAQueuedBeginWhoseContextEndsLeavesNoRow(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{})
	g := watchGroups(j, "intent", "first")
	begin := func(ctx context.Context, id string) error {
		c, err := j.ClaimBegin(ctx, journal.Operation{ID: id, Key: "key-" + id, KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err == nil {
			c.Release()
		}
		return err
	}
	first := make(chan error, 1)
	go func() { first <- begin(context.Background(), "first") }()
	<-g.leading
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- begin(ctx, "gone") }()
	g.waitQueued(1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Errorf("a queued Begin whose context ended: %v, want context.Canceled", err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The bound only keeps a broken queue (one that hands the lead to the
	// caller that left) from hanging the test.
	guard, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	if err := begin(guard, "next"); err != nil {
		t.Fatalf("a Begin after the one that left the queue: %v", err)
	}
	statements, _ := g.seen()
	if want := [][]string{{"first"}, {"next"}}; !slices.EqualFunc(statements, want, slices.Equal) {
		t.Fatalf("statements %q, want %q", statements, want)
	}
	if _, ok, err := j.Lookup(context.Background(), "gone"); ok || err != nil {
		t.Errorf("Lookup(gone) = %v, %v; want no row", ok, err)
	}
}

// TestACarriedBeginWhoseContextEndsGetsItsStatementsResult is F10.9: a
// Begin whose context ends once a statement carries its row (led by
// another caller) waits for that statement, and returns its result: the
// row is committed, and ClaimBegin's claim holds it.
func TestACarriedBeginWhoseContextEndsGetsItsStatementsResult(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	j := openJournal(t, dsn, pgjournal.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading, release := make(chan struct{}), make(chan struct{})
	queued := make(chan string, 3)
	pgjournal.GroupHooks(j, "intent", func(id string) { queued <- id }, func(ids []string) {
		switch {
		case slices.Contains(ids, "first"):
			close(leading)
			<-release
		case slices.Contains(ids, "carried"):
			cancel()
			// The carried caller sees its context end while the
			// statement is on its way; let it run that far.
			time.Sleep(50 * time.Millisecond)
		}
	})
	begin := func(ctx context.Context, id string) error {
		c, err := j.ClaimBegin(ctx, journal.Operation{ID: id, Key: "key-" + id, KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err == nil {
			c.Release()
		}
		return err
	}
	ended := make(chan error, 3)
	go func() { ended <- begin(context.Background(), "first") }()
	<-leading
	go func() { ended <- begin(context.Background(), "leader") }()
	<-queued // the next leader, queued first
	go func() { ended <- begin(ctx, "carried") }()
	<-queued
	close(release)
	for range 3 {
		if err := <-ended; err != nil {
			t.Errorf("a Begin: %v; want each committed", err)
		}
	}
	if op, ok, err := j.Lookup(context.Background(), "carried"); !ok || err != nil || op.Key != "key-carried" {
		t.Fatalf("Lookup(carried) = %+v, %v, %v; want its row, committed by the statement that carried it", op, ok, err)
	}
}

// queryRow scans the one row sql returns on dsn's database into dest.
func queryRow(t testing.TB, dsn, sql string, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestClaimBeginClaimsWhatTheJournalHolds is F10.5: ClaimBegin of an ID
// the journal holds inserts nothing and claims the row as Claim does: a
// completed operation comes back as recorded, with no lease to keep; a
// pending one whose lease is free is leased by the next fence, under its
// own key; one another machine holds is waited for, and a *HeldError
// names the holder when the context ends.
func TestClaimBeginClaimsWhatTheJournalHolds(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	ctx := context.Background()
	intent := func(id, key string) journal.Operation {
		return journal.Operation{ID: id, Key: key, KeyTTL: 24 * time.Hour, State: journal.StatePending}
	}
	claimBegin := func(j *pgjournal.Journal, ctx context.Context, id, key string) journal.Claim {
		t.Helper()
		c, err := j.ClaimBegin(ctx, intent(id, key))
		if err != nil {
			t.Fatalf("ClaimBegin(%s): %v", id, err)
		}
		return c
	}
	c := claimBegin(a, ctx, "done", "key-a")
	op, _ := c.Operation()
	op.State, op.Status = journal.StateDone, 201
	if err := c.Complete(ctx, op); err != nil {
		t.Fatal(err)
	}
	c.Release()
	claimBegin(a, ctx, "pending", "key-a").Release()
	held := claimBegin(a, ctx, "held", "key-a")
	defer held.Release()

	c = claimBegin(b, ctx, "done", "key-b")
	if op, ok := c.Operation(); !ok || op.Key != "key-a" || op.State != journal.StateDone || op.Status != 201 || c.Lost() != nil {
		t.Errorf("ClaimBegin of a completed operation: %+v %v, lost %v; want a's outcome under key-a, no lease", op, ok, c.Lost())
	}
	c.Release()
	c = claimBegin(b, ctx, "pending", "key-b")
	var (
		owner string
		fence int64
	)
	queryRow(t, dsn, `SELECT lease_owner, fence FROM idem_operations WHERE op_id = 'pending'`, &owner, &fence)
	if op, ok := c.Operation(); !ok || op.Key != "key-a" || op.State != journal.StatePending || owner != "b" || fence != 2 {
		t.Errorf("ClaimBegin of a pending operation: %+v %v, lease %s fence %d; want a's intent under key-a, leased by b, fence 2", op, ok, owner, fence)
	}
	c.Release()
	// Long enough to end in the wait on a's lease rather than inside one
	// of b's statements on a loaded database, as in TestOneSenderAtATime.
	wait, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := b.ClaimBegin(wait, intent("held", "key-b"))
	var he *journal.HeldError
	if !errors.As(err, &he) || he.Holder != "a" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ClaimBegin of an operation a holds: %v, want a *HeldError naming a, after the context's deadline", err)
	}
	if st := b.Stats(); st.Intents != 0 {
		t.Errorf("b's stats %+v: want no intent inserted", st)
	}
}
