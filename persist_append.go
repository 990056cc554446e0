package idem

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
//   - Group commit: records are written under mu, but the fsync runs
//     without it. A Begin that finds an fsync running waits for it to end;
//     then one of the waiters (the leader) runs one fsync for every record
//     written so far while the others wait for it. No timer, no delay: a
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
	"time"
)

// Begin records the intent of op (ID, Key, Fingerprint, Method, URL,
// Created) and returns once the record is durable: written and fsync'd,
// sharing the fsync with concurrent Begins. A zero Created is set from the
// journal's clock. op.State must be zero or Pending, and the outcome fields
// must be zero.
//
// Begin refuses an empty or over-long ID or key (ErrInvalidOperation) and an
// ID the journal already holds (ErrOperationExists). After a failed write or
// fsync it returns that failure, as does every later append. When Begin
// returns an error the operation is not in the journal: Lookup does not
// find it, and it must not be sent.
//
// The operation is in the index (Lookup finds it) from the moment its
// record is written, while Begin still waits for the fsync; callers that
// may Begin and Lookup the same ID concurrently must order those calls
// themselves.
func (j *FileJournal) Begin(op Operation) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("begin"); err != nil {
		return err
	}
	if err := checkIntent(&op); err != nil {
		return fmt.Errorf("idem: journal %s: begin %s: %w", j.path, quoteID(op.ID), err)
	}
	if _, ok := j.idx.get(op.ID); ok {
		return fmt.Errorf("idem: journal %s: begin %s: %w", j.path, quoteID(op.ID), ErrOperationExists)
	}
	if op.Created.IsZero() {
		op.Created = j.opt.Now()
	}
	e := entry{
		id:      op.ID,
		key:     op.Key,
		fp:      op.Fingerprint,
		method:  op.Method,
		url:     op.URL,
		created: op.Created.UnixNano(),
		state:   Pending,
	}
	buf, start := beginRecord(j.buf[:0])
	buf, err := endRecord(appendIntent(buf, &e), start, recIntent)
	j.buf = buf
	if err != nil {
		return fmt.Errorf("idem: journal %s: begin %s: %w", j.path, quoteID(op.ID), err)
	}
	seq, err := j.write(buf)
	if err != nil {
		return err
	}
	e.intentSize = uint32(len(buf))
	e.seq = seq
	j.idx.add(&e)
	j.maybeCompact()
	return j.waitDurable(seq)
}

// Complete records the outcome of the operation op.ID: op.State (Done or
// Rejected), Completed (the journal's clock when zero), Status, Header, Body,
// BodyTruncated and HeaderTruncated (Summarized is compaction's to set). It
// returns once the record is written, without waiting for an fsync: losing
// it to a crash only causes a replay under the same key. A later Complete
// for the same ID replaces the outcome.
//
// If op.Key is set it must be the operation's key. Complete refuses an ID
// the journal does not hold (ErrNoSuchOperation), a body kept although
// BodyTruncated is set, Summarized set, and a status outside 0..999
// (ErrInvalidOperation).
func (j *FileJournal) Complete(op Operation) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("complete"); err != nil {
		return err
	}
	if err := checkCompletion(&op); err != nil {
		return fmt.Errorf("idem: journal %s: complete %s: %w", j.path, quoteID(op.ID), err)
	}
	e, ok := j.idx.get(op.ID)
	if !ok {
		return fmt.Errorf("idem: journal %s: complete %s: %w", j.path, quoteID(op.ID), ErrNoSuchOperation)
	}
	if op.Key != "" && op.Key != e.key {
		return fmt.Errorf("idem: journal %s: complete %s: %w: key %q is not the operation's key %q",
			j.path, quoteID(op.ID), ErrInvalidOperation, op.Key, e.key)
	}
	if op.Completed.IsZero() {
		op.Completed = j.opt.Now()
	}
	o := newOutcomeInto(&j.scratch, op.Completed, op.Status, op.flags(), op.Header, op.Body)
	buf, start := beginRecord(j.buf[:0])
	buf, err := endRecord(appendCompletion(buf, e.id, op.State, &o), start, recCompletion)
	j.buf = buf
	if err != nil {
		return fmt.Errorf("idem: journal %s: complete %s: %w", j.path, quoteID(op.ID), err)
	}
	if _, err := j.write(buf); err != nil {
		return err
	}
	e.state = op.State
	e.outcome = o
	e.completionSize = uint32(len(buf))
	j.maybeCompact()
	return nil
}

// Sync returns once every record appended so far is durable, sharing the
// fsync with concurrent Begins. It returns nil for a read-only journal and
// a journal without a file.
func (j *FileJournal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.closed:
		return fmt.Errorf("idem: journal %s: sync: %w", j.path, ErrClosed)
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
func (j *FileJournal) write(rec []byte) (uint64, error) {
	if !j.memory {
		n, err := j.f.Write(rec)
		if err == nil && n != len(rec) {
			err = io.ErrShortWrite
		}
		if err != nil {
			j.fail(fmt.Errorf("idem: journal %s: write: %w", j.path, err))
			return 0, j.failed
		}
	}
	if cap(rec) > rewriteChunk {
		j.buf = nil // do not keep a large completion's buffer for good
	}
	j.size += int64(len(rec))
	j.records++
	j.appends++
	j.writeSeq++
	if j.memory {
		j.syncedSeq = j.writeSeq
	}
	return j.writeSeq, nil
}

// waitDurable returns once an fsync has covered record seq, running that
// fsync itself if none is running (the group commit leader), or returns the
// latched failure. Called with mu held; mu is released during the fsync
// and while waiting.
func (j *FileJournal) waitDurable(seq uint64) error {
	for j.syncedSeq < seq {
		if j.failed != nil {
			return j.failed
		}
		if j.syncing {
			j.cond.Wait()
			continue
		}
		if j.f == nil {
			// Closed: Close synced every record written before it.
			return fmt.Errorf("idem: journal %s: %w", j.path, ErrClosed)
		}
		// Lead: every record written so far (up to target) is in the
		// file, and this fsync covers all of them. Records written while
		// it runs wait for the next one.
		j.syncing = true
		target, f := j.writeSeq, j.f
		j.mu.Unlock()
		err := f.Sync()
		j.mu.Lock()
		j.syncing = false
		j.syncs++
		if err != nil {
			// Never retried: see the package comment above.
			j.fail(fmt.Errorf("idem: journal %s: fsync: %w", j.path, err))
		} else if target > j.syncedSeq {
			j.syncedSeq = target
		}
		j.cond.Broadcast()
	}
	return nil
}

// checkIntent validates op for Begin.
func checkIntent(op *Operation) error {
	if err := checkIDKey(op.ID, op.Key, true); err != nil {
		return err
	}
	switch {
	case op.State != 0 && op.State != Pending:
		return fmt.Errorf("%w: state is %s, want pending", ErrInvalidOperation, op.State)
	case !op.Completed.IsZero() || op.Status != 0 || op.Header != nil || op.Body != nil ||
		op.BodyTruncated || op.HeaderTruncated || op.Summarized:
		return fmt.Errorf("%w: outcome fields are set on an intent", ErrInvalidOperation)
	}
	return checkTime("created", op.Created)
}

// checkCompletion validates op for Complete.
func checkCompletion(op *Operation) error {
	if err := checkIDKey(op.ID, op.Key, false); err != nil {
		return err
	}
	switch {
	case !op.State.final():
		return fmt.Errorf("%w: state is %s, want done or rejected", ErrInvalidOperation, op.State)
	case op.Status < 0 || op.Status > maxStatus:
		return fmt.Errorf("%w: status %d is outside 0..%d", ErrInvalidOperation, op.Status, maxStatus)
	case op.BodyTruncated && len(op.Body) > 0:
		return fmt.Errorf("%w: a truncated body is not kept, but Body has %d bytes", ErrInvalidOperation, len(op.Body))
	case op.Summarized:
		return fmt.Errorf("%w: only compaction summarizes an outcome", ErrInvalidOperation)
	}
	return checkTime("completed", op.Completed)
}

func checkIDKey(id, key string, keyRequired bool) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty operation ID", ErrInvalidOperation)
	case len(id) > maxIDLen:
		return fmt.Errorf("%w: operation ID is %d bytes, over %d", ErrInvalidOperation, len(id), maxIDLen)
	case key == "" && keyRequired:
		return fmt.Errorf("%w: empty key", ErrInvalidOperation)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, over %d", ErrInvalidOperation, len(key), maxKeyLen)
	}
	return nil
}

// checkTime refuses a time a record cannot hold; zero means "now".
func checkTime(what string, t time.Time) error {
	if !t.IsZero() && (t.Before(minStoredTime) || t.After(maxStoredTime)) {
		return fmt.Errorf("%w: %s time %v is outside the range the journal stores (years 1678 to 2262)", ErrInvalidOperation, what, t)
	}
	return nil
}
