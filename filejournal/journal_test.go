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
	"testing"
	"time"

	"github.com/idemkit/idem/internal/fileengine"
)

// The public behaviour of FileJournal: what it keeps of an Operation, how
// it lists them, what it refuses. Its engine's own tests (framing,
// recovery, group commit, compaction, locking) are in internal/fileengine.

// testNow is the fixed clock of the journal tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC)

// quietOptions returns options with the fixed clock and no log output.
func quietOptions() JournalOptions {
	return JournalOptions{
		Now:    func() time.Time { return testNow },
		Logger: slog.New(slog.DiscardHandler),
	}
}

// testIntent returns the intent of operation i, with Created i seconds
// before testNow.
func testIntent(i int) Operation {
	url := fmt.Sprintf("https://api.example.test/charges?n=%d", i)
	body := fmt.Appendf(nil, `{"amount":%d}`, i)
	return Operation{
		ID:          fmt.Sprintf("op-%04d", i),
		Key:         fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Fingerprint: FingerprintOf(http.MethodPost, url, body),
		Method:      http.MethodPost,
		URL:         url,
		Created:     testNow.Add(-time.Duration(i) * time.Second),
		State:       StatePending,
	}
}

// testOutcome returns op completed as done with a response.
func testOutcome(op Operation, status int, body string) Operation {
	op.State = StateDone
	op.Completed = op.Created.Add(1500 * time.Millisecond)
	op.Status = status
	op.Header = http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a", "b"}}
	op.Body = []byte(body)
	return op
}

func journalPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "ops.journal")
}

func openTestJournal(t testing.TB, path string, o JournalOptions) *FileJournal {
	t.Helper()
	j, err := OpenJournalWithOptions(path, o)
	if err != nil {
		t.Fatalf("OpenJournalWithOptions(%s): %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mustBegin(t testing.TB, j *FileJournal, op Operation) {
	t.Helper()
	if err := j.begin(op); err != nil {
		t.Fatalf("Begin(%s): %v", op.ID, err)
	}
}

func mustComplete(t testing.TB, j *FileJournal, op Operation) {
	t.Helper()
	if err := j.complete(op); err != nil {
		t.Fatalf("Complete(%s): %v", op.ID, err)
	}
}

func mustClose(t testing.TB, j *FileJournal) {
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
func sameOperations(t testing.TB, what string, got, want []Operation) {
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
	done := testIntent(2)
	rejected := testIntent(3)
	truncated := testIntent(4)
	odd := Operation{ // empty method and URL, zero fingerprint, a time far from now
		ID:      strings.Repeat("x", fileengine.MaxIDLen),
		Key:     "k\x00with\xffbytes",
		Created: time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC),
	}
	for _, op := range []Operation{pending, done, rejected, truncated, odd} {
		mustBegin(t, j, op)
	}
	done = testOutcome(done, 201, `{"id":"ch_1"}`)
	mustComplete(t, j, done)
	rejected.State = StateRejected
	rejected.Completed = time.Date(2031, 5, 6, 7, 8, 9, 999999999, time.UTC)
	rejected.Status = 409
	rejected.Header = http.Header{"Content-Type": {"application/problem+json"}, "Empty": nil, "Retry-After": {"3"}}
	rejected.Body = []byte("{\"type\":\"https://x/insufficient-stock\"}\x00\xff")
	mustComplete(t, j, rejected)
	truncated.State = StateDone
	truncated.Completed = testNow
	truncated.Status = 200
	truncated.BodyTruncated = true
	mustComplete(t, j, truncated)
	odd.State = StateDone
	odd.Completed = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
	mustComplete(t, j, odd)

	// Ordered by Created.
	want := []Operation{odd, truncated, rejected, done, pending}

	sameOperations(t, "before reopen", list(j, ListAll), want)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", list(j2, ListAll), want)
	for _, op := range want {
		got, ok := lookup(j2, op.ID)
		if !ok || !reflect.DeepEqual(got, op) {
			t.Fatalf("Lookup(%s) = %+v, %v; want %+v", fileengine.QuoteID(op.ID), got, ok, op)
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

	got, _ := lookup(j, op.ID)
	got.Header.Set("X-Request-Id", "changed")
	got.Body[0] = 'Y'
	again, _ := lookup(j, op.ID)
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
	rejected.State = StateRejected
	mustComplete(t, j, rejected)
	want := []Operation{rejected, second}
	sameOperations(t, "as written", list(j, ListAll), want)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", list(j2, ListAll), want)
	if err := j2.Compact(); err != nil {
		t.Fatal(err)
	}
	sameOperations(t, "after compaction", list(j2, ListAll), want)
}

// J8.1, J8.2: the listings and lookups answer the same as written, after
// reopening (the index rebuilt by recovery) and after compaction (rebuilt
// by the rewrite).
// Clause: J8.3.
func TestJournalListings(t *testing.T) {
	o := quietOptions()
	o.KeyTTL = time.Hour
	path := journalPath(t)
	j := openTestJournal(t, path, o)
	fresh := testIntent(10)     // 10s old
	expired := testIntent(3600) // exactly KeyTTL old: expired
	young := testIntent(3599)   // one second short of KeyTTL
	done := testOutcome(testIntent(20), 200, "")
	rejected := testIntent(30)
	for _, op := range []Operation{fresh, expired, young, testIntent(20), rejected} {
		mustBegin(t, j, op)
	}
	mustComplete(t, j, done)
	rejected.State, rejected.Completed, rejected.Status = StateRejected, testNow, 422
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
		sameOperations(t, stage+": Pending", list(j, ListPending), []Operation{young, fresh})
		sameOperations(t, stage+": Expired", list(j, ListExpired), []Operation{expired})
		sameOperations(t, stage+": Completed", list(j, ListCompleted), []Operation{rejected, done})
		sameOperations(t, stage+": Operations", list(j, ListAll), []Operation{expired, young, rejected, done, fresh})
		for _, op := range []Operation{expired, young, rejected, done, fresh} {
			if got, ok := lookup(j, op.ID); !ok || !reflect.DeepEqual(got, op) {
				t.Fatalf("%s: Lookup(%s) = %+v, %v; want %+v", stage, op.ID, got, ok, op)
			}
		}
		if _, ok := lookup(j, "missing"); ok {
			t.Fatalf("%s: Lookup(missing) found an operation", stage)
		}
	}
	if !expired.Expired(testNow, time.Hour) || young.Expired(testNow, time.Hour) || done.Expired(testNow.Add(48*time.Hour), time.Hour) {
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
	sameOperations(t, "Operations", list(j, ListAll), []Operation{a, b})
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{StatePending: "pending", StateDone: "done", StateRejected: "rejected", 0: "State(0)", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}

// --- validation -----------------------------------------------------------

// Clause: J1.7.
func TestJournalRefusesInvalidOperations(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	mustBegin(t, j, testIntent(1))
	okOutcome := testOutcome(testIntent(1), 200, "ok")

	begins := map[string]Operation{
		"empty ID":         {Key: "k"},
		"long ID":          {ID: strings.Repeat("i", fileengine.MaxIDLen+1), Key: "k"},
		"empty key":        {ID: "x"},
		"long key":         {ID: "x", Key: strings.Repeat("k", fileengine.MaxKeyLen+1)},
		"done state":       {ID: "x", Key: "k", State: StateDone},
		"invalid state":    {ID: "x", Key: "k", State: 7},
		"outcome set":      {ID: "x", Key: "k", Status: 200},
		"body set":         {ID: "x", Key: "k", Body: []byte{}},
		"time too early":   {ID: "x", Key: "k", Created: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
		"time too late":    {ID: "x", Key: "k", Created: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"record too large": {ID: "x", Key: "k", Method: "POST", URL: strings.Repeat("u", fileengine.MaxPayload)},
	}
	for name, op := range begins {
		if err := j.begin(op); !errors.Is(err, ErrInvalidOperation) {
			t.Errorf("Begin with %s: err = %v, want ErrInvalidOperation", name, err)
		}
	}
	completes := map[string]Operation{
		"empty ID":        {State: StateDone},
		"pending state":   {ID: "op-0001", State: StatePending},
		"zero state":      {ID: "op-0001"},
		"negative status": {ID: "op-0001", State: StateDone, Status: -1},
		"status 1000":     {ID: "op-0001", State: StateDone, Status: 1000},
		"truncated body":  {ID: "op-0001", State: StateDone, BodyTruncated: true, Body: []byte("x")},
		"summarized":      {ID: "op-0001", State: StateDone, Summarized: true},
		"wrong key":       {ID: "op-0001", Key: "other", State: StateDone},
		"body too large":  {ID: "op-0001", State: StateDone, Body: make([]byte, fileengine.MaxPayload+1)},
		"time too late":   {ID: "op-0001", State: StateDone, Completed: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for name, op := range completes {
		if err := j.complete(op); !errors.Is(err, ErrInvalidOperation) {
			t.Errorf("Complete with %s: err = %v, want ErrInvalidOperation", name, err)
		}
	}
	if err := j.begin(testIntent(1)); !errors.Is(err, ErrOperationExists) {
		t.Errorf("second Begin of op-0001: err = %v, want ErrOperationExists", err)
	}
	if err := j.complete(Operation{ID: "never-begun", State: StateDone}); !errors.Is(err, ErrNoSuchOperation) {
		t.Errorf("Complete of unknown ID: err = %v, want ErrNoSuchOperation", err)
	}
	if st := j.Stats(); st.Appends != 1 || st.Records != 1 {
		t.Fatalf("refused calls wrote records: %+v", st)
	}
	mustComplete(t, j, okOutcome)
}

// A journal that refuses every append says so before it looks at the
// operation: an invalid one gets ErrClosed or ErrReadOnly too.
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
		j    *FileJournal
		want error
	}{{"closed", w, ErrClosed}, {"read-only", r, ErrReadOnly}} {
		if err := c.j.begin(Operation{Key: "k"}); !errors.Is(err, c.want) || errors.Is(err, ErrInvalidOperation) {
			t.Errorf("%s: Begin without an ID: err = %v, want %v", c.name, err, c.want)
		}
		if err := c.j.complete(Operation{ID: testIntent(1).ID}); !errors.Is(err, c.want) || errors.Is(err, ErrInvalidOperation) {
			t.Errorf("%s: Complete without a state: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestJournalFillsZeroTimesFromItsClock(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, Operation{ID: "a", Key: "k"})
	mustComplete(t, j, Operation{ID: "a", State: StateRejected, Status: 400})
	want := []Operation{{ID: "a", Key: "k", Created: testNow, State: StateRejected, Completed: testNow, Status: 400}}
	sameOperations(t, "Operations", list(j, ListAll), want)
	mustClose(t, j)
	sameOperations(t, "after reopen", list(openTestJournal(t, path, quietOptions()), ListAll), want)
}

// --- J7, creation ---------------------------------------------------------

func TestJournalTreatsAnEmptyFileAsNew(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, nil)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	if n := len(list(openTestJournal(t, path, quietOptions()), ListAll)); n != 1 {
		t.Fatalf("reopened journal holds %d operations, want 1", n)
	}
}

func TestJournalOpenRefusesEmptyPathAndMissingDirectory(t *testing.T) {
	if _, err := OpenJournal(""); err == nil {
		t.Fatal("OpenJournal(\"\") succeeded")
	}
	if _, err := OpenJournal(filepath.Join(t.TempDir(), "missing", "j")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenJournal in a missing directory: err = %v, want a not-exist error", err)
	}
}
