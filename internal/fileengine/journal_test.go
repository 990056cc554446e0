package fileengine

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/leakcheck"
)

// --- J4, read-only --------------------------------------------------------

func TestJournalReadOnlyReadsWhileAWriterHoldsTheLock(t *testing.T) {
	path := journalPath(t)
	w := openTestJournal(t, path, quietOptions())
	mustBegin(t, w, testIntent(1))
	mustBegin(t, w, testIntent(2))
	mustComplete(t, w, testOutcome(testIntent(1), 200, "ok"))
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	o := quietOptions()
	o.ReadOnly = true
	r := openTestJournal(t, path, o)
	sameRecords(t, "read-only view", records(r), records(w))

	for name, err := range map[string]error{
		"Begin":    r.Begin(testIntent(3)),
		"Complete": r.Complete(testOutcome(testIntent(2), 200, "")),
		"Compact":  r.Compact(),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only %s: err = %v, want ErrReadOnly", name, err)
		}
	}
	if err := r.Sync(); err != nil {
		t.Errorf("read-only Sync: %v, want nil", err)
	}
	mustClose(t, r)
	// The writer still holds its lock and works.
	mustBegin(t, w, testIntent(3))
}

// Clause: J2.4.
func TestJournalReadOnlyIgnoresATornTailWithoutWriting(t *testing.T) {
	c := tornTailCases(t)[1]
	path := journalPath(t)
	torn := c.file[:len(c.file)-3]
	writeFile(t, path, torn)
	o := quietOptions()
	o.ReadOnly = true
	r := openTestJournal(t, path, o)
	sameRecords(t, "read-only view", records(r), c.before)
	if st := r.Stats(); st.Truncated != int64(len(torn))-c.last || st.Syncs != 0 {
		t.Fatalf("stats = %+v; want %d truncated bytes and no fsync", st, int64(len(torn))-c.last)
	}
	if got := readFile(t, path); !bytes.Equal(got, torn) {
		t.Fatal("read-only open changed the file")
	}
	if _, err := os.Stat(path + lockSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open created a lock file: %v", err)
	}
}

// A read-only open may race its writer cutting a torn tail: the file then
// ends before the size it had when opened, and is read again as it is.
func TestJournalReadOnlyRereadsAFileCutWhileItIsRead(t *testing.T) {
	c := tornTailCases(t)[1]
	path := journalPath(t)
	torn := c.file[:len(c.file)-3]
	writeFile(t, path, torn)
	o := quietOptions()
	o.ReadOnly = true
	opens := 0
	o.WrapFile = func(f File) File {
		opens++
		if opens == 1 {
			return &cutOnFirstRead{File: f, path: path, size: c.last}
		}
		return f
	}
	r := openTestJournal(t, path, o)
	sameRecords(t, "read-only view", records(r), c.before)
	if st := r.Stats(); opens != 2 || st.Truncated != 0 {
		t.Fatalf("%d opens, %d torn bytes ignored; want 2 opens and the second seeing the cut file", opens, st.Truncated)
	}
}

// cutOnFirstRead truncates the file at path to size before its first read,
// as a writer cutting a torn tail would.
type cutOnFirstRead struct {
	File
	path string
	size int64
	done bool
}

func (f *cutOnFirstRead) ReadAt(p []byte, off int64) (int, error) {
	if !f.done {
		f.done = true
		if err := os.Truncate(f.path, f.size); err != nil {
			return 0, err
		}
	}
	return f.File.ReadAt(p, off)
}

func TestJournalReadOnlyNeedsAnExistingFile(t *testing.T) {
	o := quietOptions()
	o.ReadOnly = true
	path := journalPath(t)
	if _, err := Open(path, o); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing journal: err = %v, want a not-exist error", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("read-only open created the journal")
	}
}

// --- Close ----------------------------------------------------------------

func TestJournalCloseIsIdempotentAndRefusesLaterCalls(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Begin":    j.Begin(testIntent(2)),
		"Complete": j.Complete(testOutcome(testIntent(1), 200, "")),
		"Sync":     j.Sync(),
		"Compact":  j.Compact(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	// The index answers; what is in the file is no longer read.
	if m, ok := j.LookupMeta(testIntent(1).ID); !ok || m.State != Pending || m.Created != testIntent(1).Created.UnixNano() {
		t.Errorf("LookupMeta after Close = %+v, %v; want the pending operation", m, ok)
	}
	if _, ok, err := j.Lookup(testIntent(1).ID); !ok || !errors.Is(err, ErrClosed) {
		t.Errorf("Lookup after Close = %v, %v; want found, ErrClosed", ok, err)
	}
	if _, err := List(j, func(*Meta) bool { return true }, func(r *Record) Record { return *r }); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close: err = %v, want ErrClosed", err)
	}
	// The lock is released.
	mustClose(t, openTestJournal(t, path, quietOptions()))
}

func TestJournalCloseWaitsForConcurrentBegins(t *testing.T) {
	defer leakcheck.Check(t)()
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	const n = 16
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range n {
		wg.Go(func() {
			err := j.Begin(testIntent(i))
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, ErrClosed):
				t.Errorf("Begin racing Close: %v", err)
			}
		})
	}
	mustClose(t, j)
	wg.Wait()
	// Every Begin that succeeded is in the file.
	if got := len(records(openTestJournal(t, path, quietOptions()))); got != int(ok.Load()) {
		t.Fatalf("reopened journal holds %d operations, %d Begins succeeded", got, ok.Load())
	}
}
