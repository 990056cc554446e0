package fileengine

// The journal: opening (creation, recovery, read-only snapshots), closing,
// the failure latch and the reads of the index.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/idemkit/idem/internal/journalkit"
)

// File is a file the journal reads and writes: *os.File, or what
// Options.WrapFile made of one.
// SetWrapFile, set by package filejournal, sets on the
// *filejournal.Options o the function that wraps every file the journal
// opens: the seam through which tests inject faults, kept out of
// filejournal's exported API.
var SetWrapFile func(o any, wrap func(File) File)

type File interface {
	io.ReaderAt
	io.Writer
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// Defaults of Options, which package filejournal exports as the defaults
// of its Options (DefaultKeyTTL is package idem's).
const (
	DefaultKeyTTL                     = journalkit.DefaultKeyTTL
	DefaultCompactMinSize             = 4 << 20
	DefaultFileMode       os.FileMode = 0o600
)

// Options tunes a Journal. Each field means what the field of the same name
// in filejournal.Options does, where it is documented; a zero field gets the
// same default.
type Options struct {
	ReadOnly       bool
	ForgetAfter    time.Duration
	CompactMinSize int64
	FileMode       os.FileMode
	Now            func() time.Time
	WrapFile       func(File) File
	Logger         *slog.Logger
	OnSync         func(took time.Duration, records int, err error)

	// ScrubURL and ScrubHeader, when set, rewrite what compaction keeps
	// of each operation: its URL, and its recorded response header
	// (ScrubHeader returns whether it changed it). So a journal written
	// before a rule about secrets existed loses, at its next compaction,
	// what the rule would not have recorded.
	ScrubURL    func(url string) string
	ScrubHeader func(h http.Header) (http.Header, bool)

	// syncDir makes a directory's entries durable and rename renames a
	// file; tests replace them to inject failures. Defaults fsutil.SyncDir
	// and os.Rename.
	syncDir func(dir string) error
	rename  func(from, to string) error
}

// Stats are a Journal's counters. Package idem converts them to
// filejournal.Stats, which documents each and must keep the same fields in the
// same order.
type Stats struct {
	Appends     uint64
	Syncs       uint64
	DirSyncs    uint64
	Compactions uint64
	Records     int64
	Operations  int
	Live        int
	LiveBytes   int64
	FileSize    int64
	Truncated   int64
	Pending     int
}

// Journal is the crash-safe record of operations in one file. It is safe
// for concurrent use. The index of every operation in the file is kept in
// memory, rebuilt from the file on open: each operation's Meta and where
// its records are (read.go).
type Journal struct {
	path     string // as the caller gave it, for messages
	file     string // the real file: path made absolute, symlinks resolved (J4)
	readOnly bool
	opt      Options
	log      *slog.Logger
	lock     *flock.Flock // held for the life of a writable file journal
	unclaim  func()       // releases the in-process claim on path

	mu   sync.Mutex
	cond sync.Cond // on mu: broadcast when a sync ends or the file changes

	// waiters are the Begins and Syncs parked until an fsync covers
	// their record (waiters.go).
	waiters []*waiter

	f      File  // the journal file; nil when closed or read-only
	ro     File  // a read-only journal's file, read until Close
	closed bool  // Close was called
	failed error // latched write/fsync failure; every later append returns it

	// Group commit: writeSeq numbers appended records, syncedSeq is the
	// highest one an fsync has covered, syncing is set while a leader runs
	// an fsync without holding mu.
	writeSeq, syncedSeq uint64
	syncing             bool
	compacting          bool
	// syncedEnd is the end of the records syncedSeq covers: an intent at
	// or after it is not durable yet.
	syncedEnd int64

	size      int64  // bytes in the file: the end of the last whole record
	records   int64  // records in the file
	nextCheck int64  // file size at which an append next weighs compaction
	buf       []byte // record encoding buffer, reused under mu
	rbuf      []byte // record reading buffer, reused under mu (read.go)

	idx index // every operation, by ID and in the order of its intent

	appends, syncs, dirSyncs, compactions uint64
	truncated                             int64
}

// Open opens the journal at path, creating it if it does not exist (unless
// o.ReadOnly), and rebuilds its index. What it does with symlinks, hard
// links, the lock, a leftover compaction file, a torn tail and corruption
// is filejournal.Open's documentation.
func Open(path string, o Options) (*Journal, error) {
	if path == "" {
		return nil, errors.New("filejournal: opening journal: empty path")
	}
	j := newJournal(o)
	j.path = path
	j.readOnly = o.ReadOnly
	var err error
	if j.file, err = resolvePath(path); err != nil {
		return nil, fmt.Errorf("filejournal: opening journal %s: resolving its path: %w", path, err)
	}
	if !j.readOnly {
		if err := j.openWritable(); err != nil {
			return nil, err
		}
		return j, nil
	}
	for try := 1; ; try++ {
		err = j.openReadOnly()
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || try == readOnlyTries {
			break
		}
		// The file ended before the size it had when opened: its writer
		// cut a torn tail meanwhile. Read it again as it is now.
		rj := newJournal(o)
		rj.path, rj.file, rj.readOnly = j.path, j.file, true
		j = rj
	}
	if err != nil {
		return nil, err
	}
	return j, nil
}

// readOnlyTries bounds the reads of a journal that its writer keeps cutting
// short while it is read.
const readOnlyTries = 3

// newJournal returns an empty Journal with o's defaults filled in.
func newJournal(o Options) *Journal {
	if o.CompactMinSize == 0 {
		o.CompactMinSize = DefaultCompactMinSize
	}
	if o.FileMode == 0 {
		o.FileMode = DefaultFileMode
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.syncDir == nil {
		o.syncDir = syncDir
	}
	if o.rename == nil {
		o.rename = os.Rename
	}
	j := &Journal{opt: o, log: o.Logger, idx: newIndex(0)}
	j.cond.L = &j.mu
	j.nextCheck = max(o.CompactMinSize, 0)
	return j
}

// openReadOnly reads the file once: the index is a snapshot. The file stays
// open until Close, for reading records back; a writer's compaction
// replaces the file under its name, not the one this journal reads.
func (j *Journal) openReadOnly() (err error) {
	osf, err := os.Open(j.file)
	if err != nil {
		return fmt.Errorf("filejournal: opening journal read-only: %w", err)
	}
	var f File = osf
	if j.opt.WrapFile != nil {
		f = j.opt.WrapFile(f)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("filejournal: opening journal read-only: %w", err)
	}
	if fi.Size() == 0 {
		// A file created but never given its header: nothing in it.
		j.size = fileHeaderSize
	} else if err := j.recover(f, fi.Size()); err != nil {
		return err
	}
	j.ro = f
	return nil
}

// openWritable locks the journal, clears a leftover compaction file and then
// creates or recovers the journal file.
func (j *Journal) openWritable() (err error) {
	if err := j.acquire(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if j.f != nil {
				j.f.Close()
				j.f = nil
			}
			j.release()
		}
	}()
	// A compaction file is only ever renamed into place after it is
	// complete and fsync'd; one still under its own name was cut short by
	// a crash before the rename, and the journal beside it is intact.
	tmp := j.file + compactSuffix
	if err := os.Remove(tmp); err == nil {
		j.log.Warn("filejournal: removed unfinished journal compaction", "path", tmp)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("filejournal: opening journal: removing %s: %w", tmp, err)
	}

	fi, err := os.Stat(j.file)
	if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
		// A new journal is written like a compaction of nothing: header to
		// a temporary file, fsync, rename, directory fsync. The journal's
		// name never points at a file without a whole header.
		if err := j.rewrite(nil); err != nil {
			return fmt.Errorf("filejournal: creating journal: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("filejournal: opening journal: %w", err)
	}
	// Recovery reads, and may truncate, through a handle of its own:
	// Windows refuses to truncate through a handle opened for appending.
	f, err := j.openFile(j.file, os.O_RDWR)
	if err != nil {
		return fmt.Errorf("filejournal: opening journal: %w", err)
	}
	if fi, err = f.Stat(); err == nil {
		if err = j.checkLinks(fi); err == nil {
			err = j.recover(f, fi.Size())
		}
	}
	if err == nil && j.truncated == 0 && j.records > 0 {
		// What recovery read may be in the page cache only: a process
		// killed inside its fsync leaves its records readable but not
		// durable, and a resumed operation must not be sent on them (C2).
		// One fsync makes them durable before anything is done with them.
		// (A cut torn tail was fsync'd with the cut.)
		j.syncs++
		if serr := f.Sync(); serr != nil {
			err = fmt.Errorf("filejournal: opening journal %s: fsync of what recovery read: %w", j.path, serr)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("filejournal: opening journal: %w", cerr)
	}
	if err != nil {
		return err
	}
	// Appends go through O_APPEND: each record lands at the end of the
	// file, after the last whole record recovery found.
	if j.f, err = j.openFile(j.file, os.O_RDWR|os.O_APPEND); err != nil {
		return fmt.Errorf("filejournal: opening journal: %w", err)
	}
	return nil
}

// openFile opens a file the journal writes, through WrapFile.
func (j *Journal) openFile(path string, flag int) (File, error) {
	osf, err := os.OpenFile(path, flag, j.opt.FileMode)
	if err != nil {
		return nil, err
	}
	var f File = osf
	if j.opt.WrapFile != nil {
		f = j.opt.WrapFile(f)
	}
	return f, nil
}

// dir is the directory holding the journal file, whose fsync makes renames
// in it durable.
func (j *Journal) dir() string { return filepath.Dir(j.file) }

// Path returns the journal's path as it was opened.
func (j *Journal) Path() string { return j.path }

// Close makes every appended record durable (one fsync), closes the file
// and releases the lock. A second Close returns nil; every other method
// returns an error matching ErrClosed afterwards, except the reads of the
// index, which keep answering. If the journal had latched a failure, Close
// releases everything and returns that failure.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	for j.syncing {
		j.cond.Wait()
	}
	var err error
	if j.f != nil {
		if j.failed == nil && j.syncedSeq < j.writeSeq {
			// Completions are written without waiting for an fsync;
			// this is the fsync that covers the last of them.
			j.syncs++
			if serr := j.f.Sync(); serr != nil {
				j.fail(fmt.Errorf("filejournal: %s: fsync on close: %w", j.path, serr))
			} else {
				j.syncedSeq, j.syncedEnd = j.writeSeq, j.size
			}
		}
		if cerr := j.f.Close(); cerr != nil && j.failed == nil {
			err = fmt.Errorf("filejournal: closing journal %s: %w", j.path, cerr)
		}
		j.f = nil
	}
	if j.ro != nil {
		if cerr := j.ro.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("filejournal: closing journal %s: %w", j.path, cerr)
		}
		j.ro = nil
	}
	if j.failed != nil {
		err = j.failed
	}
	j.release()
	j.wakeWaiters()
	return err
}

// usable returns why appends are refused, or nil. Called with mu held.
func (j *Journal) usable(verb string) error {
	switch {
	case j.closed:
		return fmt.Errorf("filejournal: %s: %s: %w", j.path, verb, ErrClosed)
	case j.readOnly:
		return fmt.Errorf("filejournal: %s: %s: %w", j.path, verb, ErrReadOnly)
	case j.failed != nil:
		return j.failed
	}
	return nil
}

// fail latches err (J6; append.go says why): the journal refuses every
// later append with it, and forgets the operations whose intent no fsync
// has covered. Called with mu held.
func (j *Journal) fail(err error) {
	if j.failed == nil {
		j.failed = err
		j.log.Error("filejournal: journal failed; refusing further appends", "path", j.path, "err", err)
		j.forgetUnsynced()
	}
	j.wakeWaiters()
}

// forgetUnsynced drops from the index the operations whose intent was
// written but not covered by a successful fsync: their Begin returns the
// failure, and none of them may be found as pending, or a later Do in this
// process would send an operation whose intent may never reach the disk.
// (If the page does reach it, the next process finds the intent and resumes
// under its key, which is just as safe.) Called with mu held.
func (j *Journal) forgetUnsynced() {
	if j.writeSeq <= j.syncedSeq {
		return
	}
	kept := newIndex(j.idx.len())
	for e := range j.idx.all() {
		if e.intentAt < j.syncedEnd {
			kept.add(e)
		}
	}
	if kept.len() < j.idx.len() {
		j.log.Warn("filejournal: forgetting operations whose intent fsync failed", "path", j.path, "operations", j.idx.len()-kept.len())
		j.idx = kept
	}
}

// Lookup returns the record of operation id, reading what the index does
// not hold from the file (read.go). It fails only on that read: a failed
// read, a record that changed on disk since it was read at open
// (*CorruptError, ErrCorrupt), or, after Close, ErrClosed.
func (j *Journal) Lookup(id string) (Record, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.idx.get(id)
	if !ok {
		return Record{}, false, nil
	}
	r, err := j.load(e)
	if err != nil {
		return Record{}, true, err
	}
	return r, true, nil
}

// LookupMeta returns what the index holds of operation id, without
// reading the file. It keeps answering after Close.
func (j *Journal) LookupMeta(id string) (Meta, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.idx.get(id)
	if !ok {
		return Meta{}, false
	}
	return e.Meta, true
}

// List returns conv of the record of each operation keep selects by its
// Meta, ordered by Created and then by ID (J8). Only the selected records
// are read from the file, and List fails as Lookup does. keep and conv run
// with j locked, so they must not call j, nor keep what they are given.
func List[T any](j *Journal, keep func(*Meta) bool, conv func(*Record) T) ([]T, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var sel []*entry
	for e := range j.idx.all() {
		if keep(&e.Meta) {
			sel = append(sel, e)
		}
	}
	slices.SortFunc(sel, func(a, b *entry) int {
		if a.Created != b.Created {
			if a.Created < b.Created {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := make([]T, len(sel))
	for i, e := range sel {
		r, err := j.load(e)
		if err != nil {
			return nil, err
		}
		out[i] = conv(&r)
	}
	return out, nil
}

// Now returns the time by Options.Now.
func (j *Journal) Now() time.Time { return j.opt.Now() }

// Stats returns the journal's counters. Live and LiveBytes cost a pass over
// the index.
func (j *Journal) Stats() Stats {
	now := j.opt.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	live, liveBytes := j.liveSet(now)
	return Stats{
		Appends:     j.appends,
		Syncs:       j.syncs,
		DirSyncs:    j.dirSyncs,
		Compactions: j.compactions,
		Records:     j.records,
		Operations:  j.idx.len(),
		Live:        live,
		LiveBytes:   liveBytes,
		FileSize:    j.size,
		Truncated:   j.truncated,
		Pending:     j.pending(now),
	}
}

// Pending returns the number of pending operations whose key has not
// expired, by Options.Now. It reads the index only, and keeps answering
// after Close.
func (j *Journal) Pending() int {
	now := j.opt.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending(now)
}

// pending counts the pending operations whose key has not expired at now.
// Called with mu held.
func (j *Journal) pending(now time.Time) int {
	n := 0
	for e := range j.idx.all() {
		if e.State == Pending && !e.Expired(now) {
			n++
		}
	}
	return n
}
