package filejournal

// Journal converts Operations to and from the records of its engine,
// package internal/fileengine (the file format, recovery, group commit,
// compaction, the writer lock and the index), and checks them before they
// are written.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/journal"
)

// Defaults of Options.
const (
	// DefaultCompactMinSize is the default Options.CompactMinSize, 4 MiB.
	DefaultCompactMinSize = fileengine.DefaultCompactMinSize
	// DefaultFileMode is the default Options.FileMode, 0600. The journal
	// holds response bodies, so only the owner may read it.
	DefaultFileMode = fileengine.DefaultFileMode
)

// Options tunes a Journal. The zero value is the default for every field.
type Options struct {
	// MustExist makes Open refuse to create a missing journal file: it
	// returns an error matching fs.ErrNotExist, and creates nothing (no
	// journal, no lock file). It is for a program that must tell its first
	// start from a lost journal: the first start creates the journal
	// without it, and every later start sets it, so a journal deleted, or
	// a disk mounted empty, stops the program instead of starting a new
	// journal that has forgotten every pending operation. Default false.
	MustExist bool

	// ReadOnly opens the journal for inspection while another process may
	// be writing it: no lock is taken, nothing is written or truncated (a
	// torn tail, such as a record the writer is appending at that moment,
	// is ignored in memory; a file the writer cuts short while it is read
	// is read again), and Begin, Complete and Compact return ErrReadOnly.
	// The file is indexed once, at open: the listings are a snapshot. It
	// stays open until Close, for reading records back; a writer's
	// compaction renames a new file over the name, and the reader goes on
	// reading the one it opened. (Where a file open elsewhere cannot be
	// renamed over, on Windows, the writer's compaction fails meanwhile,
	// and the writer goes on with its file.) Default false.
	ReadOnly bool

	// ForgetAfter is how long after its completion a completed operation
	// is remembered at all. Until then, even as a summary, Lookup finds it
	// and a Client answers its ID from the journal, so an operation ID
	// presented again, however late, is never sent under a new key. After
	// it, compaction drops the operation and its ID is new again. Default
	// 0: never forget, the safe choice for batch jobs; a service whose
	// operation IDs never repeat may set it to bound the journal's size.
	// (A Client without a Journal forgets completed operations after
	// their KeyTTL.)
	ForgetAfter time.Duration

	// CompactMinSize is the file size below which the journal never
	// compacts on its own. Above it, an append compacts when the bytes of
	// records compaction would drop outweigh the bytes it would keep.
	// Negative disables automatic compaction; Compact still works. Default
	// DefaultCompactMinSize (4 MiB).
	CompactMinSize int64

	// FileMode is the permission of the journal file, its compaction file
	// and its lock file when they are created. Default
	// DefaultFileMode (0600).
	FileMode os.FileMode

	// Now is the clock for zero Created and Completed times, expiry and
	// compaction. Default time.Now.
	Now func() time.Time

	// Logger receives the journal's records, by the logging rule of the
	// package documentation: compactions at Debug; a torn tail cut, an
	// unfinished compaction removed, or an automatic compaction that failed
	// at Warn or Error; the failure that latches it at Error. Default nil:
	// slog.Default().
	Logger *slog.Logger

	// OnSync, when set, is told of every fsync of a group commit (Begin,
	// Sync): how long it took, how many records it made durable at once
	// (the group), and its error. It runs on the goroutine that led the
	// commit, without the journal's lock, so it must not call the journal.
	// Package idemotel turns it into metrics. Default nil.
	OnSync func(took time.Duration, records int, err error)

	// wrapFile, when set, wraps every file the journal opens (the journal
	// and its compaction file, and the file a read-only journal reads)
	// before it is used: the seam through which tests inject read, write
	// and fsync failures (fileengine.SetWrapFile).
	wrapFile func(fileengine.File) fileengine.File
}

func init() {
	fileengine.SetWrapFile = func(o any, wrap func(fileengine.File) fileengine.File) {
		o.(*Options).wrapFile = wrap
	}
}

// engine returns o as the journal's engine takes it; the engine fills in
// the defaults.
func (o Options) engine() fileengine.Options {
	eo := fileengine.Options{
		ReadOnly:       o.ReadOnly,
		ForgetAfter:    o.ForgetAfter,
		CompactMinSize: o.CompactMinSize,
		FileMode:       o.FileMode,
		Now:            o.Now,
		Logger:         o.Logger,
		OnSync:         o.OnSync,
		// The secrets rule, as a Client with no extra names
		// applies it: compaction drops what older versions recorded.
		ScrubURL:    redact.Default.URLString,
		ScrubHeader: redact.Default.Header,
	}
	eo.WrapFile = o.wrapFile
	return eo
}

// Stats are counters of a Journal, for tests and monitoring.
type Stats struct {
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
	// pending ones, completed ones inside their KeyTTL, and summaries of older
	// completed ones (see ForgetAfter).
	Live int
	// LiveBytes is the size of those operations' records.
	LiveBytes int64
	// FileSize is the size of the current file.
	FileSize int64
	// Truncated is the number of torn-tail bytes cut (or, read-only,
	// ignored) when the journal was opened.
	Truncated int64
	// Pending is the number of pending operations whose key has not
	// expired (what List(ctx, ListPending) returns).
	Pending int
}

// Journal is the journal.Journal in one file (see the package
// documentation). Open one with Open.
type Journal struct {
	eng *fileengine.Journal

	// running serializes the Do calls of each operation ID across every
	// Client using this journal. It has its own lock.
	running journalkit.Set
}

// Open opens the journal at path, creating it if it does
// not exist (unless o.ReadOnly or o.MustExist), and rebuilds its index.
//
// A symlink at path is followed: the journal is the file it points at, and
// every file below sits beside that file. A writable journal is locked
// for the life of the Journal through the sidecar file path+".lock" (kept,
// never removed: removing a lock file races with the next locker); a second
// writer, in this process or another, by this name or another, gets an
// error matching ErrLocked, and a journal file with more than one hard link
// is refused with ErrHardLinked. A compaction file path+".compact" left by
// a crash before its rename is removed. A torn tail is truncated and the
// truncation fsync'd; any other damage is a *CorruptError matching
// journal.ErrCorrupt, and the file is left untouched.
func Open(path string, o Options) (*Journal, error) {
	if o.MustExist {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("filejournal: opening %s: the journal must exist: %w", path, err)
		}
	}
	eng, err := fileengine.Open(path, o.engine())
	if err != nil {
		return nil, err
	}
	return &Journal{eng: eng}, nil
}

// Path returns the journal's path as it was opened. Through a symlink,
// the journal is the file it points at.
func (j *Journal) Path() string { return j.eng.Path() }

// begin records the intent of op (ID, Key, Fingerprint, Method, URL,
// Created) and returns once the record is durable: written and fsync'd,
// sharing the fsync with concurrent Begins. A zero Created is set from the
// journal's clock. op.State must be zero or Pending, and the outcome fields
// must be zero.
//
// begin refuses an empty or over-long ID or key (journal.ErrInvalidOperation) and an
// ID the journal already holds (journal.ErrOperationExists). After a failed write or
// fsync it returns that failure, as does every later append. When begin
// returns an error the operation is not in the journal: Lookup does not
// find it, and it must not be sent.
//
// The operation is in the index (Lookup finds it) from the moment its
// record is written, while begin still waits for the fsync; callers that
// may begin and Lookup the same ID concurrently must order those calls
// themselves.
func (j *Journal) begin(op journal.Operation) error {
	if err := journal.CheckIntent(op); err != nil {
		return j.eng.Refuse("begin", op.ID, err)
	}
	return j.eng.Begin(fileengine.Intent{
		ID:          op.ID,
		Key:         op.Key,
		Fingerprint: op.Fingerprint,
		Method:      op.Method,
		URL:         op.URL,
		Created:     op.Created,
		KeyTTL:      op.KeyTTL,
	})
}

// complete records the outcome of the operation op.ID: op.State (Done or
// Rejected), Completed (the journal's clock when zero), Status, Header, Body,
// BodyTruncated and HeaderTruncated (Summarized is compaction's to set). It
// returns once the record is written, without waiting for an fsync: losing
// it to a crash only causes a replay under the same key. A later complete
// for the same ID replaces the outcome.
//
// If op.Key is set it must be the operation's key. complete refuses an ID
// the journal does not hold (journal.ErrNoSuchOperation), a body kept although
// BodyTruncated is set, Summarized set, and a status outside 0..999
// (journal.ErrInvalidOperation).
func (j *Journal) complete(op journal.Operation) error {
	if err := journal.CheckOutcome(op); err != nil {
		return j.eng.Refuse("complete", op.ID, err)
	}
	return j.eng.Complete(fileengine.Completion{
		ID:        op.ID,
		Key:       op.Key,
		State:     fileengine.State(op.State),
		Completed: op.Completed,
		Status:    op.Status,
		Flags:     flags(&op),
		Header:    storedHeader(&op),
		Body:      op.Body,
	})
}

// Sync returns once every record appended so far is durable, sharing the
// fsync with concurrent appends. It returns nil for a read-only journal.
func (j *Journal) Sync() error { return j.eng.Sync() }

// Compact rewrites the journal with only its live operations, whole, and
// summaries of the completed ones past their KeyTTL: the response header
// and body of an outcome recorded its operation's KeyTTL or more ago are
// dropped (the server has forgotten them too), the rest is kept (see
// ForgetAfter). Pending operations, expired or not, are kept whole.
// Appends wait while it runs.
func (j *Journal) Compact() error { return j.eng.Compact() }

// Close makes every appended record durable (one fsync), closes the file
// and releases the lock. A second Close returns nil; every other method
// returns an error matching journal.ErrClosed afterwards (Lookup and List too,
// since they read the file), except Stats. If the journal had latched a
// failure, Close releases everything and returns that failure.
func (j *Journal) Close() error { return j.eng.Close() }

// Lookup returns the operation with the given ID. The index in memory
// finds it; its key, URL, fingerprint and recorded response are read from
// the file, and checked as they were when the journal was opened. Lookup
// fails only on that read: a failed read, a record that changed on disk
// since the journal was opened (a *CorruptError matching journal.ErrCorrupt: never
// a wrong response), or a file journal used after Close (journal.ErrClosed).
func (j *Journal) Lookup(_ context.Context, id string) (journal.Operation, bool, error) {
	r, ok, err := j.eng.Lookup(id)
	if !ok || err != nil {
		return journal.Operation{}, false, err
	}
	return operationOf(&r), true, nil
}

// List returns the operations the listing selects, ordered by Created then
// ID; pending and expired are judged by each operation's KeyTTL and Now. The
// selected operations are read from the file, and List fails as Lookup
// does.
func (j *Journal) List(_ context.Context, which journal.Listing) ([]journal.Operation, error) {
	now := j.eng.Now()
	keep := func(m *fileengine.Meta) bool { return selectsRecord(which, m, now) }
	return fileengine.List(j.eng, keep, operationOf)
}

// selectsRecord is Listing.Selects on what the journal's engine keeps of
// an operation in memory.
func selectsRecord(l journal.Listing, r *fileengine.Meta, now time.Time) bool {
	return l.Selects(journal.Operation{State: journal.State(r.State), Created: time.Unix(0, r.Created), KeyTTL: time.Duration(r.KeyTTL)}, now)
}

// Now returns the time by Options.Now.
func (j *Journal) Now() time.Time { return j.eng.Now() }

// Stats returns the journal's counters. Live and LiveBytes cost a pass over
// the index.
func (j *Journal) Stats() Stats { return Stats(j.eng.Stats()) }

// Pending returns the number of pending operations whose key has not
// expired, judged by each operation's KeyTTL and Now: as many as
// List(ctx, journal.ListPending) returns. It counts them in the index in
// memory, under the journal's lock, without reading the file, and never
// fails; like Stats, it keeps answering after Close.
func (j *Journal) Pending(context.Context) (int, error) { return j.eng.Pending(), nil }

// operationOf returns r as an Operation. The header and body are decoded
// from their encoded form into fresh memory, so the caller may keep and
// change them.
func operationOf(r *fileengine.Record) journal.Operation {
	op := journal.Operation{
		ID:          r.ID,
		Key:         r.Key,
		Fingerprint: r.Fingerprint,
		Method:      r.Method,
		URL:         r.URL,
		Created:     time.Unix(0, r.Created).UTC(),
		KeyTTL:      time.Duration(r.KeyTTL),
		State:       journal.State(r.State),
	}
	if final(op.State) {
		op.Completed = time.Unix(0, r.Completed).UTC()
		op.Status = int(r.Status)
		op.Header, op.Body = fileengine.DecodeHeaderBody(r.Raw)
		readMarks(&op)
		op.BodyTruncated = r.Flags&fileengine.FlagBodyTruncated != 0
		op.HeaderTruncated = r.Flags&fileengine.FlagHeaderTruncated != 0
		op.Summarized = r.Flags&fileengine.FlagSummarized != 0
	}
	return op
}

// flags returns the completion flags op's outcome is recorded with.
func flags(op *journal.Operation) uint8 {
	var f uint8
	if op.BodyTruncated {
		f |= fileengine.FlagBodyTruncated
	}
	if op.HeaderTruncated {
		f |= fileengine.FlagHeaderTruncated
	}
	if op.Summarized {
		f |= fileengine.FlagSummarized
	}
	return f
}

// Forget drops the pending operation id from the journal, so that the
// next Do of id mints a NEW key: if the server applied the operation,
// sending it again under the new key may apply it twice. It waits for a
// running Do of id in this process, as Claim does, then rewrites the
// journal without the operation (a compaction that keeps everything
// else), durably. It returns an error matching journal.ErrNoSuchOperation if the
// journal does not hold id, and journal.ErrAlreadyCompleted if its outcome is
// recorded. Forget and ForgetCompleted implement journal.Forgetter, for a
// Client; programs call idem.Settle, which checks what it is asked first.
func (j *Journal) Forget(ctx context.Context, id string) error {
	unlock, err := j.running.Lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if r, ok := j.eng.LookupMeta(id); ok && final(journal.State(r.State)) {
		return fmt.Errorf("filejournal: %s: forget %s: %w: it is %s with status %d",
			j.Path(), journalkit.QuoteID(id), journal.ErrAlreadyCompleted, journal.State(r.State), r.Status)
	}
	return j.eng.Forget(id)
}

// ForgetCompleted drops the completed operation id, as Forget drops a
// pending one, if its key is still key: an operation forgotten and sent
// again meanwhile, under a new key, is kept. It returns an error matching
// journal.ErrNoSuchOperation if the journal holds no completed operation id under
// key.
func (j *Journal) ForgetCompleted(ctx context.Context, id, key string) error {
	unlock, err := j.running.Lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	r, ok, err := j.eng.Lookup(id)
	switch {
	case err != nil:
		return err
	case !ok || !final(journal.State(r.State)) || r.Key != key:
		return fmt.Errorf("filejournal: %s: forget %s: %w: no completed operation under key %s",
			j.Path(), journalkit.QuoteID(id), journal.ErrNoSuchOperation, key)
	}
	return j.eng.Forget(id)
}

// final reports whether s is an outcome: Done or Rejected.
func final(s journal.State) bool { return s == journal.StateDone || s == journal.StateRejected }

// storedHeader is op's header as the journal stores it, with op's marks.
func storedHeader(op *journal.Operation) http.Header {
	return journalkit.StoredHeader(op.Header, journalkit.Marks{Applied: op.Applied, KeyReused: op.KeyReused,
		Settled: op.Settled, SettledNote: op.SettledNote, Unrecorded: op.Unrecorded})
}

// readMarks moves the marks stored in op's header into op's fields: the
// way every record is read, those written before the marks were fields
// among them.
func readMarks(op *journal.Operation) {
	var m journalkit.Marks
	op.Header, m = journalkit.SplitMarks(op.Header)
	op.Applied, op.KeyReused, op.Settled, op.SettledNote, op.Unrecorded = m.Applied, m.KeyReused, m.Settled, m.SettledNote, m.Unrecorded
}
