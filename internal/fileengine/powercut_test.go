package fileengine

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/fsutil"
)

// disk stands for the disk under one directory of journal files, and stages
// power cuts on it deterministically: it keeps, per file (by inode), the
// bytes the file held when its last successful fsync began, and, per name,
// the file the name pointed at when the directory was last fsync'd. A power
// cut (cut) keeps exactly that and nothing else: a write, a truncation, a
// creation or a rename no fsync covered is gone. A real disk may keep more;
// it never keeps less, so what a test finds after cut is what the journal
// can count on.
//
// The journal reaches the disk through Options.WrapFile (every file it
// writes: the journal, a compaction's temporary file) and Options.syncDir,
// which options installs.
type disk struct {
	t   testing.TB
	dir string

	mu    sync.Mutex
	data  map[uint64][]byte // inode: its bytes at its last fsync
	names map[string]uint64 // name in dir: its inode at the last directory fsync
	// duringSync, when set, runs inside every file fsync, after the bytes
	// it covers are fixed and before it returns: what it writes is not
	// covered by that fsync. afterWrite, when set, runs after every write.
	duringSync, afterWrite func()
}

// newDisk returns the disk of a new, empty directory.
func newDisk(t testing.TB) *disk {
	return &disk{t: t, dir: t.TempDir(), data: map[uint64][]byte{}, names: map[string]uint64{}}
}

// path is the journal file's path in the disk's directory.
func (d *disk) path() string { return filepath.Join(d.dir, "ops.journal") }

// seal takes everything now in the directory as durable, as a test sets up
// a file "written by an earlier process and synced".
func (d *disk) seal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = map[string]uint64{}
	for name, ino := range d.list() {
		d.names[name] = ino
		b, err := os.ReadFile(filepath.Join(d.dir, name))
		if err != nil {
			d.t.Fatal(err)
		}
		d.data[ino] = b
	}
}

// list returns the directory's files by name, with their inodes.
func (d *disk) list() map[string]uint64 {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			d.t.Fatal(err)
		}
		ino, ok := fsutil.Inode(fi)
		if !ok {
			d.t.Skip("power cuts are staged by inode, which this system does not report")
		}
		out[e.Name()] = ino
	}
	return out
}

// options returns o with the disk's seams installed.
func (d *disk) options(o Options) Options {
	o.WrapFile = d.wrap
	o.syncDir = d.syncDir
	return o
}

// wrap is the WrapFile of the disk: a file whose fsync notes what it covers.
func (d *disk) wrap(f File) File {
	return &hookFile{File: f, write: func(f File, p []byte) (int, error) {
		n, err := f.Write(p)
		if d.afterWrite != nil {
			d.afterWrite()
		}
		return n, err
	}, sync: func(f File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		ino, ok := fsutil.Inode(fi)
		if !ok {
			d.t.Skip("power cuts are staged by inode, which this system does not report")
		}
		b, err := contents(f)
		if err != nil {
			return err
		}
		if d.duringSync != nil {
			d.duringSync()
		}
		if err := f.Sync(); err != nil {
			return err
		}
		d.mu.Lock()
		d.data[ino] = b
		d.mu.Unlock()
		return nil
	}}
}

// syncDir is the syncDir of the disk: it fixes which file each name in the
// directory points at.
func (d *disk) syncDir(dir string) error {
	if dir != d.dir {
		d.t.Errorf("directory fsync of %s, want %s", dir, d.dir)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = d.list()
	return nil
}

// cut returns a new directory holding what a power cut now leaves of the
// disk's: each name of the last directory fsync, with the bytes of its
// file's last fsync (none if it had none). The journal's own directory is
// left alone, so the process that wrote it can go on and close it.
func (d *disk) cut() *disk {
	d.mu.Lock()
	defer d.mu.Unlock()
	after := newDisk(d.t)
	for name, ino := range d.names {
		writeFile(d.t, filepath.Join(after.dir, name), d.data[ino])
	}
	after.seal()
	return after
}

// file returns the bytes of name in the disk's directory, and whether it is
// there.
func (d *disk) file(name string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(d.dir, name))
	if os.IsNotExist(err) {
		return nil, false
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return b, true
}

// survivors opens the journal a power cut left and returns its records.
func survivors(t *testing.T, d *disk) []Record {
	t.Helper()
	j := openTestJournal(t, d.path(), quietOptions())
	defer mustClose(t, j)
	return records(j)
}

// writeUnsynced appends b to the file at path behind the disk's back: bytes
// a process wrote and no fsync covered.
func writeUnsynced(t *testing.T, path string, b []byte) {
	t.Helper()
	changeAt(t, path, int64(len(readFile(t, path))), b)
}

// --- Every fsync the journal makes, one power cut each ---------------------

// J7.1: a new journal's header is fsync'd in its file and its name in the
// directory before Open returns: a power cut right after leaves the whole
// header under the journal's name.
func TestPowerCutAfterCreationLeavesTheWholeHeader(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	after := d.cut()
	if b, ok := after.file(filepath.Base(d.path())); !ok || !bytes.Equal(b, appendFileHeader(nil)) {
		t.Fatalf("after a power cut the new journal is %x (there: %v), want its header %x", b, ok, appendFileHeader(nil))
	}
	// J7.1, C2: a Begin in the new file survives with its name.
	in := testIntent(1)
	mustBegin(t, j, in)
	sameRecords(t, "after a power cut", survivors(t, d.cut()), []Record{recordOf(in)})
}

// C2.1, J5.1: every Begin that returned is durable, alone or in a group.
func TestPowerCutKeepsEveryBeginThatReturned(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	a := testIntent(1)
	mustBegin(t, j, a)
	sameRecords(t, "after one Begin", survivors(t, d.cut()), []Record{recordOf(a)})
	b := testIntent(2)
	mustBegin(t, j, b)
	sameRecords(t, "after two Begins", survivors(t, d.cut()), []Record{recordOf(b), recordOf(a)})
}

// J5.4, C2: a group commit covers what was written before its fsync began,
// not what was written while it ran: a Begin whose record lands during the
// leader's fsync gets an fsync of its own before it returns.
func TestPowerCutKeepsABeginWrittenDuringTheLeadersFsync(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	a, b := testIntent(1), testIntent(2)
	written := make(chan struct{}, 1)
	bDone := make(chan error, 1)
	var armed atomic.Bool // the hook acts in the first fsync after Open only
	armed.Store(true)
	d.duringSync = func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		// Inside a's fsync, whose bytes are fixed: b writes now.
		d.afterWrite = func() { written <- struct{}{} }
		go func() { bDone <- j.Begin(b) }()
		<-written
		d.afterWrite = nil
	}
	mustBegin(t, j, a)
	if armed.CompareAndSwap(true, false) {
		t.Fatalf("Begin(%s) returned without an fsync", a.ID)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("Begin(%s) written during the leader's fsync: %v", b.ID, err)
	}
	if st := j.Stats(); st.Syncs != 3 { // creation, a's group, b's
		t.Fatalf("stats = %+v, want 3 fsyncs: the creation's, a's, and b's own", st)
	}
	sameRecords(t, "after a power cut", survivors(t, d.cut()), []Record{recordOf(b), recordOf(a)})
}

// C2.3: what recovery read (records a killed process wrote but no fsync
// covered) is fsync'd before Open returns, since the operations in it are
// resumed and sent: a power cut right after the open keeps them.
func TestPowerCutAfterOpenKeepsWhatRecoveryRead(t *testing.T) {
	d := newDisk(t)
	writeFile(t, d.path(), fileOf())
	d.seal()
	a := testIntent(1)
	writeUnsynced(t, d.path(), frameRecord(t, recIntent, intentPayload(a)))
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	if st := j.Stats(); st.Truncated != 0 || st.Operations != 1 {
		t.Fatalf("stats after open = %+v, want one operation and nothing cut", st)
	}
	sameRecords(t, "after a power cut", survivors(t, d.cut()), []Record{recordOf(a)})
}

// J2.3: the cut of a torn tail is fsync'd, with what recovery read before
// it, before Open returns: a power cut right after leaves the file cut
// exactly, holding the operations resumed from it.
// Clauses: C2.3, J2.4.
func TestPowerCutAfterATornTailCutKeepsTheCut(t *testing.T) {
	d := newDisk(t)
	writeFile(t, d.path(), fileOf())
	d.seal()
	a, b := testIntent(1), testIntent(2)
	whole := fileOf(frameRecord(t, recIntent, intentPayload(a)))
	torn := frameRecord(t, recIntent, intentPayload(b))
	writeUnsynced(t, d.path(), append(whole[fileHeaderSize:], torn[:len(torn)/2]...))
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	if st := j.Stats(); st.Truncated != int64(len(torn)/2) {
		t.Fatalf("stats after open = %+v, want the torn %d bytes cut", st, len(torn)/2)
	}
	after := d.cut()
	if got, _ := after.file(filepath.Base(d.path())); !bytes.Equal(got, whole) {
		t.Fatalf("after a power cut the journal is %d bytes, want the %d bytes before the torn record", len(got), len(whole))
	}
	sameRecords(t, "after a power cut", survivors(t, after), []Record{recordOf(a)})
	// J2.4: appends after the cut survive a power cut and reopen cleanly.
	c := testIntent(3)
	mustBegin(t, j, c)
	sameRecords(t, "after a Begin and a power cut", survivors(t, d.cut()), []Record{recordOf(c), recordOf(a)})
}

// J7.2, J7.3: compaction fsyncs its file before the rename and the
// directory after it, before anything is appended to the new file: a power
// cut right after Compact leaves the compacted journal, and one after a
// later Begin leaves that Begin too.
func TestPowerCutAroundCompactionKeepsTheCompactedJournal(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	kept := compactionFixture(t, j)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after Compact and a power cut", survivors(t, d.cut()), kept)
	in := testIntent(5)
	mustBegin(t, j, in)
	sameRecords(t, "after Compact, a Begin and a power cut", survivors(t, d.cut()), append(kept, recordOf(in)))
}

// J7.3 for Forget: when Forget returns, the operation, pending or
// completed, is gone from the file, durably, and every other one is still
// there.
func TestPowerCutAfterForgetKeepsItForgotten(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	a, b, c, e := testIntent(1), testIntent(2), testIntent(3), testIntent(4)
	for _, in := range []Intent{a, b, c, e} {
		mustBegin(t, j, in)
	}
	done, gone := testOutcome(c, 201, "ok"), testOutcome(e, 200, "gone")
	mustComplete(t, j, done)
	mustComplete(t, j, gone)
	if err := j.Forget(b.ID); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after Forget of a pending operation and a power cut", survivors(t, d.cut()), []Record{recordOf(e, gone), recordOf(c, done), recordOf(a)})
	if err := j.Forget(e.ID); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after Forget of a completed operation and a power cut", survivors(t, d.cut()), []Record{recordOf(c, done), recordOf(a)})
}

// C3.6: a completion is written without an fsync (a power cut may take it,
// leaving the operation pending under its key), and the next fsync, of
// Sync or Close, makes it durable.
// Clause: C3.6.
func TestPowerCutKeepsCompletionsOnlyOnceSyncOrCloseRan(t *testing.T) {
	d := newDisk(t)
	j := openTestJournal(t, d.path(), d.options(quietOptions()))
	a, b := testIntent(1), testIntent(2)
	mustBegin(t, j, a)
	mustBegin(t, j, b)
	doneA, doneB := testOutcome(a, 200, "a"), testOutcome(b, 201, "b")
	mustComplete(t, j, doneA)
	sameRecords(t, "after Complete and a power cut", survivors(t, d.cut()), []Record{recordOf(b), recordOf(a)})
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after Sync and a power cut", survivors(t, d.cut()), []Record{recordOf(b), recordOf(a, doneA)})
	mustComplete(t, j, doneB)
	mustClose(t, j)
	sameRecords(t, "after Close and a power cut", survivors(t, d.cut()), []Record{recordOf(b, doneB), recordOf(a, doneA)})
}

// J7.2, J7.3 for salvage: a salvaged journal is written as compaction
// writes one, its file fsync'd before the rename and the directory after:
// a power cut right after WriteSalvaged returns leaves all of it.
func TestPowerCutAfterWriteSalvagedKeepsTheSalvagedJournal(t *testing.T) {
	a, b := testIntent(1), testIntent(2)
	done := testOutcome(b, 201, "b")
	ops := []Record{recordOf(a), recordOf(b, done)}
	d := newDisk(t)
	if err := writeSalvaged(d.path(), ops, d.options(quietOptions())); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after WriteSalvaged and a power cut", survivors(t, d.cut()), []Record{recordOf(b, done), recordOf(a)})
}
