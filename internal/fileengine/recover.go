package fileengine

// Recovery: reading a journal file front to back into the index, and
// telling a torn tail (cut away, J2) from corruption (reported, never cut,
// J3).
//
// Only the end of a journal can be torn: records are appended, and a crash
// interrupts at most the writes after the last completed fsync. So a record
// that fails a check is a torn write only when nothing after it was written
// in full. Recovery looks for such a later record at every 8-byte-aligned
// offset (any header whose own checksum holds and whose data checksum
// holds); finding one proves the failure is damage in the middle of the
// file. Cutting there would silently drop operations whose next send would
// carry a new key, so it is reported as a *CorruptError instead.
//
// When the failed record's header checksum holds, its length is trusted and
// the search starts after the record; otherwise it starts at the next
// aligned offset. A record whose checksums hold but that breaks the format
// (reserved bytes, length limit, padding, type, payload encoding, an
// unknown ID) was written that way, not torn, and is corruption wherever it
// is.

import (
	"fmt"
	"sync/atomic"
)

// recover reads the file of size bytes into the index, and truncates a torn
// tail unless the journal is read-only. It leaves j.size at the end of the
// last whole record; what it read counts as durable (openWritable fsyncs
// it).
func (j *Journal) recover(f File, size int64) error {
	err := j.recoverRecords(f, size)
	j.syncedEnd = j.size
	return err
}

func (j *Journal) recoverRecords(f File, size int64) error {
	fr := newFileReader(f, size)
	h, err := fr.at(0, fileHeaderSize)
	if err != nil {
		return j.readError(err)
	}
	if reason := checkFileHeader(h); reason != "" {
		return j.corrupt(0, reason)
	}
	// Records are checked and decoded here, in batches, and added to the
	// index by a goroutine of its own (indexer), in file order, while the
	// next batch is decoded; the file is read ahead by another.
	j.idx = newIndex(0)
	fr.startReadAhead()
	defer fr.stopReadAhead()
	ix := j.startIndexer(f, size)
	defer ix.wait()
	off := int64(fileHeaderSize)
	var fm frame
	check, reason := recordOK, ""
	for off < size && check == recordOK && !ix.failed.Load() {
		b := <-ix.free
		b.reset()
		for len(b.recs) < batchSize && off < size {
			fm, check, reason, err = fr.check(off)
			if err != nil {
				return j.readError(err)
			}
			if check != recordOK {
				break
			}
			if reason = b.add(&j.idx, off, fm); reason != "" {
				check = recordInvalid
				break
			}
			off += fm.size
		}
		b.end = off
		ix.full <- b
	}
	// A record the index refused lies before anything found here.
	if at, reason := ix.wait(); reason != "" {
		return j.corrupt(at, reason)
	}
	switch check {
	case recordOK:
		j.size = off
		return nil
	case recordInvalid:
		return j.corrupt(off, reason)
	case recordBadHeader:
		reason, err = j.tornOrCorrupt(fr, off, off+recordAlign, "record header checksum mismatch")
	case recordBadData:
		reason, err = j.tornOrCorrupt(fr, off, off+fm.size, "record data checksum mismatch")
	case recordShort:
		// Nothing can follow a record that runs past the end of the file:
		// it is the tail.
	}
	if err != nil {
		return j.readError(err)
	}
	if reason != "" {
		return j.corrupt(off, reason)
	}
	fr.stopReadAhead() // before the file is cut
	return j.cutTornTail(f, off, size)
}

// indexer adds the batches recovery decodes to the index, in order, on a
// goroutine of its own. Once the first sizingSample bytes are in, it sizes
// the index for the whole file at the rate they held operations: the
// file's size says little of how many operations it holds, since their
// records hold whole responses, and growing the index record by record
// costs more than reading the file.
type indexer struct {
	full   chan *batch // decoded, to add
	free   chan *batch // added, to reuse
	done   chan struct{}
	failed atomic.Bool
	closed bool
	// at and reason are the first record the index refused, and why.
	at     int64
	reason string
}

// indexerBatches is how many batches are in flight between recovery and
// its indexer.
const indexerBatches = 4

// startIndexer starts adding batches to j's index; wait ends it.
func (j *Journal) startIndexer(f File, size int64) *indexer {
	ix := &indexer{
		full: make(chan *batch, indexerBatches),
		free: make(chan *batch, indexerBatches),
		done: make(chan struct{}),
	}
	for range indexerBatches {
		ix.free <- &batch{}
	}
	go func() {
		defer close(ix.done)
		sized := false
		for b := range ix.full {
			if ix.reason == "" {
				if at, reason := j.applyBatch(f, b); reason != "" {
					ix.at, ix.reason = at, reason
					ix.failed.Store(true)
				} else if !sized && b.end >= sizingSample {
					sized = true
					j.idx.reserve(int(float64(j.idx.len()) * float64(size) / float64(b.end) * 1.05))
				}
			}
			ix.free <- b
		}
	}()
	return ix
}

// wait returns once every batch sent is added, with the first record the
// index refused, if any. It may be called again.
func (ix *indexer) wait() (int64, string) {
	if !ix.closed {
		ix.closed = true
		close(ix.full)
	}
	<-ix.done
	return ix.at, ix.reason
}

// sizingSample is how many bytes recovery reads before it sizes the index
// for the rest of the file.
const sizingSample = 4 << 20

// tornOrCorrupt returns reason if a whole record follows from searchFrom
// on (the failure at off is corruption), or "" if none does (a torn tail).
func (j *Journal) tornOrCorrupt(fr *fileReader, off, searchFrom int64, reason string) (string, error) {
	found, err := fr.validFrom(searchFrom)
	if err != nil || !found {
		return "", err
	}
	return reason + "; a valid record follows, so this is not a torn tail", nil
}

// cutTornTail drops the bytes from off to size: the remains of appends a
// crash interrupted, none of which had been reported durable. The cut is
// fsync'd before anything is appended, so a later append can never land
// after leftover bytes and be mistaken for damage.
func (j *Journal) cutTornTail(f File, off, size int64) error {
	j.size = off
	j.truncated = size - off
	if j.readOnly {
		j.log.Debug("filejournal: ignoring torn journal tail (read-only)", "path", j.path, "offset", off, "bytes", size-off)
		return nil
	}
	j.log.Warn("filejournal: truncating torn journal tail", "path", j.path, "offset", off, "bytes", size-off)
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("filejournal: %s: truncating torn tail at %d: %w", j.path, off, err)
	}
	j.syncs++
	if err := f.Sync(); err != nil {
		return fmt.Errorf("filejournal: %s: fsync after truncating torn tail: %w", j.path, err)
	}
	return nil
}

// batchSize is how many records recovery decodes before it adds them to
// the index.
const batchSize = 512

// batch is records recovery checked and decoded, in file order, waiting to
// be added to the index. Adding a record costs a read of its slot in the
// index's table, and in a table of millions of slots that read is a cache
// miss: a tenth of a microsecond, twice per operation, most of recovery's
// time if taken one after the other. applyBatch first reads the slots of
// the whole batch, reads that do not depend on each other and so overlap,
// then adds the records one by one, their slots now in the cache.
type batch struct {
	recs  []decoded
	names []byte // the IDs of the batch's completions, back to back
	end   int64  // the offset after the batch's last record
}

// decoded is a record of a batch: what the index keeps of it.
type decoded struct {
	off        int64
	size       uint32
	completion bool
	hash       uint32 // of the ID, in the index
	keySum     uint64 // an intent's keySum
	id         string // an intent's ID
	idA, idB   int    // a completion's ID: batch.names[idA:idB]
	created    int64  // an intent's, and its key lifetime
	keyTTL     int64
	state      State // a completion's, and its outcome:
	completed  int64
	status     int32
	flags      uint8
}

func (b *batch) reset() {
	b.recs, b.names = b.recs[:0], b.names[:0]
}

// add decodes the whole, checksummed record at off into the batch, and
// returns why it cannot, or "".
func (b *batch) add(x *index, off int64, fm frame) string {
	d := decoded{off: off, size: uint32(fm.size)}
	switch fm.typ {
	case recIntent:
		s, reason := parseIntent(fm.payload)
		if reason != "" {
			return reason
		}
		d.id = string(fm.payload[s.idA:s.idB])
		d.hash = x.hash(d.id)
		d.keySum = keySumBytes(fm.payload[s.keyA:s.keyB])
		d.created, d.keyTTL = s.created, s.keyTTL
	case recCompletion:
		h, reason := decodeCompletionHead(fm.payload)
		if reason != "" {
			return reason
		}
		var o Outcome
		if _, reason := decodeOutcome(&h, &o); reason != "" {
			return reason
		}
		d.completion = true
		d.idA = len(b.names)
		b.names = append(b.names, h.id...)
		d.idB = len(b.names)
		d.hash = x.hashBytes(h.id)
		d.state, d.completed, d.status, d.flags = h.state, o.Completed, o.Status, o.Flags
	default:
		return fmt.Sprintf("unknown record type %d", fm.typ)
	}
	b.recs = append(b.recs, d)
	return ""
}

// applyBatch adds the batch's records to the index, in order, and returns
// the offset of the first that cannot be added and why, or "".
func (j *Journal) applyBatch(f File, b *batch) (int64, string) {
	j.idx.touch(b.recs)
	for i := range b.recs {
		d := &b.recs[i]
		var reason string
		if d.completion {
			reason = j.applyCompletion(d, b.names[d.idA:d.idB])
		} else {
			reason = j.applyIntent(f, d)
		}
		if reason != "" {
			return d.off, reason
		}
		j.records++
	}
	return 0, ""
}

// applyIntent adds an intent to the index. The index keeps the operation's
// Meta and where the record is; the rest stays in the file (read.go).
func (j *Journal) applyIntent(f File, d *decoded) string {
	e := j.idx.alloc()
	e.ID = d.id
	e.Created = d.created
	e.KeyTTL = d.keyTTL
	e.State = Pending
	e.intentAt = d.off
	e.intentSize = d.size
	e.keySum = d.keySum
	old := j.idx.insertHashed(e, d.hash)
	if old == nil {
		return ""
	}
	// The ID was seen before (rare: a repeated record, or damage). A
	// repeat of the same intent changes nothing; another is corruption.
	again := *e
	j.idx.unalloc()
	var was, r Record
	if err := j.loadIntent(j.preader(f), old, &was); err != nil {
		return fmt.Sprintf("second intent for operation %s, and the first cannot be read back: %v", QuoteID(old.ID), err)
	}
	if err := j.loadIntent(j.preader(f), &again, &r); err != nil {
		return fmt.Sprintf("second intent for operation %s cannot be read back: %v", QuoteID(old.ID), err)
	}
	if was.Key != r.Key || was.Fingerprint != r.Fingerprint || was.Method != r.Method || was.URL != r.URL || was.Created != r.Created || was.KeyTTL != r.KeyTTL {
		return fmt.Sprintf("second intent for operation %s with different fields", QuoteID(old.ID))
	}
	return ""
}

// applyCompletion records a completion of operation id in its entry.
func (j *Journal) applyCompletion(d *decoded, id []byte) string {
	e := findIn(&j.idx, id, d.hash)
	if e == nil {
		return fmt.Sprintf("completion for operation %s, which has no intent", QuoteID(string(id)))
	}
	e.State = d.state
	e.Completed, e.Status, e.Flags = d.completed, d.status, d.flags
	e.completionAt = int64(d.off)
	e.completionSize = d.size
	return ""
}

func (j *Journal) corrupt(off int64, reason string) error {
	return &CorruptError{Path: j.path, Offset: off, Reason: reason}
}

func (j *Journal) readError(err error) error {
	return fmt.Errorf("filejournal: reading journal %s: %w", j.path, err)
}
