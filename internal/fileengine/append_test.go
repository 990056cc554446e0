package fileengine

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/leakcheck"
)

// --- J5, group commit -----------------------------------------------------

// Clause: J5.1.
func TestJournalConcurrentBeginsShareFsyncs(t *testing.T) {
	defer leakcheck.Check(t)()
	const appenders = 64
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))

	// The first fsync blocks until every appender has written its record,
	// so they cannot each have their own: every one of them arrives while
	// an fsync runs.
	o := quietOptions()
	var firstStarted <-chan struct{}
	o.WrapFile, firstStarted = syncAfterWrites(appenders, fsync)
	j := openTestJournal(t, path, o)
	errs := make(chan error, appenders)
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() { errs <- j.Begin(testIntent(i)) })
		if i == 0 {
			// The first Begin's fsync fixes what it covers before the
			// others write: otherwise all of them may write during its
			// yield and share that one fsync.
			<-firstStarted
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
	}
	// One fsync for the first record, one shared by the other 63.
	if st := j.Stats(); st.Syncs != 2 || st.Appends != appenders {
		t.Fatalf("stats = %+v; want 2 fsyncs for %d appends", st, appenders)
	}
	mustClose(t, j)
	if n := len(records(openTestJournal(t, path, quietOptions()))); n != appenders {
		t.Fatalf("reopened journal holds %d operations, want %d", n, appenders)
	}
}

// An fsync's end wakes the Begins it covered and one it did not, which
// leads the next fsync; the rest stay parked until that one covers them.
// Clause: J5.5.
func TestJournalFsyncWakesWhomItCoveredAndOneLeader(t *testing.T) {
	defer leakcheck.Check(t)()
	const appenders = 32
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))

	inSecond, releaseSecond := make(chan struct{}), make(chan struct{})
	var groups []int
	o := quietOptions()
	o.OnSync = func(_ time.Duration, records int, _ error) { groups = append(groups, records) }
	var firstStarted <-chan struct{}
	o.WrapFile, firstStarted = syncAfterWrites(appenders, func(call int32, f File) error {
		if call == 2 {
			close(inSecond)
			<-releaseSecond
		}
		return f.Sync()
	})
	j := openTestJournal(t, path, o)
	var returned atomic.Int32
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			if err := j.Begin(testIntent(i)); err != nil {
				t.Errorf("Begin: %v", err)
			}
			returned.Add(1)
		})
		if i == 0 {
			// The first Begin's fsync fixes what it covers before the
			// others write: otherwise all of them may write during its
			// yield and share one fsync, and there is no second.
			<-firstStarted
		}
	}
	<-inSecond
	// The first fsync's records are durable and their Begins return; the
	// leader of the second is in its fsync; every other Begin is parked.
	first := groups[0]
	if first < 1 || first >= appenders {
		t.Fatalf("the first fsync covered %d records, want 1 to %d", first, appenders-1)
	}
	for returned.Load() < int32(first) {
		runtime.Gosched()
	}
	j.mu.Lock()
	parked := len(j.waiters)
	j.mu.Unlock()
	if want := appenders - first - 1; parked != want {
		t.Fatalf("during the second fsync %d Begins are parked, want %d (%d covered by the first, 1 leading)", parked, want, first)
	}
	if got := returned.Load(); got != int32(first) {
		t.Fatalf("%d Begins returned before the second fsync ended, want the %d the first covered", got, first)
	}
	close(releaseSecond)
	wg.Wait()
	if st := j.Stats(); st.Syncs != 2 || len(groups) != 2 || groups[0]+groups[1] != appenders {
		t.Fatalf("stats = %+v, groups %v; want 2 fsyncs covering %d records", st, groups, appenders)
	}
	mustClose(t, j)
}

// syncAfterWrites returns an Options.WrapFile whose first fsync waits
// until n records have been written; every fsync then does sync(call, f),
// call being its number from 1. The channel is closed when the first
// fsync starts to wait: the records it covers are fixed by then.
func syncAfterWrites(n int32, sync func(call int32, f File) error) (func(File) File, <-chan struct{}) {
	var written, syncCalls atomic.Int32
	allWritten, firstStarted := make(chan struct{}), make(chan struct{})
	return func(f File) File {
		return &hookFile{
			File: f,
			write: func(f File, p []byte) (int, error) {
				m, err := f.Write(p)
				if written.Add(1) == n {
					close(allWritten)
				}
				return m, err
			},
			sync: func(f File) error {
				call := syncCalls.Add(1)
				if call == 1 {
					close(firstStarted)
					<-allWritten
				}
				return sync(call, f)
			},
		}
	}, firstStarted
}

// fsync is the sync of syncAfterWrites that only syncs.
func fsync(_ int32, f File) error { return f.Sync() }

// Clauses: C2.1, C3.6.
func TestJournalBeginWaitsForFsyncAndCompleteDoesNot(t *testing.T) {
	defer leakcheck.Check(t)()
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	inSync := make(chan struct{}, 1)
	release := make(chan struct{})
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			inSync <- struct{}{}
			<-release
			return f.Sync()
		}}
	}
	j := openTestJournal(t, path, o)
	began := make(chan error, 1)
	go func() { began <- j.Begin(testIntent(1)) }()
	select {
	case <-inSync:
	case err := <-began:
		t.Fatalf("Begin returned (%v) without an fsync", err)
	}
	select {
	case err := <-began:
		t.Fatalf("Begin returned (%v) while its fsync was still running", err)
	default:
	}
	close(release)
	if err := <-began; err != nil {
		t.Fatal(err)
	}

	// Complete writes and returns without an fsync.
	before := j.Stats().Syncs
	mustComplete(t, j, testOutcome(testIntent(1), 200, "ok"))
	if st := j.Stats(); st.Syncs != before || st.Appends != 2 {
		t.Fatalf("Complete: stats = %+v; want no new fsync and 2 appends", st)
	}
	// Close makes it durable with one more fsync.
	mustClose(t, j)
	if st := j.Stats(); st.Syncs != before+1 {
		t.Fatalf("Close: %d fsyncs, want %d", st.Syncs, before+1)
	}
}

// Clause: J5.2.
func TestJournalSerialBeginsEachPayOneFsync(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	base := j.Stats().Syncs
	for i := range 3 {
		mustBegin(t, j, testIntent(i))
	}
	if got := j.Stats().Syncs - base; got != 3 {
		t.Fatalf("3 serial Begins made %d fsyncs, want 3", got)
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := j.Stats().Syncs - base; got != 3 {
		t.Fatalf("Sync with nothing new made an fsync (%d in all)", got)
	}
}

// --- J6, latched failures -------------------------------------------------

// Clauses: C2.2, J6.1, J6.2, J6.5.
func TestJournalFsyncFailureLatches(t *testing.T) {
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	var syncCalls atomic.Int32
	failing := false
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			if !failing {
				return f.Sync()
			}
			syncCalls.Add(1)
			return errInjected
		}}
	}
	j, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	mustBegin(t, j, testIntent(0))
	failing = true
	if err := j.Begin(testIntent(1)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin with a failing fsync: err = %v, want the injected error", err)
	}
	// The failed intent may never reach the disk: it must not be found as
	// pending, or it would be sent. The one synced before stays.
	if op, ok := lookup(t, j, testIntent(1).ID); ok {
		t.Fatalf("Lookup finds the operation whose intent fsync failed: %+v", op)
	}
	sameRecords(t, "after the failure", records(j), []Record{recordOf(testIntent(0))})
	for name, err := range map[string]error{
		"Begin":    j.Begin(testIntent(2)),
		"Complete": j.Complete(testOutcome(testIntent(1), 200, "")),
		"Sync":     j.Sync(),
		"Compact":  j.Compact(),
	} {
		if !errors.Is(err, errInjected) {
			t.Errorf("%s after the failure: err = %v, want the injected error", name, err)
		}
	}
	if err := j.Close(); !errors.Is(err, errInjected) {
		t.Errorf("Close after the failure: err = %v, want the injected error", err)
	}
	if n := syncCalls.Load(); n != 1 {
		t.Fatalf("fsync was called %d times on the failed file, want exactly 1", n)
	}
	if st := j.Stats(); st.Appends != 2 {
		t.Fatalf("appends: %d, want the two before the failure", st.Appends)
	}
	// Close released the lock; the file is readable.
	j2 := openTestJournal(t, path, quietOptions())
	mustBegin(t, j2, testIntent(3))
}

// Clause: J6.3.
func TestJournalFsyncFailureForgetsEveryIntentItCovered(t *testing.T) {
	defer leakcheck.Check(t)()
	const appenders = 8
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	// The first fsync waits for every appender's record, then fails: one
	// of them led it, the others were waiting for it or for the next.
	o := quietOptions()
	o.WrapFile, _ = syncAfterWrites(appenders, func(int32, File) error { return errInjected })
	j := openTestJournal(t, path, o)
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			if err := j.Begin(testIntent(i)); !errors.Is(err, errInjected) {
				t.Errorf("Begin(%d): err = %v, want the injected error", i, err)
			}
		})
	}
	wg.Wait()
	if ops := records(j); len(ops) != 0 {
		t.Fatalf("operations whose intent fsync failed are in the index: %+v", ops)
	}
	if st := j.Stats(); st.Syncs != 1 {
		t.Fatalf("%d fsyncs, want the one that failed", st.Syncs)
	}
}

// J6.3: a write that fails while a leader's fsync runs latches, and
// forgets the operations that fsync was to cover; their Begin, the
// leader's included, returns the failure even if that fsync then succeeds:
// a Begin that returned nil is in the index, one that failed is not. The
// intent its fsync did cover is in the file, and the next open resumes it.
// Clause: C2.2.
func TestJournalWriteFailureDuringALeadersFsyncFailsItsBegin(t *testing.T) {
	defer leakcheck.Check(t)()
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	inSync, release := make(chan struct{}), make(chan struct{})
	var failWrites atomic.Bool
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f,
			write: func(f File, p []byte) (int, error) {
				if failWrites.Load() {
					return 0, errInjected
				}
				return f.Write(p)
			},
			sync: func(f File) error {
				close(inSync) // only the leader's fsync: the test ends before another
				<-release
				return f.Sync()
			}}
	}
	j, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	a, b := testIntent(1), testIntent(2)
	leader := make(chan error, 1)
	go func() { leader <- j.Begin(a) }()
	<-inSync
	failWrites.Store(true)
	if err := j.Begin(b); !errors.Is(err, errInjected) {
		t.Fatalf("Begin(%s) with a failing write: err = %v, want the injected error", b.ID, err)
	}
	close(release)
	errA := <-leader
	_, found := lookup(t, j, a.ID)
	if !errors.Is(errA, errInjected) || found {
		t.Fatalf("the leader's Begin(%s) = %v, and Lookup finds it: %v; want the injected error, and not found", a.ID, errA, found)
	}
	if err := j.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close: %v, want the injected error", err)
	}
	sameRecords(t, "reopened", records(openTestJournal(t, path, quietOptions())), []Record{recordOf(a)})
}

// Clause: J6.4.
func TestJournalShortWriteLatchesAndLeavesATornTail(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	good := int64(len(readFile(t, path)))

	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, write: func(f File, p []byte) (int, error) {
			n, _ := f.Write(p[:len(p)/2])
			return n, errInjected
		}}
	}
	j, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Begin(testIntent(2)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin with a short write: err = %v, want the injected error", err)
	}
	if _, ok := lookup(t, j, testIntent(2).ID); ok {
		t.Fatal("an operation whose intent was not written is in the index")
	}
	if err := j.Complete(testOutcome(testIntent(1), 200, "")); !errors.Is(err, errInjected) {
		t.Fatalf("Complete after a short write: err = %v, want the injected error", err)
	}
	j.Close()

	// The half record is a torn tail: cut, and appends after it reopen.
	j2 := openTestJournal(t, path, quietOptions())
	if st := j2.Stats(); st.FileSize != good || st.Truncated == 0 {
		t.Fatalf("stats after reopen = %+v; want the half record (from %d) cut", st, good)
	}
	mustBegin(t, j2, testIntent(3))
	mustClose(t, j2)
	sameRecords(t, "after reopen", records(openTestJournal(t, path, quietOptions())), []Record{recordOf(testIntent(3)), recordOf(testIntent(1))})
}

// Complete checks a key against the sum the index keeps: the operation's
// own key reads nothing back, another is refused with the key the intent
// holds. The sum is kept by Begin, by recovery and by compaction.
// Clause: J9.2.
func TestJournalCompleteChecksTheKeyWithoutReadingTheIntent(t *testing.T) {
	path := journalPath(t)
	var reads atomic.Int32
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, readAt: func(f File, p []byte, off int64) (int, error) {
			reads.Add(1)
			return f.ReadAt(p, off)
		}}
	}
	check := func(j *Journal, i int, how string) {
		t.Helper()
		in := testIntent(i)
		wrong := testOutcome(in, 200, "ok")
		wrong.Key = "00000000-0000-4000-8000-999999999999"
		reads.Store(0)
		err := j.Complete(wrong)
		if !errors.Is(err, ErrInvalidOperation) || !strings.Contains(err.Error(), in.Key) {
			t.Fatalf("%s: Complete under another key: %v, want ErrInvalidOperation naming %s", how, err, in.Key)
		}
		if reads.Load() == 0 {
			t.Fatalf("%s: another key was refused without reading the intent's key", how)
		}
		reads.Store(0)
		mustComplete(t, j, testOutcome(in, 200, "ok"))
		if n := reads.Load(); n != 0 {
			t.Fatalf("%s: Complete under the operation's key made %d reads, want 0", how, n)
		}
	}
	j := openTestJournal(t, path, o)
	for i := range 3 {
		mustBegin(t, j, testIntent(i))
	}
	check(j, 0, "after Begin")
	mustClose(t, j)
	j = openTestJournal(t, path, o)
	check(j, 1, "after reopening")
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	check(j, 2, "after compaction")
	mustClose(t, j)
}

// J5.3: the leader of an fsync yields, its lock released, before it fixes
// what the fsync covers: a Begin that writes its record during the yield
// shares the leader's fsync instead of waiting for another.
func TestJournalLeaderYieldsBeforeItsFsyncAndCoversWhatWasWrittenMeanwhile(t *testing.T) {
	defer leakcheck.Check(t)()
	var notify atomic.Pointer[chan struct{}] // closed after the next write
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, write: func(f File, p []byte) (int, error) {
			n, err := f.Write(p)
			if ch := notify.Swap(nil); ch != nil {
				close(*ch)
			}
			return n, err
		}}
	}
	j := openTestJournal(t, journalPath(t), o)
	a, b := testIntent(1), testIntent(2)
	var armed atomic.Bool
	armed.Store(true)
	bDone := make(chan error, 1)
	saved := yield
	t.Cleanup(func() { yield = saved })
	yield = func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		// The leader (a) yields: b runs, writes its record and parks.
		wrote := make(chan struct{})
		notify.Store(&wrote)
		go func() { bDone <- j.Begin(b) }()
		<-wrote
	}
	before := j.Stats().Syncs
	mustBegin(t, j, a)
	if armed.Load() {
		t.Fatalf("Begin(%s) led its fsync without yielding first", a.ID)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("Begin(%s): %v", b.ID, err)
	}
	if n := j.Stats().Syncs - before; n != 1 {
		t.Fatalf("the two Begins made %d fsyncs, want 1: the record written during the leader's yield shares its fsync", n)
	}
}
