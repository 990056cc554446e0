package fileengine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// --- J7, creation ---------------------------------------------------------

// Clause: J7.1.
func TestJournalCreateWritesAndSyncsHeaderAndDirectory(t *testing.T) {
	path := journalPath(t)
	var synced []string
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			synced = append(synced, fileName(f))
			return f.Sync()
		}}
	}
	var dirSynced []string
	o.syncDir = func(dir string) error {
		dirSynced = append(dirSynced, dir)
		return syncDir(dir)
	}
	j := openTestJournal(t, path, o)
	if got := readFile(t, path); !bytes.Equal(got, appendFileHeader(nil)) {
		t.Fatalf("new journal is %x, want the file header %x", got, appendFileHeader(nil))
	}
	if want := []string{"ops.journal.compact"}; !reflect.DeepEqual(synced, want) {
		t.Fatalf("files fsync'd on create = %q, want %q", synced, want)
	}
	if want := []string{filepath.Dir(path)}; !reflect.DeepEqual(dirSynced, want) {
		t.Fatalf("directories fsync'd on create = %q, want %q", dirSynced, want)
	}
	if st := j.Stats(); st.Syncs != 1 || st.DirSyncs != 1 || st.FileSize != fileHeaderSize {
		t.Fatalf("stats after create = %+v", st)
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left after create: %v", err)
	}
}

// --- J7, compaction -------------------------------------------------------

// compactionFixture fills a journal at path with one operation of each
// kind and returns what compaction at testNow keeps with KeyTTL 24h, in
// List order: the live set whole, and summaries of the operations completed
// KeyTTL ago or more.
func compactionFixture(t *testing.T, j *Journal) (kept []Record) {
	summaries, live := compactionSets(t, j)
	return append(summaries, live...)
}

// compactionSets fills the journal as compactionFixture does and returns
// the summaries compaction keeps and the live set it keeps whole.
func compactionSets(t *testing.T, j *Journal) (summaries, live []Record) {
	fresh := testIntent(10)
	expired := testIntent(30 * 3600) // created 30h ago, never completed
	recent := testIntent(20)
	old := testIntent(40 * 3600)
	oldRejected := testIntent(50 * 3600)
	for _, in := range []Intent{fresh, expired, recent, old, oldRejected} {
		mustBegin(t, j, in)
	}
	recentDone := testOutcome(recent, 200, "recent")
	recentDone.Completed = testNow.Add(-time.Hour)
	mustComplete(t, j, recentDone)
	oldDone := testOutcome(old, 200, "old")
	oldDone.Completed = testNow.Add(-DefaultKeyTTL) // exactly KeyTTL ago: dropped
	mustComplete(t, j, oldDone)
	rejection := Completion{ID: oldRejected.ID, Key: oldRejected.Key, State: Rejected, Completed: testNow.Add(-25 * time.Hour), Status: 400}
	mustComplete(t, j, rejection)
	// A summary keeps all but the response header and body, marked as
	// dropped, so that reading the body says why it is missing. The
	// rejection recorded neither, so its summary is the outcome unchanged.
	oldDone.Header, oldDone.Body, oldDone.Flags = nil, nil, FlagBodyTruncated|FlagHeaderTruncated|FlagSummarized
	return []Record{recordOf(oldRejected, rejection), recordOf(old, oldDone)},
		[]Record{recordOf(expired), recordOf(recent, recentDone), recordOf(fresh)}
}

// Clauses: C3.4, J7.4, J7.5.
func TestJournalCompactKeepsExactlyTheLiveSet(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	live := compactionFixture(t, j)
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	sameRecords(t, "after Compact", records(j), live)
	st := j.Stats()
	size := int64(len(readFile(t, path)))
	if st.Compactions != 1 || st.Records != 8 || st.FileSize != size || st.LiveBytes != size-fileHeaderSize || st.Live != 5 {
		t.Fatalf("stats after Compact = %+v (file is %d bytes)", st, size)
	}
	// Appends continue in the new file.
	mustBegin(t, j, testIntent(5))
	mustClose(t, j)
	j2 := openTestJournal(t, path, quietOptions())
	sameRecords(t, "after reopen", records(j2), append(live, recordOf(testIntent(5))))
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left after compaction: %v", err)
	}
}

// Clause: J7.7.
func TestJournalCompactsOnItsOwnWhenGarbageOutweighsLiveData(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.CompactMinSize = 4096
	o.ForgetAfter = 36 * time.Hour // forget, rather than summarize, what this test makes garbage
	j := openTestJournal(t, path, o)
	keep := testIntent(1)
	mustBegin(t, j, keep)
	// Operations completed two days ago are garbage as soon as written.
	// Stop at the first append that compacted, and know what it kept.
	var want []Record
	for i := 2; want == nil; i++ {
		in := testIntent(i)
		mustBegin(t, j, in)
		if j.Stats().Compactions == 1 {
			want = []Record{recordOf(in), recordOf(keep)} // the new intent is pending
			break
		}
		c := testOutcome(in, 200, strings.Repeat("z", 100))
		c.Completed = testNow.Add(-48 * time.Hour)
		mustComplete(t, j, c)
		if j.Stats().Compactions == 1 {
			want = []Record{recordOf(keep)}
		}
		if i > 1000 {
			t.Fatal("no automatic compaction after 1000 operations")
		}
	}
	sameRecords(t, "after automatic compaction", records(j), want)
	if st := j.Stats(); st.FileSize >= o.CompactMinSize || st.Records != int64(len(want)) {
		t.Fatalf("after automatic compaction: stats = %+v", st)
	}
	mustClose(t, j)
	sameRecords(t, "after reopen", records(openTestJournal(t, path, o)), want)
}

// Clause: J7.7.
func TestJournalAutomaticCompactionRespectsItsMinimumAndSwitch(t *testing.T) {
	for _, minSize := range []int64{-1, 1 << 30} {
		o := quietOptions()
		o.CompactMinSize = minSize
		j := openTestJournal(t, journalPath(t), o)
		for i := range 50 {
			in := testIntent(i)
			mustBegin(t, j, in)
			c := testOutcome(in, 200, "x")
			c.Completed = testNow.Add(-48 * time.Hour)
			mustComplete(t, j, c)
		}
		if st := j.Stats(); st.Compactions != 0 || st.Operations != 50 {
			t.Fatalf("CompactMinSize %d: stats = %+v; want no compaction", minSize, st)
		}
	}
}

// Clause: J7.2.
func TestJournalSurvivesACrashAroundTheCompactionRename(t *testing.T) {
	path := journalPath(t)
	var snapshot []byte // the compaction file as a crash before its rename leaves it
	crash := false      // creating the journal goes through the same steps
	o := quietOptions()
	o.WrapFile = func(f File) File {
		if fileName(f) != filepath.Base(path)+compactSuffix {
			return f
		}
		return &hookFile{File: f, close: func(f File) error {
			// Closing comes after the fsync and before the rename.
			b, err := contents(f)
			if err != nil {
				t.Error(err)
			}
			snapshot = b
			f.Close()
			if crash {
				return errInjected
			}
			return nil
		}}
	}
	j := openTestJournal(t, path, o)
	live := compactionFixture(t, j)
	all := records(j)
	journalBefore := readFile(t, path)

	crash = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failure before the rename: err = %v, want the injected error", err)
	}
	// The journal is untouched and still in use.
	if !bytes.Equal(readFile(t, path), journalBefore) {
		t.Fatal("a compaction that failed before its rename changed the journal")
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed compaction left its file: %v", err)
	}
	sameRecords(t, "after the failed compaction", records(j), all)
	mustBegin(t, j, testIntent(7))
	all = records(j)
	mustClose(t, j)

	// Crash before the rename: the compaction file is there beside the
	// intact journal. Opening removes it and keeps every operation.
	writeFile(t, path+compactSuffix, snapshot)
	j2 := openTestJournal(t, path, quietOptions())
	sameRecords(t, "crash before rename", records(j2), all)
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open left the compaction file: %v", err)
	}
	mustClose(t, j2)

	// Crash after the rename: the compaction file is the journal.
	writeFile(t, path, snapshot)
	j3 := openTestJournal(t, path, quietOptions())
	sameRecords(t, "crash after rename", records(j3), live)
}

// Clause: J7.3.
func TestJournalDirectoryFsyncFailureAfterRenameLatches(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	fail := false
	o.syncDir = func(dir string) error {
		if fail {
			return errInjected
		}
		return syncDir(dir)
	}
	j := openTestJournal(t, path, o)
	live := compactionFixture(t, j)
	fail = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failing directory fsync: err = %v, want the injected error", err)
	}
	if err := j.Begin(testIntent(8)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin after the failure: err = %v, want the injected error", err)
	}
	// The index is the new file's, and its records are read from it.
	sameRecords(t, "after the failure", records(j), live)
	j.Close()
	sameRecords(t, "reopened", records(openTestJournal(t, path, quietOptions())), live)
}

func TestJournalFailedRenameLeavesTheJournalInUse(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	fail := false
	o.rename = func(from, to string) error {
		if fail {
			return errInjected
		}
		return os.Rename(from, to)
	}
	j := openTestJournal(t, path, o)
	compactionFixture(t, j)
	all := records(j)
	before := readFile(t, path)
	fail = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failing rename: err = %v, want the injected error", err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("a failed rename changed the journal")
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed rename left the compaction file: %v", err)
	}
	mustBegin(t, j, testIntent(6))
	mustClose(t, j)
	sameRecords(t, "reopened", records(openTestJournal(t, path, quietOptions())), append(all[:len(all):len(all)], recordOf(testIntent(6))))
}

// Clause: J7.2.
func TestJournalCompactionTempFsyncFailureDoesNotLatch(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	failTemp := false
	o.WrapFile = func(f File) File {
		if fileName(f) != filepath.Base(path)+compactSuffix {
			return f
		}
		return &hookFile{File: f, sync: func(f File) error {
			if failTemp {
				return errInjected
			}
			return f.Sync()
		}}
	}
	j := openTestJournal(t, path, o)
	compactionFixture(t, j)
	failTemp = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact: err = %v, want the injected error", err)
	}
	mustBegin(t, j, testIntent(9))
	failTemp = false
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact after a failed one: %v", err)
	}
	mustClose(t, j)
	if n := len(records(openTestJournal(t, path, quietOptions()))); n != 6 {
		t.Fatalf("after compaction: %d operations, want 6 (3 live, 2 summaries, 1 new)", n)
	}
}

// ForgetAfter bounds how long completed operations are remembered: past
// it, compaction drops them, summaries included.
// Clause: J7.6.
func TestJournalForgetAfterDropsOldCompletedOperations(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.ForgetAfter = 25 * time.Hour
	j := openTestJournal(t, path, o)
	summaries, live := compactionSets(t, j)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	// The rejection completed 25h ago is forgotten; the one 24h ago is
	// summarized.
	want := append([]Record{summaries[1]}, live...)
	sameRecords(t, "after Compact", records(j), want)
	mustClose(t, j)
	sameRecords(t, "after reopen", records(openTestJournal(t, path, o)), want)
}

// A summary is compacted once: compacting again keeps it as it is.
// Clauses: C3.4, J7.5.
func TestJournalSummariesAreStable(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	kept := compactionFixture(t, j)
	for i := range 3 {
		if err := j.Compact(); err != nil {
			t.Fatal(err)
		}
		sameRecords(t, fmt.Sprint("after compaction ", i+1), records(j), kept)
	}
	if st := j.Stats(); st.LiveBytes != st.FileSize-fileHeaderSize {
		t.Fatalf("stats = %+v: live bytes should be the whole file", st)
	}
}

// TestJournalDirectoryFsyncFailureKeepsTheDurableOperations: the failure
// forgets only the operations whose intent no fsync covered, judged by the
// new file's offsets. Here every intent was durable before the compaction;
// only a completion was not, and the compaction moves the second intent
// past where the old file's durable intents ended.
// Clause: J6.5.
func TestJournalDirectoryFsyncFailureKeepsTheDurableOperations(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	fail := false
	o.syncDir = func(dir string) error {
		if fail {
			return errInjected
		}
		return syncDir(dir)
	}
	j := openTestJournal(t, path, o)
	a, b := testIntent(0), testIntent(1)
	mustBegin(t, j, a)
	mustBegin(t, j, b)
	mustComplete(t, j, bigOutcome(a, 64<<10)) // written, not yet fsynced
	fail = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failing directory fsync: err = %v, want the injected error", err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if _, ok := j.LookupMeta(id); !ok {
			t.Errorf("after the failure, operation %s, whose intent was durable, is gone from the index", id)
		}
	}
	j.Close()
}

// TestJournalDirectoryFsyncFailureForgetsTheIntentAtTheSyncedEnd: J6.5 at
// the exact byte. The first record after Open starts exactly where the
// last fsync ended, so it is not durable yet. Its Begin triggers a
// compaction whose directory fsync fails: the Begin fails, and the index
// forgets that operation, judged by its offset in the new file, while the
// durable one stays.
// Clause: J6.5.
func TestJournalDirectoryFsyncFailureForgetsTheIntentAtTheSyncedEnd(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.CompactMinSize = -1
	j := openTestJournal(t, path, o)
	a := testIntent(0)
	mustBegin(t, j, a)
	for range 3 { // the first two outcomes become garbage
		mustComplete(t, j, bigOutcome(a, 64<<10))
	}
	mustClose(t, j)

	o.CompactMinSize = 1
	fail := false
	o.syncDir = func(dir string) error {
		if fail {
			return errInjected
		}
		return syncDir(dir)
	}
	j = openTestJournal(t, path, o)
	fail = true
	b := testIntent(1)
	if err := j.Begin(b); !errors.Is(err, errInjected) {
		t.Fatalf("Begin(%s) during a compaction whose directory fsync fails: err = %v, want the injected error", b.ID, err)
	}
	if st := j.Stats(); st.DirSyncs != 1 {
		t.Fatalf("stats = %+v, want the one directory fsync of the compaction the Begin ran", st)
	}
	if m, ok := j.LookupMeta(b.ID); ok {
		t.Fatalf("operation %s, whose intent no fsync covered, is still in the index: %+v", b.ID, m)
	}
	if _, ok := j.LookupMeta(a.ID); !ok {
		t.Fatalf("operation %s, whose intent was durable, is gone from the index", a.ID)
	}
}
