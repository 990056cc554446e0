package journaltest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// Backend is a journal under test, opened for one check of the suite.
type Backend struct {
	// Journal is a fresh, empty journal.
	Journal journal.Journal
	// Reopen closes Journal and opens its storage again, as the next
	// process would, and returns the journal it opened. The suite calls it
	// at most once, when no claim is held, and then no longer uses
	// Journal. Leave it nil for a journal that keeps nothing: the check
	// that reopens is then skipped, and says so.
	Reopen func(t *testing.T) journal.Journal
	// KeptOutcomes is zero for a journal that keeps every outcome it
	// records. A journal that keeps the outcomes of its latest operations
	// only, as a Client without a journal does, sets it to how many it
	// keeps at least: it may then forget an older outcome, and must refuse
	// Lookup, Claim and TryClaim of that operation with an error matching
	// journal.ErrOutcomeForgotten, never read it as absent.
	KeptOutcomes int
}

// Open opens a fresh Backend for one check. The t it is given is the
// check's: Open may fail it, and closes what it opened with t.Cleanup.
type Open func(t *testing.T) Backend

// Run runs every check of the suite, each in a subtest of t that calls
// open once.
func Run(t *testing.T, open Open) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, open Open)
}{
	{"BeginIsReadBackWhole", testBeginIsReadBackWhole},
	{"CompleteIsReadBackWhole", testCompleteIsReadBackWhole},
	{"EmptyOutcomeReadsBackAsNil", testEmptyOutcomeReadsBackAsNil},
	{"AnIntentIsRecordedOnce", testAnIntentIsRecordedOnce},
	{"AnOutcomeNeedsAnIntent", testAnOutcomeNeedsAnIntent},
	{"InvalidOperationsAreRefused", testInvalidOperationsAreRefused},
	{"ClaimOfACompletedOperation", testClaimOfACompletedOperation},
	{"ReleaseWithoutBeginLeavesNothing", testReleaseWithoutBeginLeavesNothing},
	{"ListingsSelectAndOrder", testListingsSelectAndOrder},
	{"ExpiryFollowsEachOperationsKeyTTL", testExpiryFollowsEachOperationsKeyTTL},
	{"OneClaimAtATime", testOneClaimAtATime},
	{"ClaimWaitsWithinItsContext", testClaimWaitsWithinItsContext},
	{"TryClaimDoesNotWait", testTryClaimDoesNotWait},
	{"ClaimBeginIsClaimThenBegin", testClaimBeginIsClaimThenBegin},
	{"ReopenKeepsEverything", testReopenKeepsEverything},
	{"OutcomesAreKeptOrRefused", testOutcomesAreKeptOrRefused},
}

// ttl is the key lifetime of the suite's operations.
const ttl = time.Hour

// intent returns a pending operation named id, created at created, whose
// key lives ttl.
func intent(id string, created time.Time) journal.Operation {
	return journal.Operation{
		ID: id, Key: "key-" + id, Fingerprint: sha256.Sum256([]byte(id)),
		Method: http.MethodPost, URL: "https://api.example/charges/" + id,
		Created: created.Truncate(time.Microsecond).Add(123), // nanoseconds survive
		KeyTTL:  ttl,
		State:   journal.StatePending,
	}
}

// outcome returns op completed with the given status and a body.
func outcome(op journal.Operation, status int) journal.Operation {
	op.State, op.Status = journal.StateDone, status
	if status >= 400 {
		op.State = journal.StateRejected
	}
	op.Completed = op.Created.Add(1500 * time.Millisecond)
	op.Header = http.Header{"Content-Type": {"application/json"}, "X-Many": {"a", "b"}}
	op.Body = []byte(`{"id":"` + op.ID + `"}`)
	return op
}

// claim claims id, failing t on error.
func claim(t *testing.T, j journal.Journal, id string) journal.Claim {
	t.Helper()
	c, err := j.Claim(context.Background(), id)
	if err != nil {
		t.Fatalf("Claim(%q): %v", id, err)
	}
	return c
}

// begin claims op.ID, records op's intent and releases the claim.
func begin(t *testing.T, j journal.Journal, op journal.Operation) {
	t.Helper()
	c := claim(t, j, op.ID)
	defer c.Release()
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatalf("Begin(%q): %v", op.ID, err)
	}
}

// complete claims op.ID, records op's outcome and releases the claim.
func complete(t *testing.T, j journal.Journal, op journal.Operation) {
	t.Helper()
	c := claim(t, j, op.ID)
	defer c.Release()
	if err := c.Complete(context.Background(), op); err != nil {
		t.Fatalf("Complete(%q): %v", op.ID, err)
	}
}

// lookup returns what j holds for id, failing t on error.
func lookup(t *testing.T, j journal.Journal, id string) (journal.Operation, bool) {
	t.Helper()
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", id, err)
	}
	return op, ok
}

// list returns j's listing, failing t on error.
func list(t *testing.T, j journal.Journal, which journal.Listing) []journal.Operation {
	t.Helper()
	ops, err := j.List(context.Background(), which)
	if err != nil {
		t.Fatalf("List(%s): %v", which, err)
	}
	return ops
}

// same fails t unless got equals want in every field.
func same(t *testing.T, what string, got, want journal.Operation) {
	t.Helper()
	if d := diff(got, want); d != "" {
		t.Fatalf("%s: %s\n got %+v\nwant %+v", what, d, got, want)
	}
}

// diff names the first field in which got and want differ, or "".
func diff(got, want journal.Operation) string {
	switch {
	case got.ID != want.ID || got.Key != want.Key || got.Fingerprint != want.Fingerprint:
		return "ID, key or fingerprint differ"
	case got.Method != want.Method || got.URL != want.URL:
		return "method or URL differ"
	case !got.Created.Equal(want.Created) || got.Created.Location() != time.UTC:
		return fmt.Sprintf("created %v, want %v in UTC", got.Created, want.Created)
	case got.KeyTTL != want.KeyTTL:
		return fmt.Sprintf("key lifetime %v, want %v", got.KeyTTL, want.KeyTTL)
	case got.State != want.State:
		return fmt.Sprintf("state %s, want %s", got.State, want.State)
	case !got.Completed.Equal(want.Completed) || (!got.Completed.IsZero() && got.Completed.Location() != time.UTC):
		return fmt.Sprintf("completed %v, want %v in UTC", got.Completed, want.Completed)
	case got.Status != want.Status || got.BodyTruncated != want.BodyTruncated || got.HeaderTruncated != want.HeaderTruncated:
		return "status or truncation flags differ"
	case !equalHeader(got.Header, want.Header) || (got.Header == nil) != (len(want.Header) == 0):
		return fmt.Sprintf("header %v, want %v", got.Header, want.Header)
	case string(got.Body) != string(want.Body) || (got.Body == nil) != (len(want.Body) == 0):
		return fmt.Sprintf("body %q, want %q", got.Body, want.Body)
	case got.Applied != want.Applied || got.KeyReused != want.KeyReused:
		return fmt.Sprintf("applied %v, key reused %q; want %v, %q", got.Applied, got.KeyReused, want.Applied, want.KeyReused)
	case got.Settled != want.Settled || got.SettledNote != want.SettledNote:
		return fmt.Sprintf("settled %v %q, want %v %q", got.Settled, got.SettledNote, want.Settled, want.SettledNote)
	case !slices.Equal(got.Unrecorded, want.Unrecorded) || (got.Unrecorded == nil) != (len(want.Unrecorded) == 0):
		return fmt.Sprintf("unrecorded %q, want %q", got.Unrecorded, want.Unrecorded)
	}
	return ""
}

// equalHeader reports whether a and b have the same names, each with the
// same values, nil where the other's are nil.
func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) || (v == nil) != (w == nil) {
			return false
		}
	}
	return true
}

// ids returns the IDs of ops, in order.
func ids(ops []journal.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.ID
	}
	return out
}

func testBeginIsReadBackWhole(t *testing.T, open Open) {
	j := open(t).Journal
	c := claim(t, j, "op")
	if _, ok := c.Operation(); ok {
		t.Fatal("a claim on a new ID found an operation")
	}
	op := intent("op", j.Now())
	if err := c.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	// C2/F1: the intent is readable by anyone as soon as Begin returns.
	got, ok := lookup(t, j, "op")
	if !ok {
		t.Fatal("Lookup does not find an operation whose Begin returned")
	}
	same(t, "after Begin", got, op)
	c.Release()
	c = claim(t, j, "op")
	defer c.Release()
	got, ok = c.Operation()
	if !ok {
		t.Fatal("the next claim does not find the operation")
	}
	same(t, "the next claim's Operation", got, op)
}

func testCompleteIsReadBackWhole(t *testing.T, open Open) {
	j := open(t).Journal
	for i, tc := range []struct {
		status                       int
		headerTruncated, bodyNotKept bool
		marks                        func(*journal.Operation)
	}{
		{201, false, false, nil},
		{422, true, false, nil},
		{500, true, true, nil}, // both flags at once
		// Each mark, with a header whose names a journal may use to store them.
		{409, false, false, func(o *journal.Operation) { o.State, o.Applied = journal.StateDone, true }},
		{400, false, false, func(o *journal.Operation) {
			o.KeyReused, o.Unrecorded = "IdempotentParameterMismatch", []string{"Authorization", "Set-Cookie"}
		}},
		{201, false, true, func(o *journal.Operation) {
			o.Settled, o.SettledNote, o.Header = true, "ch_1, seen in the dashboard", nil
		}},
		{409, false, true, func(o *journal.Operation) { o.Settled, o.Header = true, nil }},
	} {
		op := intent(fmt.Sprint("op-", i), j.Now())
		c := claim(t, j, op.ID)
		if err := c.Begin(context.Background(), op); err != nil {
			t.Fatal(err)
		}
		done := outcome(op, tc.status)
		done.HeaderTruncated = tc.headerTruncated
		if tc.bodyNotKept {
			done.BodyTruncated, done.Body = true, nil
		}
		if tc.marks != nil {
			tc.marks(&done)
		}
		if err := c.Complete(context.Background(), done); err != nil {
			t.Fatal(err)
		}
		c.Release()
		got, _ := lookup(t, j, op.ID)
		same(t, fmt.Sprintf("completed with %d", tc.status), got, done)
	}
}

func testEmptyOutcomeReadsBackAsNil(t *testing.T, open Open) {
	j := open(t).Journal
	op := intent("op", j.Now())
	begin(t, j, op)
	done := op
	done.State, done.Status, done.Completed, done.BodyTruncated = journal.StateDone, 204, op.Created.Add(time.Second), true
	done.Header = http.Header{}
	complete(t, j, done)
	got, _ := lookup(t, j, "op")
	done.Header = nil
	same(t, "an empty header and a body not recorded", got, done)

	// A header name with no values is kept, its values nil.
	op = intent("op-2", j.Now())
	begin(t, j, op)
	done = op
	done.State, done.Status, done.Completed = journal.StateDone, 200, op.Created.Add(time.Second)
	done.Header = http.Header{"Content-Type": {"text/plain"}, "X-Empty": {}}
	done.Body = []byte{}
	complete(t, j, done)
	got, _ = lookup(t, j, "op-2")
	done.Header, done.Body = http.Header{"Content-Type": {"text/plain"}, "X-Empty": nil}, nil
	same(t, "an empty body and a header name with no values", got, done)
}

func testAnIntentIsRecordedOnce(t *testing.T, open Open) {
	j := open(t).Journal
	op := intent("op", j.Now())
	begin(t, j, op)
	c := claim(t, j, "op")
	defer c.Release()
	other := op
	other.Key = "another-key"
	if err := c.Begin(context.Background(), other); !errors.Is(err, journal.ErrOperationExists) {
		t.Fatalf("a second Begin of one ID: %v, want ErrOperationExists", err)
	}
	if got, _ := lookup(t, j, "op"); got.Key != op.Key {
		t.Fatalf("key %q after a refused second Begin, want %q", got.Key, op.Key)
	}
}

func testAnOutcomeNeedsAnIntent(t *testing.T, open Open) {
	j := open(t).Journal
	c := claim(t, j, "op")
	defer c.Release()
	if err := c.Complete(context.Background(), outcome(intent("op", j.Now()), 200)); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("Complete without an intent: %v, want ErrNoSuchOperation", err)
	}
	if _, ok := lookup(t, j, "op"); ok {
		t.Fatal("an outcome without an intent was recorded")
	}
}

func testInvalidOperationsAreRefused(t *testing.T, open Open) {
	j := open(t).Journal
	now := j.Now()
	intents := map[string]func(*journal.Operation){
		"no key":           func(op *journal.Operation) { op.Key = "" },
		"no key lifetime":  func(op *journal.Operation) { op.KeyTTL = 0 },
		"state done":       func(op *journal.Operation) { op.State = journal.StateDone },
		"an outcome field": func(op *journal.Operation) { op.Status = 200 },
		"a mark":           func(op *journal.Operation) { op.Settled = true },
		"another ID":       func(op *journal.Operation) { op.ID = "elsewhere" },
	}
	for what, change := range intents {
		op := intent("op", now)
		change(&op)
		c := claim(t, j, "op")
		err := c.Begin(context.Background(), op)
		c.Release()
		if !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("Begin with %s: %v, want ErrInvalidOperation", what, err)
		}
	}
	if ops := list(t, j, journal.ListAll); len(ops) != 0 {
		t.Fatalf("refused intents left %d operations", len(ops))
	}
	op := intent("op", now)
	begin(t, j, op)
	outcomes := map[string]func(*journal.Operation){
		"state pending": func(o *journal.Operation) { o.State = journal.StatePending },
		"status 1000":   func(o *journal.Operation) { o.Status = 1000 },
		"a kept body marked truncated": func(o *journal.Operation) {
			o.BodyTruncated = true
		},
		"a rejection marked applied":       func(o *journal.Operation) { o.State, o.Applied = journal.StateRejected, true },
		"a done outcome marked key reused": func(o *journal.Operation) { o.KeyReused = "Conflict" },
		"a note not settled":               func(o *journal.Operation) { o.SettledNote = "n" },
		"an unrecorded name with a comma":  func(o *journal.Operation) { o.Unrecorded = []string{"A, B"} },
	}
	for what, change := range outcomes {
		o := outcome(op, 200)
		change(&o)
		c := claim(t, j, "op")
		err := c.Complete(context.Background(), o)
		c.Release()
		if !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("Complete with %s: %v, want ErrInvalidOperation", what, err)
		}
	}
	if got, _ := lookup(t, j, "op"); got.State != journal.StatePending {
		t.Fatalf("state %s after refused outcomes, want pending", got.State)
	}
}

func testClaimOfACompletedOperation(t *testing.T, open Open) {
	j := open(t).Journal
	op := intent("op", j.Now())
	begin(t, j, op)
	done := outcome(op, 200)
	complete(t, j, done)
	c := claim(t, j, "op")
	defer c.Release()
	got, ok := c.Operation()
	if !ok {
		t.Fatal("a claim on a completed operation does not find it")
	}
	same(t, "claim of a completed operation", got, done)
}

func testReleaseWithoutBeginLeavesNothing(t *testing.T, open Open) {
	j := open(t).Journal
	claim(t, j, "op").Release()
	if _, ok := lookup(t, j, "op"); ok {
		t.Fatal("a claim released without Begin left an operation")
	}
	if ops := list(t, j, journal.ListAll); len(ops) != 0 {
		t.Fatalf("a claim released without Begin left %d listed operations", len(ops))
	}
	op := intent("op", j.Now())
	begin(t, j, op) // the ID is free for the next claim
	got, _ := lookup(t, j, "op")
	same(t, "Begin after an empty claim", got, op)
}

func testListingsSelectAndOrder(t *testing.T, open Open) {
	j := open(t).Journal
	now := j.Now()
	// Equal Created times are ordered by the IDs' bytes: "B" before "a",
	// whatever a database's collation says.
	p1, p2, p3 := intent("a", now), intent("B", now), intent("c", now.Add(-time.Minute))
	expired := intent("old", now.Add(-2*ttl))
	d := intent("done", now.Add(-2*time.Minute))
	r := intent("rejected", now.Add(-3*time.Minute))
	for _, op := range []journal.Operation{p1, p2, p3, expired, d, r} {
		begin(t, j, op)
	}
	complete(t, j, outcome(d, 200))
	complete(t, j, outcome(r, 409))
	want := map[journal.Listing][]string{
		journal.ListAll:       {"old", "rejected", "done", "c", "B", "a"},
		journal.ListPending:   {"c", "B", "a"},
		journal.ListExpired:   {"old"},
		journal.ListCompleted: {"rejected", "done"},
	}
	for which, w := range want {
		if got := ids(list(t, j, which)); !slices.Equal(got, w) {
			t.Errorf("List(%s) = %q, want %q", which, got, w)
		}
	}
}

// testExpiryFollowsEachOperationsKeyTTL begins operations with different
// key lifetimes: each is read back with its own, and judged expired by it
// (C6).
func testExpiryFollowsEachOperationsKeyTTL(t *testing.T, open Open) {
	const short = 2 * time.Second
	j := open(t).Journal
	now := j.Now()
	// young and old were created at once; old's key lives 2s, young's an
	// hour, and young2's 2s, created now.
	young, old, young2 := intent("young", now.Add(-short-time.Millisecond)), intent("old", now.Add(-short-time.Millisecond)), intent("young2", now)
	old.KeyTTL, young2.KeyTTL = short, short
	for _, op := range []journal.Operation{young, old, young2} {
		begin(t, j, op)
		got, _ := lookup(t, j, op.ID)
		same(t, "an operation of key lifetime "+op.KeyTTL.String(), got, op)
	}
	if got := ids(list(t, j, journal.ListExpired)); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("expired %q, want [old]", got)
	}
	if got := ids(list(t, j, journal.ListPending)); !slices.Equal(got, []string{"young", "young2"}) {
		t.Fatalf("pending %q, want [young young2]", got)
	}
	// A completed operation never expires.
	complete(t, j, outcome(old, 200))
	if got := list(t, j, journal.ListExpired); len(got) != 0 {
		t.Fatalf("a completed operation is listed as expired: %q", ids(got))
	}
}

func testOneClaimAtATime(t *testing.T, open Open) {
	j := open(t).Journal
	const n = 8
	var (
		inside, began atomic.Int32
		overlapped    atomic.Bool // two claims were held at once
		wg            sync.WaitGroup
		errs          = make(chan error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := j.Claim(context.Background(), "op")
			if err != nil {
				errs <- err
				return
			}
			defer c.Release()
			if inside.Add(1) > 1 {
				overlapped.Store(true)
			}
			defer inside.Add(-1)
			if _, ok := c.Operation(); !ok {
				op := intent("op", j.Now())
				op.Key = fmt.Sprint("key-of-", i)
				if err := c.Begin(context.Background(), op); err != nil {
					errs <- err
					return
				}
				began.Add(1)
			}
			time.Sleep(time.Millisecond) // hold the claim while others try
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if overlapped.Load() {
		t.Fatal("two claims of one ID were held at once")
	}
	if began.Load() != 1 {
		t.Fatalf("%d intents begun under claims of one ID, want 1", began.Load())
	}
}

func testClaimWaitsWithinItsContext(t *testing.T, open Open) {
	j := open(t).Journal
	held := claim(t, j, "op")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if c, err := j.Claim(ctx, "op"); !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("Claim of a held operation: %v, want an error matching context.DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		c, err := j.Claim(context.Background(), "op")
		if err == nil {
			c.Release()
		}
		got <- err
	}()
	held.Release()
	if err := <-got; err != nil {
		t.Fatalf("Claim after the holder released: %v", err)
	}
}

// testTryClaimDoesNotWait is F7.1: TryClaim of an operation another Do
// holds returns at once a *HeldError without an Err (with no deadline on
// its context, a TryClaim that waited would never return); once the claim
// is released, TryClaim takes it, and it reads the operation as Claim does.
func testTryClaimDoesNotWait(t *testing.T, open Open) {
	j := open(t).Journal
	op := intent("op", j.Now())
	held := claim(t, j, "op")
	if err := held.Begin(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	c, err := j.TryClaim(context.Background(), "op")
	var he *journal.HeldError
	if !errors.As(err, &he) || !errors.Is(err, journal.ErrClaimed) || he.ID != "op" || he.Err != nil {
		if c != nil {
			c.Release()
		}
		t.Fatalf("TryClaim of a held operation: %v, want a *HeldError of op without Err", err)
	}
	free, err := j.TryClaim(context.Background(), "other")
	if err != nil {
		t.Fatalf("TryClaim of a free operation: %v", err)
	}
	free.Release()
	held.Release()
	c, err = j.TryClaim(context.Background(), "op")
	if err != nil {
		t.Fatalf("TryClaim after the holder released: %v", err)
	}
	defer c.Release()
	got, ok := c.Operation()
	if !ok {
		t.Fatal("TryClaim's claim does not read the operation begun")
	}
	want := op
	want.Created = got.Created // the journal's rounding is BeginIsReadBackWhole's concern
	same(t, "TryClaim's Operation", got, want)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := j.TryClaim(ctx, "third"); !errors.Is(err, context.Canceled) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("TryClaim with an ended context: %v, want context.Canceled", err)
	}
}

// testClaimBeginIsClaimThenBegin checks an journal.ClaimBeginner: ClaimBegin
// of a new ID records the intent under its claim; of an ID the journal
// holds, it claims the operation as it is, waiting within its context
// while another claim holds it; an intent it refuses leaves nothing, and
// no claim.
func testClaimBeginIsClaimThenBegin(t *testing.T, open Open) {
	j := open(t).Journal
	cb, ok := j.(journal.ClaimBeginner)
	if !ok {
		t.Skip("the journal is not an journal.ClaimBeginner")
	}
	claimBegin := func(op journal.Operation) journal.Claim {
		t.Helper()
		c, err := cb.ClaimBegin(context.Background(), op)
		if err != nil {
			t.Fatalf("ClaimBegin(%q): %v", op.ID, err)
		}
		return c
	}
	op := intent("op", j.Now())
	c := claimBegin(op)
	if got, ok := c.Operation(); !ok || got.Key != op.Key || got.State != journal.StatePending {
		c.Release()
		t.Fatalf("ClaimBegin of a new ID: the claim's Operation is %+v, %v; want the intent begun", got, ok)
	}
	got, _ := lookup(t, j, "op")
	same(t, "after ClaimBegin", got, op)
	other := intent("op", j.Now())
	other.Key = "another-key"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if c, err := cb.ClaimBegin(ctx, other); !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("ClaimBegin of a held operation: %v, want an error matching context.DeadlineExceeded", err)
	}
	c.Release()

	c = claimBegin(other)
	got, ok = c.Operation()
	if !ok {
		c.Release()
		t.Fatal("ClaimBegin of a pending operation does not find it")
	}
	same(t, "ClaimBegin of a pending operation", got, op)
	done := outcome(op, 201)
	err := c.Complete(context.Background(), done)
	c.Release()
	if err != nil {
		t.Fatalf("Complete under ClaimBegin's claim: %v", err)
	}
	c = claimBegin(other)
	got, ok = c.Operation()
	c.Release()
	if !ok {
		t.Fatal("ClaimBegin of a completed operation does not find it")
	}
	same(t, "ClaimBegin of a completed operation", got, done)
	got, _ = lookup(t, j, "op")
	same(t, "after ClaimBegin of a completed operation", got, done)

	bad := intent("bad", j.Now())
	bad.Key = ""
	if c, err := cb.ClaimBegin(context.Background(), bad); !errors.Is(err, journal.ErrInvalidOperation) {
		if c != nil {
			c.Release()
		}
		t.Fatalf("ClaimBegin without a key: %v, want ErrInvalidOperation", err)
	}
	if _, ok := lookup(t, j, "bad"); ok {
		t.Fatal("ClaimBegin recorded an intent it refused")
	}
	free, err := j.TryClaim(context.Background(), "bad")
	if err != nil {
		t.Fatalf("TryClaim after a refused ClaimBegin: %v, want the claim it left free", err)
	}
	free.Release()
}

func testReopenKeepsEverything(t *testing.T, open Open) {
	b := open(t)
	if b.Reopen == nil {
		t.Skip("Backend.Reopen is nil: the journal keeps nothing to reopen")
	}
	j := b.Journal
	p := intent("pending", j.Now())
	d := intent("done", j.Now().Add(time.Millisecond))
	begin(t, j, p)
	begin(t, j, d)
	done := outcome(d, 201)
	complete(t, j, done)
	j = b.Reopen(t)
	got := list(t, j, journal.ListAll)
	if len(got) != 2 {
		t.Fatalf("%d operations after reopening, want 2", len(got))
	}
	same(t, "pending after reopening", got[0], p)
	same(t, "done after reopening", got[1], done)
	c := claim(t, j, "pending")
	defer c.Release()
	if op, ok := c.Operation(); !ok || op.Key != p.Key {
		t.Fatalf("the pending operation resumes under %q, want %q", op.Key, p.Key)
	}
}

// testOutcomesAreKeptOrRefused completes, one after the other, a dozen
// operations more than Backend.KeptOutcomes (a dozen for a journal that
// keeps them all). The latest KeptOutcomes, or all, read back whole, and
// are listed. Each older one reads back whole, or is forgotten: Lookup,
// Claim and TryClaim of it fail with an error matching
// journal.ErrOutcomeForgotten, and it is not listed. None reads as absent,
// which would let a Client send it again under a new key.
func testOutcomesAreKeptOrRefused(t *testing.T, open Open) {
	b := open(t)
	j := b.Journal
	kept := b.KeptOutcomes
	n := kept + 12
	done := make([]journal.Operation, n)
	for i := range done {
		op := intent(fmt.Sprintf("op-%03d", i), j.Now())
		begin(t, j, op)
		done[i] = outcome(op, 201)
		complete(t, j, done[i])
	}
	listed := map[string]bool{}
	for _, op := range list(t, j, journal.ListCompleted) {
		listed[op.ID] = true
	}
	for i, want := range done {
		got, ok, err := j.Lookup(context.Background(), want.ID)
		switch {
		case err == nil && ok:
			same(t, "Lookup of "+want.ID, got, want)
			if !listed[want.ID] {
				t.Fatalf("%s reads back whole and is not listed", want.ID)
			}
			continue
		case kept == 0 || i >= n-kept:
			t.Fatalf("Lookup of %s, among the latest %d completed: %v, %v; want it whole", want.ID, kept, ok, err)
		case !errors.Is(err, journal.ErrOutcomeForgotten):
			t.Fatalf("Lookup of %s, not kept: %v, %v; want an error matching journal.ErrOutcomeForgotten", want.ID, ok, err)
		case listed[want.ID]:
			t.Fatalf("%s is forgotten and listed", want.ID)
		}
		for name, claim := range map[string]func(context.Context, string) (journal.Claim, error){"Claim": j.Claim, "TryClaim": j.TryClaim} {
			if c, err := claim(context.Background(), want.ID); !errors.Is(err, journal.ErrOutcomeForgotten) {
				if c != nil {
					c.Release()
				}
				t.Fatalf("%s of %s, forgotten: %v; want an error matching journal.ErrOutcomeForgotten", name, want.ID, err)
			}
		}
	}
}
