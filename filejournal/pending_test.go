package filejournal

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

// Clause: J8.4. Pending counts what List(ctx, ListPending) returns, each
// operation judged by its own key lifetime: one expired by a lifetime
// shorter than the default is not counted, nor done, rejected or expired
// ones; as written, after reopening, when the clock moves, and after Close.
func TestJournalPendingCountsThePendingListing(t *testing.T) {
	now := testNow
	o := quietOptions()
	o.Now = func() time.Time { return now }
	path := journalPath(t)
	j := openTestJournal(t, path, o)
	short := func(i int) journal.Operation { op := testIntent(i); op.KeyTTL = 30 * time.Minute; return op }
	ops := []journal.Operation{
		testIntent(10),    // pending, 24h lifetime
		testIntent(20),    // pending, 24h lifetime
		short(3600),       // an hour old: expired by its own lifetime
		short(60),         // a minute old: pending
		testIntent(86400), // exactly its lifetime old: expired
		testIntent(30),    // completed below
		testIntent(40),    // rejected below
	}
	for _, op := range ops {
		mustBegin(t, j, op)
	}
	mustComplete(t, j, testOutcome(ops[5], 200, "ok"))
	rejected := ops[6]
	rejected.State, rejected.Completed, rejected.Status = journal.StateRejected, now, 422
	mustComplete(t, j, rejected)

	check := func(stage string, want int) {
		t.Helper()
		n, err := j.Pending(context.Background())
		if err != nil {
			t.Fatalf("%s: Pending: %v", stage, err)
		}
		listed := journalhelp.MustList(j, journal.ListPending)
		if n != want || len(listed) != want {
			t.Fatalf("%s: Pending %d, listed %d, want %d", stage, n, len(listed), want)
		}
	}
	check("as written", 3)
	mustClose(t, j)
	j = openTestJournal(t, path, o)
	check("after reopening", 3)
	now = now.Add(30 * time.Minute) // the short-lived pending one expires
	check("half an hour later", 2)
	mustClose(t, j)
	if n, err := j.Pending(context.Background()); n != 2 || err != nil {
		t.Fatalf("Pending after Close: %d, %v; want 2, nil", n, err)
	}
}

// Clause: J7.8. With MustExist, Open refuses a missing journal with an
// error matching fs.ErrNotExist, in filejournal's words, and creates
// nothing: no journal, no lock file, no directory. An existing journal
// opens as without it.
func TestJournalMustExistCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	o := quietOptions()
	o.MustExist = true
	for _, path := range []string{
		filepath.Join(dir, "ops.journal"),
		filepath.Join(dir, "missing", "ops.journal"),
	} {
		j, err := Open(path, o)
		if !errors.Is(err, fs.ErrNotExist) || j != nil {
			t.Fatalf("Open(%s) with MustExist: %v, %v; want an error matching fs.ErrNotExist", path, j, err)
		}
		if !strings.HasPrefix(err.Error(), "filejournal: ") {
			t.Errorf("error %q does not begin with the package's name", err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("Open(%s) with MustExist created %v", path, names)
		}
	}

	path := filepath.Join(dir, "ops.journal")
	first := openTestJournal(t, path, quietOptions()) // the first start
	mustBegin(t, first, testIntent(1))
	mustClose(t, first)
	j := openTestJournal(t, path, o)
	got := journalhelp.MustList(j, journal.ListAll)
	if !slices.EqualFunc(got, []journal.Operation{testIntent(1)}, func(a, b journal.Operation) bool { return a.ID == b.ID && a.Key == b.Key }) {
		t.Fatalf("the existing journal opened with MustExist holds %+v, want op-0001", got)
	}
}
