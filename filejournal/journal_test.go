package filejournal

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// The public behaviour of Journal: what it keeps of an journal.Operation, how
// it lists them, what it refuses. Its engine's own tests (framing,
// recovery, group commit, compaction, locking) are in internal/fileengine.

// testNow is the fixed clock of the journal tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC)

// quietOptions returns options with the fixed clock and no log output.
func quietOptions() Options {
	return Options{
		Now:    func() time.Time { return testNow },
		Logger: slog.New(slog.DiscardHandler),
	}
}

// testIntent returns the intent of operation i, with Created i seconds
// before testNow.
func testIntent(i int) journal.Operation {
	url := fmt.Sprintf("https://api.example.test/charges?n=%d", i)
	body := fmt.Appendf(nil, `{"amount":%d}`, i)
	return journal.Operation{
		ID:          fmt.Sprintf("op-%04d", i),
		Key:         fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Fingerprint: journal.FingerprintOf(http.MethodPost, url, body),
		Method:      http.MethodPost,
		URL:         url,
		Created:     testNow.Add(-time.Duration(i) * time.Second),
		KeyTTL:      24 * time.Hour,
		State:       journal.StatePending,
	}
}

// testOutcome returns op completed as done with a response.
func testOutcome(op journal.Operation, status int, body string) journal.Operation {
	op.State = journal.StateDone
	op.Completed = op.Created.Add(1500 * time.Millisecond)
	op.Status = status
	op.Header = http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a", "b"}}
	op.Body = []byte(body)
	return op
}

func journalPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "ops.journal")
}

func openTestJournal(t testing.TB, path string, o Options) *Journal {
	t.Helper()
	j, err := Open(path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mustBegin(t testing.TB, j *Journal, op journal.Operation) {
	t.Helper()
	if err := j.begin(op); err != nil {
		t.Fatalf("Begin(%s): %v", op.ID, err)
	}
}

func mustComplete(t testing.TB, j *Journal, op journal.Operation) {
	t.Helper()
	if err := j.complete(op); err != nil {
		t.Fatalf("Complete(%s): %v", op.ID, err)
	}
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sameOperations fails the test unless got and want are equal field by
// field.
func sameOperations(t testing.TB, what string, got, want []journal.Operation) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %d operations %+v\n want %d operations %+v", what, len(got), got, len(want), want)
	}
}

// --- J8, round trip -------------------------------------------------------

// Clause: J8.3.
func TestJournalReopenRoundTripsEveryField(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())

	pending := testIntent(1)
	pending.Key = strings.Repeat("k", fileengine.MaxKeyLen) // the longest key
	done := testIntent(2)
	rejected := testIntent(3)
	truncated := testIntent(4)
	odd := journal.Operation{ // empty method and URL, zero fingerprint, a time far from now
		ID:      strings.Repeat("x", fileengine.MaxIDLen),
		Key:     "k\x00with\xffbytes",
		Created: time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC),
		KeyTTL:  1, // the shortest lifetime
	}
	for _, op := range []journal.Operation{pending, done, rejected, truncated, odd} {
		mustBegin(t, j, op)
	}
	done = testOutcome(done, 201, `{"id":"ch_1"}`)
	mustComplete(t, j, done)
	rejected.State = journal.StateRejected
	rejected.Completed = time.Date(2031, 5, 6, 7, 8, 9, 999999999, time.UTC)
	rejected.Status = 409
	rejected.Header = http.Header{"Content-Type": {"application/problem+json"}, "Empty": nil, "Retry-After": {"3"}}
	rejected.Body = []byte("{\"type\":\"https://x/insufficient-stock\"}\x00\xff")
	mustComplete(t, j, rejected)
	truncated.State = journal.StateDone
	truncated.Completed = testNow
	truncated.Status = 200
	truncated.BodyTruncated = true
	mustComplete(t, j, truncated)
	odd.State = journal.StateDone
	odd.Completed = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
	odd.BodyTruncated, odd.HeaderTruncated = true, true // both flags a Complete records
	mustComplete(t, j, odd)

	// Ordered by Created.
	want := []journal.Operation{odd, truncated, rejected, done, pending}

	sameOperations(t, "before reopen", journalhelp.MustList(j, journal.ListAll), want)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", journalhelp.MustList(j2, journal.ListAll), want)
	for _, op := range want {
		got, ok := journalhelp.MustLookup(j2, op.ID)
		if !ok || !reflect.DeepEqual(got, op) {
			t.Fatalf("Lookup(%s) = %+v, %v; want %+v", journalkit.QuoteID(op.ID), got, ok, op)
		}
	}
	st := j2.Stats()
	if st.Records != 9 || st.Operations != 5 || st.Appends != 0 || st.Truncated != 0 {
		t.Fatalf("stats after reopen = %+v; want 9 records, 5 operations, 0 appends, 0 truncated", st)
	}
}

func TestJournalLookupReturnsCopies(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	op := testIntent(1)
	mustBegin(t, j, op)
	done := testOutcome(op, 200, "body")
	mustComplete(t, j, done)
	done.Header.Set("Content-Type", "changed by caller")
	done.Body[0] = 'X'

	got, _ := journalhelp.MustLookup(j, op.ID)
	got.Header.Set("X-Request-Id", "changed")
	got.Body[0] = 'Y'
	again, _ := journalhelp.MustLookup(j, op.ID)
	if again.Header.Get("Content-Type") != "application/json" || again.Header.Get("X-Request-Id") != "a" || string(again.Body) != "body" {
		t.Fatalf("journal's copy changed through a caller's slice or map: %+v", again)
	}
}

// C3.7: a later completion replaces the earlier one, done by done and done
// by rejected, as written, after reopening and after compaction.
func TestJournalCompletionReplacesOutcome(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	op, other := testIntent(1), testIntent(2)
	mustBegin(t, j, op)
	mustBegin(t, j, other)
	mustComplete(t, j, testOutcome(op, 500, "first"))
	mustComplete(t, j, testOutcome(other, 200, "first"))
	second := testOutcome(op, 201, "second")
	mustComplete(t, j, second)
	rejected := testOutcome(other, 422, "refused")
	rejected.State = journal.StateRejected
	mustComplete(t, j, rejected)
	want := []journal.Operation{rejected, second}
	sameOperations(t, "as written", journalhelp.MustList(j, journal.ListAll), want)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", journalhelp.MustList(j2, journal.ListAll), want)
	if err := j2.Compact(); err != nil {
		t.Fatal(err)
	}
	sameOperations(t, "after compaction", journalhelp.MustList(j2, journal.ListAll), want)
}

// J8.1, J8.2: the listings and lookups answer the same as written, after
// reopening (the index rebuilt by recovery) and after compaction (rebuilt
// by the rewrite).
// Clause: J8.3.
func TestJournalListings(t *testing.T) {
	o := quietOptions()
	path := journalPath(t)
	j := openTestJournal(t, path, o)
	hourly := func(i int) journal.Operation { op := testIntent(i); op.KeyTTL = time.Hour; return op }
	fresh := hourly(10)     // 10s old
	expired := hourly(3600) // exactly KeyTTL old: expired
	young := hourly(3599)   // one second short of KeyTTL
	done := testOutcome(hourly(20), 200, "")
	rejected := hourly(30)
	for _, op := range []journal.Operation{fresh, expired, young, hourly(20), rejected} {
		mustBegin(t, j, op)
	}
	mustComplete(t, j, done)
	rejected.State, rejected.Completed, rejected.Status = journal.StateRejected, testNow, 422
	mustComplete(t, j, rejected)
	done.Body = nil // an empty body reads back as nil

	for _, stage := range []string{"as written", "after reopening", "after compaction"} {
		switch stage {
		case "after reopening":
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j = openTestJournal(t, path, o)
		case "after compaction":
			if err := j.Compact(); err != nil {
				t.Fatal(err)
			}
		}
		sameOperations(t, stage+": Pending", journalhelp.MustList(j, journal.ListPending), []journal.Operation{young, fresh})
		sameOperations(t, stage+": Expired", journalhelp.MustList(j, journal.ListExpired), []journal.Operation{expired})
		sameOperations(t, stage+": Completed", journalhelp.MustList(j, journal.ListCompleted), []journal.Operation{rejected, done})
		sameOperations(t, stage+": Operations", journalhelp.MustList(j, journal.ListAll), []journal.Operation{expired, young, rejected, done, fresh})
		for _, op := range []journal.Operation{expired, young, rejected, done, fresh} {
			if got, ok := journalhelp.MustLookup(j, op.ID); !ok || !reflect.DeepEqual(got, op) {
				t.Fatalf("%s: Lookup(%s) = %+v, %v; want %+v", stage, op.ID, got, ok, op)
			}
		}
		if _, ok := journalhelp.MustLookup(j, "missing"); ok {
			t.Fatalf("%s: Lookup(missing) found an operation", stage)
		}
	}
	if !expired.Expired(testNow) || young.Expired(testNow) || done.Expired(testNow.Add(48*time.Hour)) {
		t.Fatal("Operation.Expired disagrees with its definition")
	}
}

// Clause: J8.2.
func TestJournalOrdersEqualCreatedTimesByID(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	b, a := testIntent(1), testIntent(2)
	b.ID, a.ID = "b", "a"
	a.Created = b.Created
	mustBegin(t, j, b)
	mustBegin(t, j, a)
	sameOperations(t, "Operations", journalhelp.MustList(j, journal.ListAll), []journal.Operation{a, b})
}

// --- validation -----------------------------------------------------------

// Clause: J1.7.
func TestJournalRefusesInvalidOperations(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	mustBegin(t, j, testIntent(1))
	okOutcome := testOutcome(testIntent(1), 200, "ok")

	begins := map[string]journal.Operation{
		"empty ID":         {Key: "k"},
		"long ID":          {ID: strings.Repeat("i", fileengine.MaxIDLen+1), Key: "k"},
		"empty key":        {ID: "x"},
		"long key":         {ID: "x", Key: strings.Repeat("k", fileengine.MaxKeyLen+1)},
		"done state":       {ID: "x", Key: "k", State: journal.StateDone},
		"invalid state":    {ID: "x", Key: "k", State: 7},
		"outcome set":      {ID: "x", Key: "k", Status: 200},
		"body set":         {ID: "x", Key: "k", Body: []byte{}},
		"time too early":   {ID: "x", Key: "k", Created: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
		"time too late":    {ID: "x", Key: "k", Created: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"record too large": {ID: "x", Key: "k", Method: "POST", URL: strings.Repeat("u", fileengine.MaxPayload)},
	}
	for name, op := range begins {
		if err := j.begin(op); !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("Begin with %s: err = %v, want journal.ErrInvalidOperation", name, err)
		}
	}
	completes := map[string]journal.Operation{
		"empty ID":        {State: journal.StateDone},
		"pending state":   {ID: "op-0001", State: journal.StatePending},
		"zero state":      {ID: "op-0001"},
		"negative status": {ID: "op-0001", State: journal.StateDone, Status: -1},
		"status 1000":     {ID: "op-0001", State: journal.StateDone, Status: 1000},
		"truncated body":  {ID: "op-0001", State: journal.StateDone, BodyTruncated: true, Body: []byte("x")},
		"summarized":      {ID: "op-0001", State: journal.StateDone, Summarized: true},
		"wrong key":       {ID: "op-0001", Key: "other", State: journal.StateDone},
		"body too large":  {ID: "op-0001", State: journal.StateDone, Body: make([]byte, fileengine.MaxPayload+1)},
		"time too late":   {ID: "op-0001", State: journal.StateDone, Completed: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for name, op := range completes {
		if err := j.complete(op); !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("Complete with %s: err = %v, want journal.ErrInvalidOperation", name, err)
		}
	}
	if err := j.begin(testIntent(1)); !errors.Is(err, journal.ErrOperationExists) {
		t.Errorf("second Begin of op-0001: err = %v, want journal.ErrOperationExists", err)
	}
	if err := j.complete(journal.Operation{ID: "never-begun", State: journal.StateDone}); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Errorf("Complete of unknown ID: err = %v, want journal.ErrNoSuchOperation", err)
	}
	if st := j.Stats(); st.Appends != 1 || st.Records != 1 {
		t.Fatalf("refused calls wrote records: %+v", st)
	}
	mustComplete(t, j, okOutcome)
}

// A journal that refuses every append says so before it looks at the
// operation: an invalid one gets journal.ErrClosed or ErrReadOnly too.
func TestJournalReportsItsStateBeforeAnInvalidOperation(t *testing.T) {
	path := journalPath(t)
	w := openTestJournal(t, path, quietOptions())
	mustBegin(t, w, testIntent(1))
	o := quietOptions()
	o.ReadOnly = true
	r := openTestJournal(t, path, o)
	mustClose(t, w)
	for _, c := range []struct {
		name string
		j    *Journal
		want error
	}{{"closed", w, journal.ErrClosed}, {"read-only", r, ErrReadOnly}} {
		if err := c.j.begin(journal.Operation{Key: "k"}); !errors.Is(err, c.want) || errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("%s: Begin without an ID: err = %v, want %v", c.name, err, c.want)
		}
		if err := c.j.complete(journal.Operation{ID: testIntent(1).ID}); !errors.Is(err, c.want) || errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("%s: Complete without a state: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestJournalFillsZeroTimesFromItsClock(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, journal.Operation{ID: "a", Key: "k", KeyTTL: time.Hour})
	mustComplete(t, j, journal.Operation{ID: "a", State: journal.StateRejected, Status: 400})
	want := []journal.Operation{{ID: "a", Key: "k", Created: testNow, KeyTTL: time.Hour, State: journal.StateRejected, Completed: testNow, Status: 400}}
	sameOperations(t, "Operations", journalhelp.MustList(j, journal.ListAll), want)
	mustClose(t, j)
	sameOperations(t, "after reopen", journalhelp.MustList(openTestJournal(t, path, quietOptions()), journal.ListAll), want)
}

// --- J7, creation ---------------------------------------------------------

func TestJournalTreatsAnEmptyFileAsNew(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, nil)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	if n := len(journalhelp.MustList(openTestJournal(t, path, quietOptions()), journal.ListAll)); n != 1 {
		t.Fatalf("reopened journal holds %d operations, want 1", n)
	}
}

func TestJournalOpenRefusesEmptyPathAndMissingDirectory(t *testing.T) {
	if _, err := Open("", Options{}); err == nil {
		t.Fatal("Open(\"\", Options{}) succeeded")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing", "j"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open in a missing directory: err = %v, want a not-exist error", err)
	}
}

// readFailer fails every ReadAt while armed: a journal file that can no
// longer be read.
type readFailer struct {
	fileengine.File
	armed *atomic.Bool
}

var errUnreadable = errors.New("unreadable")

func (f readFailer) ReadAt(p []byte, off int64) (int, error) {
	if f.armed.Load() {
		return 0, errUnreadable
	}
	return f.File.ReadAt(p, off)
}

// TestABeginThatFindsTheOperationSaysWhyItCannotReadIt: a Begin under a
// claim of an operation the journal holds already returns
// journal.ErrOperationExists, and, when reading back what the journal holds
// fails, that failure too.
func TestABeginThatFindsTheOperationSaysWhyItCannotReadIt(t *testing.T) {
	var armed atomic.Bool
	o := quietOptions()
	o.wrapFile = func(f fileengine.File) fileengine.File { return readFailer{File: f, armed: &armed} }
	j := openTestJournal(t, journalPath(t), o)
	ctx := t.Context()
	op := testIntent(1)
	c, err := j.Claim(ctx, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := c.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := c.Begin(ctx, op); !errors.Is(err, journal.ErrOperationExists) || !errors.Is(err, errUnreadable) {
		t.Fatalf("second Begin of %s with the file unreadable = %v; want journal.ErrOperationExists and the read's error", op.ID, err)
	}
}
