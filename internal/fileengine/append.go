package fileengine

// Appending: Begin and Complete, group commit, and the latch on failure.
//
// Fsync discipline:
//
//   - Begin returns only after an fsync that covers its intent record. The
//     client sends the first byte of a request only after Begin returns
//     (contract C2), so a crash at any instant leaves either no record and
//     nothing sent, or the record and its key for the resume.
//   - Complete writes its record (write(2), into the page cache) and does
//     not wait: losing a completion to a crash only makes the next run send
//     the operation again under the same key, which the server answers from
//     its store (C3). The next fsync for any reason (a Begin, Sync, Close)
//     covers it.
//   - Group commit (J5): records are written under mu, but the fsync runs
//     without it. A Begin that finds an fsync running parks; when that
//     fsync ends, its leader wakes the Begins it covered and hands the lead
//     to one it did not, which runs one fsync for every record written so
//     far while the others stay parked (waiters.go). No timer, no delay: a
//     lone Begin pays one fsync, many concurrent ones share.
//   - A failed write or fsync latches (J6). After a failed fsync the kernel
//     may have dropped the dirty pages and cleared the error, so a retried
//     fsync could succeed without the data being on disk; after a failed or
//     short write the file may end in half a record, which a later record
//     would follow and turn into corruption. Either way the file is done:
//     every later append returns the first error, and the next open
//     truncates any half record as a torn tail.

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

// Begin records the intent in and returns once the record is durable:
// written and fsync'd, sharing the fsync with concurrent Begins. A zero
// Created is set from the journal's clock. It refuses an ID the journal
// already holds (ErrOperationExists); the ID, key and time must be within
// the format's limits (CheckIDKey, CheckTime), which the caller checks
// first, reporting a failed check through Refuse. After a failed write or
// fsync it returns that failure, as does every later append. When Begin
// returns an error the operation is not in the journal: Lookup does not
// find it, and it must not be sent.
//
// The operation is in the index (Lookup finds it) from the moment its
// record is written, while Begin still waits for the fsync; callers that
// may Begin and Lookup the same ID concurrently must order those calls
// themselves.
func (j *Journal) Begin(in Intent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("begin"); err != nil {
		return err
	}
	if _, ok := j.idx.get(in.ID); ok {
		return fmt.Errorf("filejournal: %s: begin %s: %w", j.path, QuoteID(in.ID), ErrOperationExists)
	}
	if in.Created.IsZero() {
		in.Created = j.opt.Now()
	}
	if err := CheckKeyTTL(in.KeyTTL); err != nil {
		return fmt.Errorf("filejournal: %s: begin %s: %w", j.path, QuoteID(in.ID), err)
	}
	r := Record{
		ID:          in.ID,
		Key:         in.Key,
		Fingerprint: in.Fingerprint,
		Method:      in.Method,
		URL:         in.URL,
		Created:     in.Created.UnixNano(),
		KeyTTL:      int64(in.KeyTTL),
		State:       Pending,
	}
	buf, start := beginRecord(j.buf[:0])
	buf, err := endRecord(appendIntent(buf, &r), start, recIntent)
	j.buf = buf
	if err != nil {
		return fmt.Errorf("filejournal: %s: begin %s: %w", j.path, QuoteID(in.ID), err)
	}
	at := j.size
	seq, err := j.write(buf)
	if err != nil {
		return err
	}
	e := entryOf(&r)
	e.intentAt, e.intentSize = at, uint32(len(buf))
	j.idx.add(&e)
	j.maybeCompact()
	return j.waitDurable(seq)
}

// Complete records the outcome c of operation c.ID, replacing an earlier
// one. It returns once the record is written, without waiting for an
// fsync (C3, above). A zero Completed is set from the journal's clock. It
// refuses an ID the journal does not hold (ErrNoSuchOperation) and a Key
// that is not the operation's (ErrInvalidOperation: the index keeps a
// 64-bit keySum, so the operation's own key is accepted without reading
// its intent back, and a key whose sum differs is refused after reading
// it; another key with the same sum, a chance of 2^-64, would pass); the ID, state,
// status, flags and time must be within the format's limits, which the
// caller checks first, reporting a failed check through Refuse.
func (j *Journal) Complete(c Completion) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("complete"); err != nil {
		return err
	}
	e, ok := j.idx.get(c.ID)
	if !ok {
		return fmt.Errorf("filejournal: %s: complete %s: %w", j.path, QuoteID(c.ID), ErrNoSuchOperation)
	}
	if c.Key != "" && keySum(c.Key) != e.keySum {
		// Not the operation's key, as the intent in the file says.
		key, err := j.keyOf(e)
		if err != nil {
			return fmt.Errorf("filejournal: %s: complete %s: %w", j.path, QuoteID(c.ID), err)
		}
		if c.Key != key {
			return fmt.Errorf("filejournal: %s: complete %s: %w: key %q is not the operation's key %q",
				j.path, QuoteID(c.ID), ErrInvalidOperation, c.Key, key)
		}
	}
	if c.Completed.IsZero() {
		c.Completed = j.opt.Now()
	}
	// The header and body are encoded straight into the record: the index
	// keeps none of it.
	o := Outcome{Completed: c.Completed.UnixNano(), Status: int32(c.Status), Flags: c.Flags}
	buf, start := beginRecord(j.buf[:0])
	buf = appendCompletionHead(buf, e.ID, c.State, &o)
	buf = appendHeaderBody(buf, c.Header, c.Body)
	buf, err := endRecord(buf, start, recCompletion)
	j.buf = buf
	if err != nil {
		return fmt.Errorf("filejournal: %s: complete %s: %w", j.path, QuoteID(c.ID), err)
	}
	at := j.size
	if _, err := j.write(buf); err != nil {
		return err
	}
	e.State = c.State
	e.Completed, e.Status, e.Flags = o.Completed, o.Status, o.Flags
	e.completionAt = at
	e.completionSize = uint32(len(buf))
	j.maybeCompact()
	return nil
}

// Refuse returns the error of a Begin or Complete (verb "begin" or
// "complete") of operation id that the caller refused for reason. The
// journal's own refusal comes first, as in Begin and Complete: a closed,
// read-only or failed journal reports that. Otherwise reason is returned
// with the journal's path, the verb and the ID.
func (j *Journal) Refuse(verb, id string, reason error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(verb); err != nil {
		return err
	}
	return fmt.Errorf("filejournal: %s: %s %s: %w", j.path, verb, QuoteID(id), reason)
}

// Sync returns once every record appended so far is durable, sharing the
// fsync with concurrent Begins. It returns nil for a read-only journal.
func (j *Journal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.closed:
		return fmt.Errorf("filejournal: %s: sync: %w", j.path, ErrClosed)
	case j.readOnly:
		return nil
	case j.failed != nil:
		return j.failed
	}
	return j.waitDurable(j.writeSeq)
}

// write appends one framed record to the file (one write(2), which the
// O_APPEND file places at its end) and returns the record's sequence
// number. A failed or short write latches. Called with mu held.
func (j *Journal) write(rec []byte) (uint64, error) {
	n, err := j.f.Write(rec)
	if err == nil && n != len(rec) {
		err = io.ErrShortWrite
	}
	if err != nil {
		j.fail(fmt.Errorf("filejournal: %s: write: %w", j.path, err))
		return 0, j.failed
	}
	if cap(rec) > rewriteChunk {
		j.buf = nil // do not keep a large completion's buffer for good
	}
	j.size += int64(len(rec))
	j.records++
	j.appends++
	j.writeSeq++
	return j.writeSeq, nil
}

// waitDurable returns once an fsync has covered record seq, running that
// fsync itself if none is running (the group commit leader), or returns the
// latched failure. Called with mu held; mu is released during the fsync
// and while waiting.
func (j *Journal) waitDurable(seq uint64) error {
	for j.syncedSeq < seq {
		if j.failed != nil {
			return j.failed
		}
		if j.syncing {
			j.park(seq)
			continue
		}
		if j.f == nil {
			// Closed: Close synced every record written before it.
			return fmt.Errorf("filejournal: %s: %w", j.path, ErrClosed)
		}
		// Lead: every record written so far (up to target) is in the
		// file, and this fsync covers all of them. Records written while
		// it runs wait for the next one.
		j.syncing = true
		// Let the goroutines that are already runnable run first, mu
		// released: the fsync is about to hold this goroutine's P in a
		// blocking system call until the runtime hands the P to another
		// thread, which can take a while. Those goroutines would
		// otherwise wait behind it, and the Begins among them write
		// their records in time to share this fsync. A lone Begin finds
		// nothing else to run and goes straight on. There is no timer.
		j.mu.Unlock()
		yield()
		j.mu.Lock()
		if j.failed != nil {
			// A write failed meanwhile: the file is done (J6).
			j.syncing = false
			j.wakeWaiters()
			return j.failed
		}
		target, end, f := j.writeSeq, j.size, j.f
		group := target - j.syncedSeq
		j.mu.Unlock()
		began := time.Now()
		err := f.Sync()
		if j.opt.OnSync != nil {
			j.opt.OnSync(time.Since(began), int(group), err)
		}
		j.mu.Lock()
		j.syncing = false
		j.syncs++
		if err != nil {
			// Never retried: see the package comment above.
			j.fail(fmt.Errorf("filejournal: %s: fsync: %w", j.path, err))
		} else if j.failed != nil {
			// A write failed while this fsync ran, and the latch forgot
			// the operations it was to cover: their Begins, this one's
			// included, return that failure, as the index says. Nothing
			// counts as synced on a failed journal.
		} else if target > j.syncedSeq {
			j.syncedSeq = target
			j.syncedEnd = end
		}
		j.wakeWaiters()
	}
	return nil
}

// yield is how a group commit's leader lets the runnable goroutines run
// before its fsync: runtime.Gosched, which tests replace to act in it.
var yield = runtime.Gosched

// keyOf returns the key of operation e, from its intent record. Called
// with mu held.
func (j *Journal) keyOf(e *entry) (string, error) {
	r := j.reader()
	if r == nil {
		return "", ErrClosed
	}
	var rec Record
	if err := j.loadIntent(j.preader(r), e, &rec); err != nil {
		return "", err
	}
	return rec.Key, nil
}
