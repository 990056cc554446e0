package filejournal

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
	// The file's size says little of how many operations it holds, since
	// their records hold whole responses. Once the first sizingSample
	// bytes are read, the index is sized for the whole file at the rate
	// they held operations: growing a map of millions costs more than
	// reading the file.
	j.idx = newIndex(0)
	sized := false
	off := int64(fileHeaderSize)
	for off < size {
		fm, check, reason, err := fr.check(off)
		if err != nil {
			return j.readError(err)
		}
		switch check {
		case recordOK:
			if reason := j.apply(f, off, fm); reason != "" {
				return j.corrupt(off, reason)
			}
			j.records++
			off += fm.size
			if !sized && off >= sizingSample {
				sized = true
				j.idx.reserve(int(float64(j.idx.len()) * float64(size) / float64(off) * 1.05))
			}
			continue
		case recordInvalid:
			return j.corrupt(off, reason)
		case recordBadHeader:
			reason, err = j.tornOrCorrupt(fr, off, off+recordAlign, "record header checksum mismatch")
		case recordBadData:
			reason, err = j.tornOrCorrupt(fr, off, off+fm.size, "record data checksum mismatch")
		case recordShort:
			// Nothing can follow a record that runs past the end of the
			// file: it is the tail.
		}
		if err != nil {
			return j.readError(err)
		}
		if reason != "" {
			return j.corrupt(off, reason)
		}
		return j.cutTornTail(f, off, size)
	}
	j.size = off
	return nil
}

// tornOrCorrupt returns reason if a whole record follows from searchFrom
// on (the failure at off is corruption), or "" if none does (a torn tail).
// sizingSample is how many bytes recovery reads before it sizes the index
// for the rest of the file.
const sizingSample = 4 << 20

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
		j.log.Debug("idem: ignoring torn journal tail (read-only)", "path", j.path, "offset", off, "bytes", size-off)
		return nil
	}
	j.log.Warn("idem: truncating torn journal tail", "path", j.path, "offset", off, "bytes", size-off)
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("idem: journal %s: truncating torn tail at %d: %w", j.path, off, err)
	}
	j.syncs++
	if err := f.Sync(); err != nil {
		return fmt.Errorf("idem: journal %s: fsync after truncating torn tail: %w", j.path, err)
	}
	return nil
}

// apply adds the whole, checksummed record at off to the index and returns
// why it cannot, or "". The index keeps the operation's Meta and where the
// record is; the rest stays in the file (read.go).
func (j *Journal) apply(f File, off int64, fm frame) string {
	switch fm.typ {
	case recIntent:
		return j.applyIntent(f, off, fm)
	case recCompletion:
		return j.applyCompletion(off, fm)
	}
	return fmt.Sprintf("unknown record type %d", fm.typ)
}

func (j *Journal) applyIntent(f File, off int64, fm frame) string {
	s, reason := parseIntent(fm.payload)
	if reason != "" {
		return reason
	}
	e := j.idx.alloc()
	e.ID = string(fm.payload[s.idA:s.idB])
	e.Created = s.created
	e.State = Pending
	e.intentAt = off
	e.intentSize = uint32(fm.size)
	old := j.idx.insert(e)
	if old == nil {
		return ""
	}
	// The ID was seen before (rare: a repeated record, or damage). A
	// repeat of the same intent changes nothing; another is corruption.
	var r Record
	decodeIntent(fm.payload, &r)
	j.idx.unalloc()
	var was Record
	if err := j.loadIntent(j.preader(f), old, &was); err != nil {
		return fmt.Sprintf("second intent for operation %s, and the first cannot be read back: %v", QuoteID(old.ID), err)
	}
	if was.Key != r.Key || was.Fingerprint != r.Fingerprint || was.Method != r.Method || was.URL != r.URL || was.Created != r.Created {
		return fmt.Sprintf("second intent for operation %s with different fields", QuoteID(old.ID))
	}
	return ""
}

func (j *Journal) applyCompletion(off int64, fm frame) string {
	h, reason := decodeCompletionHead(fm.payload)
	if reason != "" {
		return reason
	}
	e, ok := j.idx.get(string(h.id))
	if !ok {
		return fmt.Sprintf("completion for operation %s, which has no intent", QuoteID(string(h.id)))
	}
	var o Outcome
	if _, reason := decodeOutcome(&h, &o); reason != "" {
		return reason
	}
	e.State = h.state
	e.Completed, e.Status, e.Flags = o.Completed, o.Status, o.Flags
	e.completionAt = off
	e.completionSize = uint32(fm.size)
	return ""
}

func (j *Journal) corrupt(off int64, reason string) error {
	return &CorruptError{Path: j.path, Offset: off, Reason: reason}
}

func (j *Journal) readError(err error) error {
	return fmt.Errorf("idem: reading journal %s: %w", j.path, err)
}
