package fileengine

// Creation and compaction (J7): writing a whole journal to a new file and
// renaming it over the journal.
//
// Both go through rewrite, in this order, each step relying on the one
// before it:
//
//  1. Write the file header and the live records to path+".compact", beside
//     the real file when the journal was opened through a symlink (J4).
//  2. fsync it. The rename below makes these bytes the journal; if they
//     were not on disk first, a crash after the rename could leave a
//     journal whose records (or header) never reached the disk.
//  3. Close it and the old journal file (Windows cannot rename over an open
//     file), then rename it over the journal: atomic, so the name points at
//     the whole old file or the whole new one, never at a mix.
//  4. fsync the directory. The rename is a change to the directory; until
//     it is synced a crash can bring back the old file. Nothing is appended
//     to the new file before this: a Begin reported durable in the new file
//     must not vanish with it.
//  5. Reopen the journal for appending.
//
// A crash before step 3 leaves the old journal intact and a stray
// ".compact" file, which the next open removes. A crash after it leaves the
// new file, which is complete. A failure up to and including the rename
// leaves the journal as it was and still usable; a failure after it
// latches, since the process can no longer tell which file the name will
// point at after a crash.
//
// Compaction keeps every pending operation (expired ones too: dropping one
// would lose the key a person needs to reconcile it) and every completed
// operation whose outcome is younger than KeyTTL. An older outcome is one the
// server has forgotten too; compaction keeps a summary of it, without the
// response header and body, so that the operation's ID is still answered from
// the journal rather than sent again under a new key, until ForgetAfter.

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/idemkit/idem/internal/fsutil"
)

// compactSuffix names the temporary file a compaction writes.
const compactSuffix = ".compact"

// syncDir is the default Options.syncDir.
var syncDir = fsutil.SyncDir

// rewriteChunk is how many bytes rewrite buffers between writes.
const rewriteChunk = 1 << 20

// Compact rewrites the journal with only its live operations, whole, and
// summaries of the completed ones past KeyTTL, until ForgetAfter (above).
// Appends wait while it runs.
func (j *Journal) Compact() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("compact"); err != nil {
		return err
	}
	if j.compacting {
		// Another goroutine is compacting and waiting for an fsync to
		// end; its compaction will do.
		return nil
	}
	return j.compactLocked()
}

// maybeCompact compacts when the file has passed its next check size and
// the bytes compaction would drop outweigh the bytes it would keep. The
// check costs a pass over the index, so after each one the next waits for
// the file to grow by half. A failed automatic compaction is logged, not
// returned: the append that triggered it is written. Called with mu held.
func (j *Journal) maybeCompact() {
	if j.opt.CompactMinSize < 0 || j.size < j.nextCheck || j.compacting {
		return
	}
	_, live := j.liveSet(j.opt.Now())
	if garbage := j.size - fileHeaderSize - live; garbage > live {
		if err := j.compactLocked(); err != nil {
			j.log.Error("filejournal: automatic journal compaction failed", "path", j.path, "err", err)
		}
	}
	j.nextCheck = max(j.opt.CompactMinSize, j.size+j.size/2)
}

// compactLocked compacts. Called with mu held.
func (j *Journal) compactLocked() error {
	j.compacting = true
	defer func() { j.compacting = false }()
	// The file is about to be replaced: let a running group-commit fsync
	// finish on it first.
	for j.syncing {
		j.cond.Wait()
	}
	if err := j.usable("compact"); err != nil {
		return err // closed or failed while waiting
	}
	now := unixNanos(j.opt.Now())
	var live []keep
	for e := range j.idx.all() {
		switch {
		case e.live(now):
			live = append(live, keep{e: e})
		case j.remembered(e, now):
			live = append(live, keep{e: e, summarize: true})
		}
	}
	if err := j.rewrite(live); err != nil {
		return fmt.Errorf("filejournal: compacting journal: %w", err)
	}
	j.compactions++
	j.log.Debug("filejournal: compacted journal", "path", j.path, "operations", len(live), "bytes", j.size)
	return nil
}

// keep is an operation a rewrite keeps: whole, or as a summary.
type keep struct {
	e         *entry
	summarize bool
}

// rewrite replaces the journal file by one holding the given operations,
// in order, each scrubbed (Options.ScrubURL, ScrubHeader) and, if so
// marked, summarized, and makes the index exactly those operations. Their
// records are read from the old file (read.go) and written anew to the new
// one. With no operations it creates a new journal. Called with mu held
// and no fsync running.
func (j *Journal) rewrite(live []keep) error {
	// The new index, built aside so a failure leaves the old one.
	idx := newIndex(len(live))

	// Records are read in the order of the intents, each kind through a
	// read-ahead buffer of its own: intents lie in file order, and so,
	// mostly, do completions.
	var intents, completions readAt
	if r := j.reader(); r != nil {
		intents, completions = chunkReader(newFileReader(r, j.size)), chunkReader(newFileReader(r, j.size))
	}
	source := func(i int) (Record, error) {
		var r Record
		e := live[i].e
		if err := j.loadIntent(intents, e, &r); err != nil {
			return Record{}, err
		}
		if err := j.loadOutcome(completions, e, &r); err != nil {
			return Record{}, err
		}
		return j.kept(r, live[i].summarize), nil
	}
	// The intents no fsync has covered yet are the last ones written; in
	// the new file they start at syncedEnd.
	syncedEnd := int64(-1)
	placed := func(i int, r *Record, p placement) {
		if syncedEnd < 0 && live[i].e.intentAt >= j.syncedEnd {
			syncedEnd = p.intentAt
		}
		e := entryOf(r)
		e.intentAt, e.intentSize, e.completionAt, e.completionSize = p.intentAt, p.intentSize, p.completionAt, p.completionSize
		idx.add(&e)
	}
	tmp := j.file + compactSuffix
	size, records, err := j.writeFile(tmp, len(live), source, placed)
	if err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return err
	}

	// Windows cannot rename over an open file: close the journal first.
	reopen := j.f != nil
	if reopen {
		if err := j.f.Close(); err != nil {
			j.log.Warn("filejournal: closing journal before compaction rename", "path", j.path, "err", err)
		}
		j.f = nil
	}
	if err := j.opt.rename(tmp, j.file); err != nil {
		// The journal is as it was (Windows refuses the rename while
		// another process has the file open): go on appending to it.
		err = fmt.Errorf("renaming %s into place: %w", tmp, err)
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		if reopen {
			f, oerr := j.openFile(j.file, os.O_RDWR|os.O_APPEND)
			if oerr != nil {
				j.fail(fmt.Errorf("filejournal: %s: reopening after a failed compaction: %w", j.path, errors.Join(err, oerr)))
				return j.failed
			}
			j.f = f
		}
		return err
	}
	// From here on the name may point at either file after a crash, until
	// the directory is synced: a failure latches. The index is replaced
	// at once, whatever happens next: its offsets are the new file's, and
	// so is syncedEnd, which the latch (forgetUnsynced) compares them
	// with. When every intent kept was durable, all of the new file is.
	j.replaceIndex(idx, size, records)
	if syncedEnd < 0 {
		syncedEnd = size
	}
	j.syncedEnd = syncedEnd
	j.dirSyncs++
	if err := j.opt.syncDir(j.dir()); err != nil {
		j.fail(fmt.Errorf("filejournal: %s: fsync of directory after rename: %w", j.path, err))
		j.openForReading()
		return j.failed
	}
	// The new file holds every record written before, and it is durable.
	j.syncedSeq, j.syncedEnd = j.writeSeq, j.size
	j.wakeWaiters()
	f, err := j.openFile(j.file, os.O_RDWR|os.O_APPEND)
	if err != nil {
		j.fail(fmt.Errorf("filejournal: %s: reopening after compaction: %w", j.path, err))
		j.openForReading()
		return j.failed
	}
	j.f = f
	return nil
}

// openForReading opens the journal file for reading its records back,
// after a compaction that latched a failure left it without a file to
// append to. If that fails too, reads report ErrClosed.
func (j *Journal) openForReading() {
	if f, err := j.openFile(j.file, os.O_RDONLY); err == nil {
		j.ro = f
	}
}

// placement is where writeFile wrote an operation's records.
type placement struct {
	intentAt, completionAt     int64
	intentSize, completionSize uint32
}

// writeFile writes a journal holding n operations to path, operation i
// being source(i), and fsyncs it, returning its size and record count.
// placed, when set, is told where each operation's records landed.
func (j *Journal) writeFile(path string, n int, source func(i int) (Record, error), placed func(i int, r *Record, p placement)) (size, records int64, err error) {
	f, err := j.openFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing %s: %w", path, cerr)
		}
	}()
	buf := appendFileHeader(make([]byte, 0, rewriteChunk+64<<10))
	flush := func() error {
		n, err := f.Write(buf)
		if err == nil && n != len(buf) {
			err = fmt.Errorf("short write of %d of %d bytes", n, len(buf))
		}
		size += int64(n)
		buf = buf[:0]
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return nil
	}
	for i := range n {
		r, err := source(i)
		if err != nil {
			return 0, 0, err
		}
		var p placement
		var start int
		buf, start = beginRecord(buf)
		if buf, err = endRecord(appendIntent(buf, &r), start, recIntent); err != nil {
			return 0, 0, err
		}
		p.intentAt, p.intentSize = size+int64(start), uint32(len(buf)-start)
		records++
		if r.State.final() {
			buf, start = beginRecord(buf)
			if buf, err = endRecord(appendCompletion(buf, r.ID, r.State, &r.Outcome), start, recCompletion); err != nil {
				return 0, 0, err
			}
			p.completionAt, p.completionSize = size+int64(start), uint32(len(buf)-start)
			records++
		}
		if placed != nil {
			placed(i, &r, p)
		}
		if len(buf) >= rewriteChunk {
			if err := flush(); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, 0, err
	}
	// Step 2: the bytes are on disk before any name points at them.
	j.syncs++
	if err := f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("fsync of %s: %w", path, err)
	}
	return size, records, nil
}

// replaceIndex makes idx the journal's index, for a file of size bytes
// holding records records.
func (j *Journal) replaceIndex(idx index, size, records int64) {
	j.idx = idx
	j.size, j.records = size, records
}

// live reports whether compaction at now keeps e whole: it is pending
// (expired or not), or its outcome was recorded less than its KeyTTL ago.
func (e *entry) live(now int64) bool {
	return e.State == Pending || e.completedWithin(now, time.Duration(e.KeyTTL))
}

// remembered reports whether compaction at now keeps e at all, whole or as
// a summary: completed operations are forgotten after ForgetAfter (never
// by default).
func (j *Journal) remembered(e *entry, now int64) bool {
	switch {
	case e.live(now):
		return true
	}
	return j.opt.ForgetAfter <= 0 || e.completedWithin(now, j.opt.ForgetAfter)
}

// completedWithin reports whether e's outcome was recorded less than d
// before now.
func (e *entry) completedWithin(now int64, d time.Duration) bool {
	if e.Completed >= now {
		return true
	}
	return uint64(now)-uint64(e.Completed) < uint64(d) // now > completed: no overflow in uint64
}

// kept returns r as a rewrite keeps it: summarized if summarize is set,
// then scrubbed.
func (j *Journal) kept(r Record, summarize bool) Record {
	if summarize {
		r = summarized(r)
	}
	return j.scrubbed(r)
}

// summarized returns r with its response header and body dropped, as
// compaction keeps a completed operation past KeyTTL. A header or body that
// was recorded is marked not recorded, and the summary is marked as one, so
// that reading the body says why it is missing.
func summarized(r Record) Record {
	if r.Raw != emptyHeaderBody {
		h, body := DecodeHeaderBody(r.Raw)
		r.Flags |= FlagSummarized
		if len(h) > 0 {
			r.Flags |= FlagHeaderTruncated
		}
		if len(body) > 0 {
			r.Flags |= FlagBodyTruncated
		}
		r.Raw = emptyHeaderBody
	}
	return r
}

// scrubbed returns r as Options.ScrubURL and ScrubHeader would have
// recorded it.
func (j *Journal) scrubbed(r Record) Record {
	if j.opt.ScrubURL != nil {
		r.URL = j.opt.ScrubURL(r.URL)
	}
	if j.opt.ScrubHeader != nil && r.State.final() && r.Raw != emptyHeaderBody {
		h, body := DecodeHeaderBody(r.Raw)
		if kept, ok := j.opt.ScrubHeader(h); ok {
			r.Raw = string(appendHeaderBody(nil, kept, body))
		}
	}
	return r
}

// liveSet counts the operations compaction at now would keep, whole or as
// summaries, and the bytes of their records. Called with mu held.
func (j *Journal) liveSet(now time.Time) (n int, bytes int64) {
	ns := unixNanos(now)
	for e := range j.idx.all() {
		switch {
		case e.live(ns):
			bytes += int64(e.intentSize) + int64(e.completionSize)
		case j.remembered(e, ns):
			bytes += int64(e.intentSize) + int64(min(e.completionSize, summaryRecordSize(&e.Meta)))
		default:
			continue
		}
		n++
	}
	return n, bytes
}
