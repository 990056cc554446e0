package idem

// The journal: an append-only file holding, per operation, the intent (ID,
// key, fingerprint, created time) and, once known, the outcome.
//
// # On-disk format
//
// A journal file is a file header followed by records. Integers are
// little-endian. Every record starts at an offset that is a multiple of 8.
//
// File header, 16 bytes:
//
//	0                    8           12          16
//	+--------------------+-----------+-----------+
//	| magic "IDEMJRNL"   | version   | crc       |
//	+--------------------+-----------+-----------+
//	version  u32, currently 1
//	crc      u32, CRC-32C (Castagnoli) of bytes 0..12
//
// Record, align8(16+n) bytes for an n-byte payload:
//
//	0          4      5          8          12              12+n       16+n        align8(16+n)
//	+----------+------+----------+----------+---------------+----------+-----------+
//	| length n | type | reserved | hdr crc  | payload       | data crc | padding   |
//	+----------+------+----------+----------+---------------+----------+-----------+
//	length    u32, payload bytes, at most maxPayload (16 MiB); more is corruption
//	type      u8, 1 intent, 2 completion; anything else is corruption
//	reserved  3 bytes, zero
//	hdr crc   u32, CRC-32C of bytes 0..8 (length, type, reserved): a damaged
//	          length is caught here, before it is used to find the next record
//	data crc  u32, CRC-32C of the type byte followed by the payload
//	padding   0 to 7 bytes, zero, checked on read
//
// Intent payload (type 1), written by Begin:
//
//	u8        encoding version, 1
//	uvarint   len(ID), then ID bytes          1..4096 bytes
//	uvarint   len(Key), then Key bytes        1..4096 bytes
//	[32]byte  Fingerprint
//	uvarint   len(Method), then Method bytes
//	uvarint   len(URL), then URL bytes
//	varint    Created, Unix nanoseconds
//
// Completion payload (type 2), written by Complete:
//
//	u8        encoding version, 1
//	uvarint   len(ID), then ID bytes
//	u8        State: 2 done, 3 rejected
//	u8        flags: bit 0 BodyTruncated, bit 1 HeaderTruncated, bit 2
//	          Summarized; the other bits are zero. A summary (bit 2) keeps
//	          no header names and an empty body. Bits 1 and 2 came after
//	          the format's first release: a reader from before them
//	          reports a record carrying them as corrupt.
//	varint    Completed, Unix nanoseconds
//	uvarint   Status, 0..999
//	uvarint   number of header names k; then k times, names in sorted order:
//	            uvarint len(name), name bytes,
//	            uvarint number of values v; then v times:
//	              uvarint len(value), value bytes
//	uvarint   len(Body), then Body bytes, ending the payload
//
// A payload that does not decode exactly (bad version, over-long field,
// trailing bytes) is corruption, as is an intent for an ID already present
// with different fields, and a completion for an ID without an intent. A
// later completion for an ID replaces the earlier one.
//
// Recovery (opening) reads the file front to back and rebuilds the index in
// memory; see persist_recover.go for how a torn tail is told apart from
// corruption, persist_append.go for group commit and the fsync rules, and
// persist_compact.go for creation and compaction.

import (
	"context"
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
)

// State is where an operation stands in the journal.
type State uint8

// The states of an operation. The zero State is not valid.
const (
	// Pending: the intent is recorded; no final outcome is known. The
	// operation may or may not have reached the server.
	Pending State = 1
	// Done: a final response was received and recorded.
	Done State = 2
	// Rejected: the server answered with a response that is not retried;
	// it did not apply the operation.
	Rejected State = 3
)

// String returns "pending", "done" or "rejected", or "State(n)" for a value
// that is none of them.
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Done:
		return "done"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// final reports whether s is an outcome: Done or Rejected.
func (s State) final() bool { return s == Done || s == Rejected }

// Operation is what the journal knows of one operation.
//
// Times are stored as Unix nanoseconds and read back in UTC, so an Operation
// read from the journal (in this process or after reopening) carries its
// times in UTC without a monotonic reading. A header with no names, a name
// with no values and an empty body all read back as nil.
type Operation struct {
	// ID is the caller's operation ID: 1 to 4096 bytes.
	ID string
	// Key is the Idempotency-Key minted for the operation: 1 to 4096 bytes.
	Key string
	// Fingerprint identifies the request the operation sends.
	Fingerprint Fingerprint
	// Method and URL are the request's, for people reading the journal.
	Method, URL string
	// Created is when the key was minted. Begin uses the journal's clock
	// when it is zero.
	Created time.Time
	// State is Pending after Begin, Done or Rejected after Complete.
	State State

	// The outcome, set once State is Done or Rejected.

	// Completed is when the outcome was recorded. Complete uses the
	// journal's clock when it is zero.
	Completed time.Time
	// Status is the response status code, 0 to 999.
	Status int
	// Header is the response header as recorded.
	Header http.Header
	// Body is the response body, up to the client's recording limit.
	Body []byte
	// BodyTruncated says the body is not kept, because it was larger than
	// the limit or compaction summarized the operation: Body is nil then.
	BodyTruncated bool
	// HeaderTruncated says some header fields are not kept, because the
	// header was larger than the client's limit (Config.MaxRecordedHeader)
	// or compaction summarized the operation.
	HeaderTruncated bool
	// Summarized says compaction kept only a summary of the operation
	// once its outcome was KeyTTL old: ID, key, fingerprint, state and
	// status, without the header and body (see JournalOptions.KeyTTL).
	Summarized bool
}

// Expired reports whether o is pending and its key is at least ttl old at
// now: the server has forgotten the key, so sending the operation again
// could apply it twice.
func (o Operation) Expired(now time.Time, ttl time.Duration) bool {
	return o.State == Pending && now.Sub(o.Created) >= ttl
}

// File is the journal's view of an open file: the seam through which
// JournalOptions.WrapFile injects faults. *os.File implements it.
type File interface {
	io.ReaderAt
	io.Writer
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// Defaults of JournalOptions.
const (
	// DefaultKeyTTL is the default JournalOptions.KeyTTL: the reference
	// server's retention window.
	DefaultKeyTTL = 24 * time.Hour
	// DefaultCompactMinSize is the default JournalOptions.CompactMinSize.
	DefaultCompactMinSize = 4 << 20
	// DefaultJournalFileMode is the default JournalOptions.FileMode. The
	// journal holds response bodies, so only the owner may read it.
	DefaultJournalFileMode os.FileMode = 0o600
)

// JournalOptions tunes a Journal. The zero value is the default for every
// field.
type JournalOptions struct {
	// ReadOnly opens the journal for inspection while another process may
	// be writing it: no lock is taken, nothing is written or truncated (a
	// torn tail, such as a record the writer is appending at that moment,
	// is ignored in memory; a file the writer cuts short while it is read
	// is read again), and Begin, Complete and Compact return ErrReadOnly.
	// The file is read once, at open: the listings are a snapshot. Default
	// false.
	ReadOnly bool

	// KeyTTL is how long a key lives on the server. A pending operation
	// older than KeyTTL is expired (listed by Expired, kept forever by
	// compaction). A completed operation whose Completed time is KeyTTL or
	// more in the past is summarized by compaction: its response header
	// and body are dropped (the server has forgotten them too), the rest
	// is kept (see ForgetAfter). A Client with this journal and no
	// Config.KeyTTL uses this one. Default DefaultKeyTTL (24h).
	KeyTTL time.Duration

	// ForgetAfter is how long after its completion a completed operation
	// is remembered at all. Until then, even as a summary, Lookup finds it
	// and a Client answers its ID from the journal, so an operation ID
	// presented again, however late, is never sent under a new key. After
	// it, compaction drops the operation and its ID is new again. Default
	// 0: never forget, the safe choice for batch jobs; a service whose
	// operation IDs never repeat may set it to bound the journal's size. A
	// journal without a file (a Client's default) forgets completed
	// operations after KeyTTL.
	ForgetAfter time.Duration

	// CompactMinSize is the file size below which the journal never
	// compacts on its own. Above it, an append compacts when the bytes of
	// records compaction would drop outweigh the bytes it would keep.
	// Negative disables automatic compaction; Compact still works. Default
	// DefaultCompactMinSize (4 MiB).
	CompactMinSize int64

	// FileMode is the permission of the journal file, its compaction file
	// and its lock file when they are created. Default
	// DefaultJournalFileMode (0600).
	FileMode os.FileMode

	// Now is the clock for zero Created and Completed times, expiry and
	// compaction. Default time.Now.
	Now func() time.Time

	// WrapFile, when set, wraps every file the journal opens (the journal
	// and its compaction file, and the file a read-only journal reads)
	// before it is used: the seam for injecting read, write and fsync
	// failures. Default nil (files are used as opened).
	WrapFile func(File) File

	// Logger receives the journal's records, by the logging rule of the
	// package documentation: compactions at Debug; a torn tail cut, an
	// unfinished compaction removed, or an automatic compaction that failed
	// at Warn or Error; the failure that latches it at Error. Default nil:
	// slog.Default().
	Logger *slog.Logger

	// syncDir makes a directory's entries durable and rename renames a
	// file; tests replace them to inject failures. Defaults fsutil.SyncDir
	// and os.Rename.
	syncDir func(dir string) error
	rename  func(from, to string) error
}

// JournalStats are counters of a Journal, for tests and monitoring.
type JournalStats struct {
	// Appends counts records this Journal appended (intents and
	// completions) since it was opened.
	Appends uint64
	// Syncs counts fsyncs of journal files: the group commits of Begin and
	// Sync, the fsync after truncating a torn tail, and the fsync of each
	// file written by creation or compaction.
	Syncs uint64
	// DirSyncs counts fsyncs of the journal's directory.
	DirSyncs uint64
	// Compactions counts compactions, automatic or not.
	Compactions uint64
	// Records is the number of records in the current file.
	Records int64
	// Operations is the number of operations the journal holds.
	Operations int
	// Live is the number of operations a compaction now would keep:
	// pending ones, completed ones inside KeyTTL, and summaries of older
	// completed ones (see ForgetAfter).
	Live int
	// LiveBytes is the size of those operations' records.
	LiveBytes int64
	// FileSize is the size of the current file (for a journal without a
	// file, the size it would have).
	FileSize int64
	// Truncated is the number of torn-tail bytes cut (or, read-only,
	// ignored) when the journal was opened.
	Truncated int64
}

// FileJournal is the crash-safe record of operations in one file on one
// machine's disk: the default Journal. It is safe for concurrent use. Open
// one with OpenJournal; only one FileJournal at a time may hold a file
// open for writing. The index of every operation in the file is kept in
// memory, rebuilt from the file on open.
type FileJournal struct {
	path     string // as the caller gave it, for messages; "" for a journal without a file
	file     string // the real file: path made absolute, symlinks resolved (J4)
	readOnly bool
	memory   bool // no file: appends only update the index
	opt      JournalOptions
	log      *slog.Logger
	lock     *flock.Flock // held for the life of a writable file journal
	unclaim  func()       // releases the in-process claim on path

	mu   sync.Mutex
	cond sync.Cond // on mu: broadcast when a sync ends or the file changes

	f      File  // the journal file; nil when closed, read-only or memory
	closed bool  // Close was called
	failed error // latched write/fsync failure; every later append returns it

	// Group commit: writeSeq numbers appended records, syncedSeq is the
	// highest one an fsync has covered, syncing is set while a leader runs
	// an fsync without holding mu.
	writeSeq, syncedSeq uint64
	syncing             bool
	compacting          bool

	size      int64  // bytes in the file: the end of the last whole record
	records   int64  // records in the file
	nextCheck int64  // file size at which an append next weighs compaction
	buf       []byte // record encoding buffer, reused under mu
	scratch   []byte // outcome encoding buffer, reused under mu

	idx index // every operation, by ID and in the order of its intent

	// running serializes the Do calls of each operation ID across every
	// Client using this journal. It has its own lock.
	running opLocks

	appends, syncs, dirSyncs, compactions uint64
	truncated                             int64
}

// entry is one operation in the index: the fields of Operation, stored
// compactly (times as Unix nanoseconds), and the sizes of its records.
type entry struct {
	id, key, method, url string
	fp                   Fingerprint
	created              int64
	state                State
	outcome
	intentSize     uint32 // framed size of the intent record
	completionSize uint32 // framed size of the latest completion record, or 0
	seq            uint64 // write sequence number of the intent; 0 if recovered
}

// outcome is the part of an entry a completion record sets. The header and
// body stay in their encoded form (see appendHeaderBody) until an Operation
// is asked for.
type outcome struct {
	completed int64
	status    int32
	flags     uint8 // the completion record's flags (persist_codec.go)
	raw       string
}

// newOutcome encodes an outcome as the journal keeps it.
func newOutcome(completed time.Time, status int, flags uint8, h http.Header, body []byte) outcome {
	return newOutcomeInto(nil, completed, status, flags, h, body)
}

// newOutcomeInto is newOutcome encoding through scratch, a buffer the
// caller reuses, so that the only allocation is the kept string.
func newOutcomeInto(scratch *[]byte, completed time.Time, status int, flags uint8, h http.Header, body []byte) outcome {
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	buf = appendHeaderBody(buf, h, body)
	if scratch != nil && cap(buf) <= rewriteChunk {
		*scratch = buf
	}
	return outcome{
		completed: completed.UnixNano(),
		status:    int32(status),
		flags:     flags,
		raw:       string(buf),
	}
}

// OpenJournal opens the journal at path with default options, creating it if
// it does not exist. See OpenJournalWithOptions.
func OpenJournal(path string) (*FileJournal, error) {
	return OpenJournalWithOptions(path, JournalOptions{})
}

// OpenJournalWithOptions opens the journal at path, creating it if it does
// not exist (unless o.ReadOnly), and rebuilds its index.
//
// A symlink at path is followed: the journal is the file it points at, and
// every file below sits beside that file (J4). A writable journal is locked
// for the life of the Journal through the sidecar file path+".lock" (kept,
// never removed: removing a lock file races with the next locker); a second
// writer, in this process or another, by this name or another, gets an
// error matching ErrLocked, and a journal file with more than one hard link
// is refused with ErrHardLinked. A compaction file path+".compact" left by
// a crash before its rename is removed. A torn tail is truncated and the
// truncation fsync'd; any other damage is a *CorruptError matching
// ErrCorrupt, and the file is left untouched.
func OpenJournalWithOptions(path string, o JournalOptions) (*FileJournal, error) {
	if path == "" {
		return nil, errors.New("idem: opening journal: empty path")
	}
	j := newJournal(o)
	j.path = path
	j.readOnly = o.ReadOnly
	var err error
	if j.file, err = resolvePath(path); err != nil {
		return nil, fmt.Errorf("idem: opening journal %s: resolving its path: %w", path, err)
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

// newMemoryJournal returns a Journal without a file: Begin and Complete only
// update the index, with the same checks as a file journal. The client uses
// it when no journal is configured.
func newMemoryJournal() *FileJournal {
	return newMemoryJournalWithOptions(JournalOptions{})
}

// newMemoryJournalWithOptions is newMemoryJournal with options; ReadOnly and
// WrapFile are ignored.
func newMemoryJournalWithOptions(o JournalOptions) *FileJournal {
	j := newJournal(o)
	j.memory = true
	j.size = fileHeaderSize
	return j
}

// newJournal returns an empty Journal with o's defaults filled in.
func newJournal(o JournalOptions) *FileJournal {
	if o.KeyTTL <= 0 {
		o.KeyTTL = DefaultKeyTTL
	}
	if o.CompactMinSize == 0 {
		o.CompactMinSize = DefaultCompactMinSize
	}
	if o.FileMode == 0 {
		o.FileMode = DefaultJournalFileMode
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
	j := &FileJournal{opt: o, log: o.Logger, idx: newIndex(0)}
	j.cond.L = &j.mu
	j.nextCheck = max(o.CompactMinSize, 0)
	return j
}

// openReadOnly reads the file once and closes it: the index is a snapshot.
func (j *FileJournal) openReadOnly() error {
	osf, err := os.Open(j.file)
	if err != nil {
		return fmt.Errorf("idem: opening journal read-only: %w", err)
	}
	var f File = osf
	if j.opt.WrapFile != nil {
		f = j.opt.WrapFile(f)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("idem: opening journal read-only: %w", err)
	}
	if fi.Size() == 0 {
		// A file created but never given its header: nothing in it.
		j.size = fileHeaderSize
		return nil
	}
	return j.recover(f, fi.Size())
}

// openWritable locks the journal, clears a leftover compaction file and then
// creates or recovers the journal file.
func (j *FileJournal) openWritable() (err error) {
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
		j.log.Warn("idem: removed unfinished journal compaction", "path", tmp)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("idem: opening journal: removing %s: %w", tmp, err)
	}

	fi, err := os.Stat(j.file)
	if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
		// A new journal is written like a compaction of nothing: header to
		// a temporary file, fsync, rename, directory fsync. The journal's
		// name never points at a file without a whole header.
		if err := j.rewrite(nil); err != nil {
			return fmt.Errorf("idem: creating journal: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("idem: opening journal: %w", err)
	}
	// Recovery reads, and may truncate, through a handle of its own:
	// Windows refuses to truncate through a handle opened for appending.
	f, err := j.openFile(j.file, os.O_RDWR)
	if err != nil {
		return fmt.Errorf("idem: opening journal: %w", err)
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
			err = fmt.Errorf("idem: opening journal %s: fsync of what recovery read: %w", j.path, serr)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("idem: opening journal: %w", cerr)
	}
	if err != nil {
		return err
	}
	// Appends go through O_APPEND: each record lands at the end of the
	// file, after the last whole record recovery found.
	if j.f, err = j.openFile(j.file, os.O_RDWR|os.O_APPEND); err != nil {
		return fmt.Errorf("idem: opening journal: %w", err)
	}
	return nil
}

// openFile opens a file the journal writes, through WrapFile.
func (j *FileJournal) openFile(path string, flag int) (File, error) {
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
func (j *FileJournal) dir() string { return filepath.Dir(j.file) }

// Path returns the journal's path as it was opened, or "" for a journal
// without a file. Through a symlink, the journal is the file it points at.
func (j *FileJournal) Path() string { return j.path }

// Close makes every appended record durable (one fsync), closes the file
// and releases the lock. A second Close returns nil; every other method
// returns an error matching ErrClosed afterwards, except the listings, which
// keep answering from the index. If the journal had latched a failure, Close
// releases everything and returns that failure.
func (j *FileJournal) Close() error {
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
				j.fail(fmt.Errorf("idem: journal %s: fsync on close: %w", j.path, serr))
			} else {
				j.syncedSeq = j.writeSeq
			}
		}
		if cerr := j.f.Close(); cerr != nil && j.failed == nil {
			err = fmt.Errorf("idem: closing journal %s: %w", j.path, cerr)
		}
		j.f = nil
	}
	if j.failed != nil {
		err = j.failed
	}
	j.release()
	j.cond.Broadcast()
	return err
}

// usable returns why appends are refused, or nil. Called with mu held.
func (j *FileJournal) usable(verb string) error {
	switch {
	case j.closed:
		return fmt.Errorf("idem: journal %s: %s: %w", j.path, verb, ErrClosed)
	case j.readOnly:
		return fmt.Errorf("idem: journal %s: %s: %w", j.path, verb, ErrReadOnly)
	case j.failed != nil:
		return j.failed
	}
	return nil
}

// fail latches err: the journal refuses every later append with it, and
// forgets the operations whose intent no fsync has covered. Called with mu
// held.
func (j *FileJournal) fail(err error) {
	if j.failed == nil {
		j.failed = err
		j.log.Error("idem: journal failed; refusing further appends", "path", j.path, "err", err)
		j.forgetUnsynced()
	}
	j.cond.Broadcast()
}

// forgetUnsynced drops from the index the operations whose intent was
// written but not covered by a successful fsync: their Begin returns the
// failure, and none of them may be found as pending, or a later Do in this
// process would send an operation whose intent may never reach the disk.
// (If the page does reach it, the next process finds the intent and resumes
// under its key, which is just as safe.) Called with mu held.
func (j *FileJournal) forgetUnsynced() {
	if j.writeSeq <= j.syncedSeq {
		return
	}
	kept := newIndex(j.idx.len())
	for e := range j.idx.all() {
		if e.seq <= j.syncedSeq {
			kept.add(e)
		}
	}
	if kept.len() < j.idx.len() {
		j.log.Warn("idem: forgetting operations whose intent fsync failed", "path", j.path, "operations", j.idx.len()-kept.len())
		j.idx = kept
	}
}

// Lookup returns the operation with the given ID. It never fails: the
// index is in memory, and keeps answering after Close.
func (j *FileJournal) Lookup(_ context.Context, id string) (Operation, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.idx.get(id)
	if !ok {
		return Operation{}, false, nil
	}
	return e.operation(), true, nil
}

// List returns the operations the listing selects, ordered by Created then
// ID; pending and expired are judged by JournalOptions.KeyTTL and Now. It
// never fails, and keeps answering after Close.
func (j *FileJournal) List(_ context.Context, which Listing) ([]Operation, error) {
	now := j.opt.Now()
	j.mu.Lock()
	var sel []*entry
	for e := range j.idx.all() {
		if which.selectsEntry(e, now, j.opt.KeyTTL) {
			sel = append(sel, e)
		}
	}
	slices.SortFunc(sel, func(a, b *entry) int {
		if a.created != b.created {
			if a.created < b.created {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]Operation, len(sel))
	for i, e := range sel {
		out[i] = e.operation()
	}
	j.mu.Unlock()
	return out, nil
}

// selectsEntry is Listing.Selects on the stored fields.
func (l Listing) selectsEntry(e *entry, now time.Time, ttl time.Duration) bool {
	switch l {
	case ListAll:
		return true
	case ListPending:
		return e.state == Pending && !e.expired(now, ttl)
	case ListExpired:
		return e.expired(now, ttl)
	case ListCompleted:
		return e.state.final()
	}
	return false
}

// KeyTTL returns JournalOptions.KeyTTL.
func (j *FileJournal) KeyTTL() time.Duration { return j.opt.KeyTTL }

// Now returns the time by JournalOptions.Now.
func (j *FileJournal) Now() time.Time { return j.opt.Now() }

// Claim waits until no other Do of id runs through this journal, or ctx
// ends. Only one process writes a file journal (J4), so a claim on it is
// an in-process lock, and never lapses.
func (j *FileJournal) Claim(ctx context.Context, id string) (Claim, error) {
	unlock, err := j.running.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	return &fileClaim{j: j, id: id, unlock: unlock}, nil
}

// fileClaim is a FileJournal's Claim.
type fileClaim struct {
	j      *FileJournal
	id     string
	unlock func()
}

func (c *fileClaim) Operation() (Operation, bool) {
	op, ok, _ := c.j.Lookup(context.Background(), c.id)
	return op, ok
}

func (c *fileClaim) Begin(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal %s: Begin of %s under the claim on %s: %w", c.j.path, quoteID(op.ID), quoteID(c.id), ErrInvalidOperation)
	}
	return c.j.Begin(op)
}

func (c *fileClaim) Complete(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal %s: Complete of %s under the claim on %s: %w", c.j.path, quoteID(op.ID), quoteID(c.id), ErrInvalidOperation)
	}
	return c.j.Complete(op)
}

func (c *fileClaim) Lost() <-chan struct{} { return nil }

func (c *fileClaim) Release() {
	if c.unlock != nil {
		c.unlock()
		c.unlock = nil
	}
}

// Stats returns the journal's counters. Live and LiveBytes cost a pass over
// the index.
func (j *FileJournal) Stats() JournalStats {
	now := j.opt.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	live, liveBytes := j.liveSet(now)
	return JournalStats{
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
	}
}

// operation returns a copy of e as an Operation; the header and body are
// copied, so the caller may keep and change them.
func (e *entry) operation() Operation {
	op := Operation{
		ID:          e.id,
		Key:         e.key,
		Fingerprint: e.fp,
		Method:      e.method,
		URL:         e.url,
		Created:     time.Unix(0, e.created).UTC(),
		State:       e.state,
	}
	if e.state.final() {
		op.Completed = time.Unix(0, e.completed).UTC()
		op.Status = int(e.status)
		op.Header, op.Body = decodeHeaderBody(e.raw)
		op.BodyTruncated = e.flags&flagBodyTruncated != 0
		op.HeaderTruncated = e.flags&flagHeaderTruncated != 0
		op.Summarized = e.flags&flagSummarized != 0
	}
	return op
}

// expired is Operation.Expired on the stored fields.
func (e *entry) expired(now time.Time, ttl time.Duration) bool {
	return e.state == Pending && now.Sub(time.Unix(0, e.created)) >= ttl
}

// live reports whether compaction at now keeps e whole: it is pending
// (expired or not), or its outcome was recorded less than ttl ago.
func (e *entry) live(now int64, ttl time.Duration) bool {
	return e.state == Pending || e.completedWithin(now, ttl)
}

// remembered reports whether compaction at now keeps e at all, whole or as
// a summary: a journal without a file forgets completed operations after
// KeyTTL, a file journal after ForgetAfter (never by default).
func (j *FileJournal) remembered(e *entry, now int64) bool {
	switch {
	case e.live(now, j.opt.KeyTTL):
		return true
	case j.memory:
		return false
	}
	return j.opt.ForgetAfter <= 0 || e.completedWithin(now, j.opt.ForgetAfter)
}

// completedWithin reports whether e's outcome was recorded less than d
// before now.
func (e *entry) completedWithin(now int64, d time.Duration) bool {
	if e.completed >= now {
		return true
	}
	return uint64(now)-uint64(e.completed) < uint64(d) // now > completed: no overflow in uint64
}

// summarized returns e with its response header and body dropped, as
// compaction keeps a completed operation past KeyTTL. A header or body that
// was recorded is marked not recorded, and the summary is marked as one, so
// that reading the body says why it is missing.
func (e *entry) summarized() entry {
	s := *e
	if e.raw != emptyHeaderBody {
		h, body := decodeHeaderBody(e.raw)
		s.flags |= flagSummarized
		if len(h) > 0 {
			s.flags |= flagHeaderTruncated
		}
		if len(body) > 0 {
			s.flags |= flagBodyTruncated
		}
		s.raw = emptyHeaderBody
		s.completionSize = uint32(completionRecordSize(&s))
	}
	return s
}

// liveSet counts the operations compaction at now would keep, whole or as
// summaries, and the bytes of their records. Called with mu held.
func (j *FileJournal) liveSet(now time.Time) (n int, bytes int64) {
	ns := unixNanos(now)
	for e := range j.idx.all() {
		switch {
		case e.live(ns, j.opt.KeyTTL):
			bytes += int64(e.intentSize) + int64(e.completionSize)
		case j.remembered(e, ns):
			bytes += int64(e.intentSize) + int64(min(e.completionSize, summaryRecordSize(e)))
		default:
			continue
		}
		n++
	}
	return n, bytes
}

// unixNanos returns t as Unix nanoseconds, saturating outside the range
// int64 nanoseconds can hold (years 1678 to 2262).
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minStoredTime):
		return minStoredTime.UnixNano()
	case t.After(maxStoredTime):
		return maxStoredTime.UnixNano()
	}
	return t.UnixNano()
}

// The range of times a record can hold.
var (
	minStoredTime = time.Unix(0, -1<<63)
	maxStoredTime = time.Unix(0, 1<<63-1)
)
