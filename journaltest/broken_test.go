package journaltest_test

// The suite must fail a journal that breaks any one of its checks. Each
// broken journal below wraps the map journal and breaks one thing: a field
// it reads back, an error it returns, the order it lists, the one claim it
// lets hold an ID... A child test binary runs the suite against each of
// them (a failing subtest cannot be caught in the process that runs it),
// and TestTheSuiteFailsEveryBrokenJournal reads which checks failed.

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/journaltest"
)

// breaks are the ways a broken journal departs from the map journal it
// wraps; a nil field departs in nothing.
type breaks struct {
	read          func(op *journal.Operation) // applied to every operation read back
	list          func(ops []journal.Operation, which journal.Listing, j *brokenJournal) []journal.Operation
	lookup        func(j *brokenJournal, id string) (journal.Operation, bool, error, bool) // last: handled
	claim         func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error)
	tryClaim      func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error)
	claimBegin    func(j *brokenJournal, ctx context.Context, op journal.Operation) (journal.Claim, error)
	begin         func(c *brokenClaim, ctx context.Context, op journal.Operation) error
	complete      func(c *brokenClaim, ctx context.Context, op journal.Operation) error
	release       func(c *brokenClaim)
	freshOnReopen bool // Reopen opens empty storage
}

// brokenJournals are the broken journals, each with the check of the
// suite it must fail.
var brokenJournals = []struct {
	name, check string
	b           breaks
}{
	// Fields of an intent read back.
	{"KeyChangedOnRead", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Key += "x" }}},
	{"FingerprintLost", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Fingerprint = journal.Fingerprint{} }}},
	{"MethodLost", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Method = "" }}},
	{"URLLost", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.URL = "" }}},
	{"CreatedRoundedToMicroseconds", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Created = op.Created.Truncate(time.Microsecond) }}},
	{"CreatedNotUTC", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Created = op.Created.In(time.FixedZone("X", 3600)) }}},
	{"PendingReadAsDone", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) {
		if op.State == journal.StatePending {
			op.State = journal.StateDone
		}
	}}},
	// Fields of an outcome read back.
	{"StatusChangedOnRead", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Status++ }}},
	{"HeaderDropped", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Header = nil }}},
	{"HeaderValueDropped", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) {
		if vs := op.Header["X-Many"]; len(vs) > 1 {
			op.Header["X-Many"] = vs[:1]
		}
	}}},
	{"BodyDropped", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Body = nil }}},
	{"BodyTruncatedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.BodyTruncated = false }}},
	{"HeaderTruncatedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.HeaderTruncated = false }}},
	{"AppliedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Applied = false }}},
	{"KeyReusedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.KeyReused = "" }}},
	{"SettledLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Settled = false }}},
	{"SettledNoteLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.SettledNote = "" }}},
	{"UnrecordedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Unrecorded = nil }}},
	{"UnrecordedNameDropped", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) {
		if len(op.Unrecorded) > 1 {
			op.Unrecorded = op.Unrecorded[:1]
		}
	}}},
	{"CompletedLost", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.Completed = op.Created }}},
	{"RejectedReadAsDone", "CompleteIsReadBackWhole", breaks{read: func(op *journal.Operation) {
		if op.State == journal.StateRejected {
			op.State = journal.StateDone
		}
	}}},
	// Empty outcomes read back as nil.
	{"EmptyHeaderNotNil", "EmptyOutcomeReadsBackAsNil", breaks{read: func(op *journal.Operation) {
		if op.State != journal.StatePending && op.Header == nil {
			op.Header = http.Header{}
		}
	}}},
	{"EmptyBodyNotNil", "EmptyOutcomeReadsBackAsNil", breaks{read: func(op *journal.Operation) {
		if op.State != journal.StatePending && op.Body == nil {
			op.Body = []byte{}
		}
	}}},
	{"HeaderNameWithoutValuesDropped", "EmptyOutcomeReadsBackAsNil", breaks{read: func(op *journal.Operation) {
		for name, values := range op.Header {
			if values == nil {
				delete(op.Header, name)
			}
		}
	}}},
	// Errors of Begin and Complete.
	{"RepeatedBeginOverwrites", "AnIntentIsRecordedOnce", breaks{begin: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		c.j.store().put(op)
		return nil
	}}},
	{"RepeatedBeginWrongError", "AnIntentIsRecordedOnce", breaks{begin: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		if err := c.Claim.Begin(ctx, op); errors.Is(err, journal.ErrOperationExists) {
			return journal.ErrInvalidOperation
		} else {
			return err
		}
	}}},
	{"OutcomeWithoutIntentRecorded", "AnOutcomeNeedsAnIntent", breaks{complete: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		if _, ok := c.j.store().get(op.ID); !ok {
			c.j.store().put(op)
			return nil
		}
		return c.Claim.Complete(ctx, op)
	}}},
	{"IntentNotChecked", "InvalidOperationsAreRefused", breaks{begin: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		if journal.CheckIntent(op) != nil && op.ID == c.id {
			c.j.store().put(op)
			return nil
		}
		return c.Claim.Begin(ctx, op)
	}}},
	{"OutcomeNotChecked", "InvalidOperationsAreRefused", breaks{complete: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		if journal.CheckOutcome(op) != nil {
			c.j.store().put(op)
			return nil
		}
		return c.Claim.Complete(ctx, op)
	}}},
	{"BeginOfAnotherID", "InvalidOperationsAreRefused", breaks{begin: func(c *brokenClaim, ctx context.Context, op journal.Operation) error {
		if op.ID != c.id {
			c.j.store().put(op)
			return nil
		}
		return c.Claim.Begin(ctx, op)
	}}},
	// Claims.
	{"ClaimOfACompletedOperationFindsNothing", "ClaimOfACompletedOperation", breaks{claim: func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error) {
		c, err := j.inner().Claim(ctx, id)
		if err != nil {
			return nil, err
		}
		bc := &brokenClaim{Claim: c, j: j, id: id}
		if op, ok := c.Operation(); ok && op.State != journal.StatePending {
			bc.hide = true
		}
		return bc, nil
	}}},
	{"ReleaseLeavesAnIntent", "ReleaseWithoutBeginLeavesNothing", breaks{release: func(c *brokenClaim) {
		if _, ok := c.Claim.Operation(); !ok {
			c.j.store().put(journal.Operation{ID: c.id, Key: "phantom", State: journal.StatePending, Created: time.Now().UTC()})
		}
		c.Claim.Release()
	}}},
	{"ListReversed", "ListingsSelectAndOrder", breaks{list: func(ops []journal.Operation, _ journal.Listing, _ *brokenJournal) []journal.Operation {
		slices.Reverse(ops)
		return ops
	}}},
	{"ListIgnoresCase", "ListingsSelectAndOrder", breaks{list: func(ops []journal.Operation, _ journal.Listing, _ *brokenJournal) []journal.Operation {
		slices.SortStableFunc(ops, func(a, b journal.Operation) int {
			if c := a.Created.Compare(b.Created); c != 0 {
				return c
			}
			return strings.Compare(strings.ToLower(a.ID), strings.ToLower(b.ID))
		})
		return ops
	}}},
	{"ListIgnoresTheListing", "ListingsSelectAndOrder", breaks{list: func(ops []journal.Operation, which journal.Listing, j *brokenJournal) []journal.Operation {
		if which == journal.ListCompleted {
			all, _ := j.inner().List(context.Background(), journal.ListAll)
			return all
		}
		return ops
	}}},
	{"KeyTTLChangedOnRead", "BeginIsReadBackWhole", breaks{read: func(op *journal.Operation) { op.KeyTTL += time.Second }}},
	{"KeyTTLReadAsOneForAll", "ExpiryFollowsEachOperationsKeyTTL", breaks{read: func(op *journal.Operation) { op.KeyTTL = time.Hour }}},
	{"ExpiryByAnotherTTL", "ExpiryFollowsEachOperationsKeyTTL", breaks{list: func(_ []journal.Operation, which journal.Listing, j *brokenJournal) []journal.Operation {
		all, _ := j.inner().List(context.Background(), journal.ListAll)
		var out []journal.Operation
		for _, op := range all {
			op.KeyTTL *= 2
			if which.Selects(op, j.Now()) {
				op.KeyTTL /= 2
				out = append(out, op)
			}
		}
		return out
	}}},
	{"TwoClaimsHoldOneID", "OneClaimAtATime", breaks{claim: func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error) {
		if c, err := j.inner().TryClaim(ctx, id); err == nil {
			return &brokenClaim{Claim: c, j: j, id: id}, nil
		}
		return &brokenClaim{Claim: unlockedClaim{j: j, id: id}, j: j, id: id}, nil
	}}},
	{"ClaimForgetsItsContextsError", "ClaimWaitsWithinItsContext", breaks{claim: func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error) {
		for {
			if c, err := j.inner().TryClaim(context.Background(), id); err == nil {
				return &brokenClaim{Claim: c, j: j, id: id}, nil
			}
			select {
			case <-ctx.Done():
				return nil, &journal.HeldError{ID: id}
			case <-time.After(time.Millisecond):
			}
		}
	}}},
	{"TryClaimNotAHeldError", "TryClaimDoesNotWait", breaks{tryClaim: func(j *brokenJournal, ctx context.Context, id string) (journal.Claim, error) {
		c, err := j.inner().TryClaim(ctx, id)
		if errors.Is(err, journal.ErrClaimed) {
			return nil, errors.New("busy")
		}
		if err != nil {
			return nil, err
		}
		return &brokenClaim{Claim: c, j: j, id: id}, nil
	}}},
	{"ClaimBeginOverwrites", "ClaimBeginIsClaimThenBegin", breaks{claimBegin: func(j *brokenJournal, ctx context.Context, op journal.Operation) (journal.Claim, error) {
		if err := journal.CheckIntent(op); err != nil {
			return nil, err
		}
		c, err := j.Claim(ctx, op.ID)
		if err != nil {
			return nil, err
		}
		if old, ok := j.store().get(op.ID); !ok || old.State == journal.StatePending {
			if op.Created.IsZero() {
				op.Created = j.Now()
			}
			op.Created, op.State = op.Created.UTC(), journal.StatePending
			j.store().put(op)
		}
		c.Release()
		return j.Claim(ctx, op.ID)
	}}},
	{"ReopenLosesEverything", "ReopenKeepsEverything", breaks{freshOnReopen: true}},
	{"AnOutcomeReadAsAbsent", "OutcomesAreKeptOrRefused", breaks{lookup: func(j *brokenJournal, id string) (journal.Operation, bool, error, bool) {
		return journal.Operation{}, false, nil, id == "op-000"
	}}},
}

// brokenJournal is a map journal broken by b.
type brokenJournal struct {
	in *mapJournal
	b  breaks
}

func (j *brokenJournal) inner() *mapJournal { return j.in }
func (j *brokenJournal) store() *store      { return j.in.s }

func (j *brokenJournal) fix(op journal.Operation) journal.Operation {
	if j.b.read != nil {
		j.b.read(&op)
	}
	return op
}

func (j *brokenJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	if j.b.claim != nil {
		return j.b.claim(j, ctx, id)
	}
	c, err := j.in.Claim(ctx, id)
	if err != nil {
		return nil, err
	}
	return &brokenClaim{Claim: c, j: j, id: id}, nil
}

func (j *brokenJournal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	if j.b.tryClaim != nil {
		return j.b.tryClaim(j, ctx, id)
	}
	c, err := j.in.TryClaim(ctx, id)
	if err != nil {
		return nil, err
	}
	return &brokenClaim{Claim: c, j: j, id: id}, nil
}

func (j *brokenJournal) ClaimBegin(ctx context.Context, op journal.Operation) (journal.Claim, error) {
	if j.b.claimBegin != nil {
		return j.b.claimBegin(j, ctx, op)
	}
	c, err := j.Claim(ctx, op.ID)
	if err != nil {
		return nil, err
	}
	if _, ok := c.Operation(); !ok {
		if err := c.Begin(ctx, op); err != nil {
			c.Release()
			return nil, err
		}
	}
	return c, nil
}

func (j *brokenJournal) Lookup(ctx context.Context, id string) (journal.Operation, bool, error) {
	if j.b.lookup != nil {
		if op, ok, err, handled := j.b.lookup(j, id); handled {
			return op, ok, err
		}
	}
	op, ok, err := j.in.Lookup(ctx, id)
	if ok {
		op = j.fix(op)
	}
	return op, ok, err
}

func (j *brokenJournal) List(ctx context.Context, which journal.Listing) ([]journal.Operation, error) {
	ops, err := j.in.List(ctx, which)
	if err != nil {
		return nil, err
	}
	if j.b.list != nil {
		ops = j.b.list(ops, which, j)
	}
	for i := range ops {
		ops[i] = j.fix(ops[i])
	}
	return ops, nil
}

func (j *brokenJournal) Now() time.Time { return j.in.Now() }

// brokenClaim is a claim of a brokenJournal.
type brokenClaim struct {
	journal.Claim
	j    *brokenJournal
	id   string
	hide bool // Operation finds nothing
}

func (c *brokenClaim) Operation() (journal.Operation, bool) {
	op, ok := c.Claim.Operation()
	if c.hide || !ok {
		return journal.Operation{}, false
	}
	return c.j.fix(op), true
}

func (c *brokenClaim) Begin(ctx context.Context, op journal.Operation) error {
	if c.j.b.begin != nil {
		return c.j.b.begin(c, ctx, op)
	}
	return c.Claim.Begin(ctx, op)
}

func (c *brokenClaim) Complete(ctx context.Context, op journal.Operation) error {
	if c.j.b.complete != nil {
		return c.j.b.complete(c, ctx, op)
	}
	return c.Claim.Complete(ctx, op)
}

func (c *brokenClaim) Release() {
	if c.j.b.release != nil {
		c.j.b.release(c)
		return
	}
	c.Claim.Release()
}

// unlockedClaim is a claim that holds no lock: it reads and writes the
// store directly.
type unlockedClaim struct {
	j  *brokenJournal
	id string
}

func (c unlockedClaim) Operation() (journal.Operation, bool) { return c.j.store().get(c.id) }
func (c unlockedClaim) Begin(_ context.Context, op journal.Operation) error {
	if _, ok := c.j.store().get(op.ID); ok {
		return journal.ErrOperationExists
	}
	op.State = journal.StatePending
	c.j.store().put(op)
	return nil
}
func (c unlockedClaim) Complete(_ context.Context, op journal.Operation) error {
	c.j.store().put(op)
	return nil
}
func (unlockedClaim) Lost() <-chan struct{} { return nil }
func (unlockedClaim) Release()              {}

// get returns a copy of what s holds for id.
func (s *store) get(id string) (journal.Operation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, ok := s.ops[id]
	return clone(op), ok
}

// put stores op as it is, without a check.
func (s *store) put(op journal.Operation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[op.ID] = clone(op)
}

// openBroken opens, for each check, a map journal broken by b.
func openBroken(b breaks) journaltest.Open {
	return func(t *testing.T) journaltest.Backend {
		s := newStore()
		return journaltest.Backend{
			Journal: &brokenJournal{in: openMapJournal(s), b: b},
			Reopen: func(*testing.T) journal.Journal {
				if b.freshOnReopen {
					s = newStore()
				}
				return &brokenJournal{in: openMapJournal(s), b: b}
			},
		}
	}
}

// envBroken, set in a child test binary, makes TestBrokenJournalsChild run
// the suite against every broken journal.
const envBroken = "JOURNALTEST_BROKEN_CHILD"

// TestBrokenJournalsChild runs the suite against the map journal wrapped
// without a break, which must pass: the wrapper alone breaks nothing. In
// the child binary TestTheSuiteFailsEveryBrokenJournal starts, it runs the
// suite against each broken journal instead, in a subtest named for it.
func TestBrokenJournalsChild(t *testing.T) {
	if os.Getenv(envBroken) == "" {
		journaltest.Run(t, openBroken(breaks{}))
		return
	}
	for _, bj := range brokenJournals {
		t.Run(bj.name, func(t *testing.T) { journaltest.Run(t, openBroken(bj.b)) })
	}
}

// TestTheSuiteFailsEveryBrokenJournal: for each broken journal, the check
// it breaks fails. The suite runs in a child test binary, where the
// failures are the point.
func TestTheSuiteFailsEveryBrokenJournal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenJournalsChild$", "-test.timeout=5m", "-test.count=1")
	cmd.Env = append(os.Environ(), envBroken+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the child ran the suite against %d broken journals: %v, want it to fail\n%s", len(brokenJournals), err, out)
	}
	checks := map[string]bool{}
	for _, bj := range brokenJournals {
		want := "--- FAIL: TestBrokenJournalsChild/" + bj.name + "/" + bj.check + " "
		if !strings.Contains(string(out), want) {
			t.Errorf("the suite did not fail %s in %s", bj.check, bj.name)
		}
		checks[bj.check] = true
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
	// Every check of the suite is broken by at least one journal.
	for _, name := range journaltest.CheckNames() {
		if !checks[name] {
			t.Errorf("no broken journal breaks the check %s", name)
		}
	}
}
