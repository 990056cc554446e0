package fileengine

// Reading records back. An open journal keeps in memory only each
// operation's Meta and where its records are in the file (index.go); the
// key, method, URL and fingerprint, and the outcome's header and body, are
// read from the file when a record is asked for (Lookup, List,
// compaction). So the heap an open journal holds does not grow with the
// size of the recorded responses.
//
// What is read back is checked as recovery checked it (J1): the record's
// header and data checksums, its padding, its type, its size, and that it
// names the operation and says what the index holds of it. A record that
// changed on disk after the journal was opened is reported as a
// *CorruptError (ErrCorrupt) at its offset, never returned wrong.
//
// Offsets are only valid for the file the index was built from. Every
// read happens with mu held, as does everything that replaces the file
// (compaction, Forget, Close): a read never sees an offset of one file
// applied to another.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// checkRecord checks b, the whole framed record the index says has type t
// and size len(b), and returns its payload, or why it is not that record.
func checkRecord(b []byte, t recordType) ([]byte, string) {
	if len(b) < minRecordSize {
		return nil, fmt.Sprintf("record of %d bytes is too short", len(b))
	}
	h := b[:recordHeaderSize]
	if binary.LittleEndian.Uint32(h[8:12]) != crc32.Checksum(h[:8], castagnoli) {
		return nil, "record header checksum mismatch"
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	switch {
	case recordType(h[4]) != t:
		return nil, fmt.Sprintf("record type %d, want %d", h[4], t)
	case h[5]|h[6]|h[7] != 0:
		return nil, "reserved record header bytes are not zero"
	case n > MaxPayload || recordSize(int(n)) != int64(len(b)):
		return nil, fmt.Sprintf("record length %d does not fit the %d-byte record read at open", n, len(b))
	}
	end := recordHeaderSize + int(n)
	payload := b[recordHeaderSize:end]
	if binary.LittleEndian.Uint32(b[end:end+recordCRCSize]) != crc32.Update(typeCRC[t], castagnoli, payload) {
		return nil, "record data checksum mismatch"
	}
	for _, c := range b[end+recordCRCSize:] {
		if c != 0 {
			return nil, "padding byte is not 0"
		}
	}
	return payload, ""
}

// readAt returns the file's bytes [off, off+n), in a buffer valid until
// the next call. A file that ends before off+n returns
// io.ErrUnexpectedEOF.
type readAt func(off int64, n int) ([]byte, error)

// readBufMax is the largest read buffer a journal keeps between reads.
const readBufMax = 64 << 10

// preader reads from r with one ReadAt per call, into a buffer the journal
// reuses (reads happen with mu held). What is decoded from it is copied.
func (j *Journal) preader(r io.ReaderAt) readAt {
	return func(off int64, n int) ([]byte, error) {
		b := j.rbuf
		if cap(b) < n {
			b = make([]byte, n)
			if n <= readBufMax {
				j.rbuf = b
			}
		}
		b = b[:n]
		got, err := r.ReadAt(b, off)
		if got == n {
			return b, nil
		}
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// chunkReader reads through fr, whose buffer serves reads that move
// forward through the file with few system calls.
func chunkReader(fr *fileReader) readAt {
	return func(off int64, n int) ([]byte, error) {
		b, err := fr.at(off, n)
		if err == nil && len(b) < n {
			err = io.ErrUnexpectedEOF
		}
		return b, err
	}
}

// reader returns what the journal's records are read from: the journal
// file, or nil once it is closed. Called with mu held.
func (j *Journal) reader() io.ReaderAt {
	switch {
	case j.f != nil:
		return j.f
	case j.ro != nil:
		return j.ro
	}
	return nil
}

// load returns the whole record of e, read from the file. Called with mu
// held.
func (j *Journal) load(e *entry) (Record, error) {
	r := j.reader()
	if r == nil {
		return Record{}, fmt.Errorf("filejournal: %s: reading operation %s: %w", j.path, QuoteID(e.ID), ErrClosed)
	}
	var rec Record
	read := j.preader(r)
	if err := j.loadIntent(read, e, &rec); err != nil {
		return Record{}, err
	}
	if err := j.loadOutcome(read, e, &rec); err != nil {
		return Record{}, err
	}
	return rec, nil
}

// loadIntent reads e's intent record into r.
func (j *Journal) loadIntent(read readAt, e *entry, r *Record) error {
	b, err := read(e.intentAt, int(e.intentSize))
	if err != nil {
		return j.readBackError(e, e.intentAt, err)
	}
	p, reason := checkRecord(b, recIntent)
	if reason == "" {
		reason = decodeIntent(p, r)
	}
	switch {
	case reason != "":
	case r.ID != e.ID || r.Created != e.Created:
		reason = fmt.Sprintf("the intent there is operation %s's, created at %d", QuoteID(r.ID), r.Created)
	case r.KeyTTL != e.KeyTTL:
		reason = fmt.Sprintf("the intent there has a key lifetime of %d ns, not the %d indexed", r.KeyTTL, e.KeyTTL)
	case keySum(r.Key) != e.keySum:
		reason = "the intent there holds another key than the one indexed"
	}
	if reason != "" {
		return j.readBackCorrupt(e, e.intentAt, reason)
	}
	return nil
}

// loadOutcome reads e's completion record, if it has one, into r's State
// and Outcome.
func (j *Journal) loadOutcome(read readAt, e *entry, r *Record) error {
	if !e.State.final() {
		return nil
	}
	b, err := read(e.completionAt, int(e.completionSize))
	if err != nil {
		return j.readBackError(e, e.completionAt, err)
	}
	p, reason := checkRecord(b, recCompletion)
	var o Outcome
	var raw []byte
	if reason == "" {
		var h completionHead
		if h, reason = decodeCompletionHead(p); reason == "" {
			raw, reason = decodeOutcome(&h, &o)
			if reason == "" && (string(h.id) != e.ID || h.state != e.State || o.Completed != e.Completed || o.Status != e.Status || o.Flags != e.Flags) {
				reason = fmt.Sprintf("the completion there (operation %s, state %d, status %d) is not the one read at open", QuoteID(string(h.id)), h.state, o.Status)
			}
		}
	}
	if reason != "" {
		return j.readBackCorrupt(e, e.completionAt, reason)
	}
	o.Raw = string(raw)
	r.State = e.State
	r.Outcome = o
	return nil
}

// readBackCorrupt is the error of a record that fails a check when it is
// read back at off.
func (j *Journal) readBackCorrupt(e *entry, off int64, reason string) error {
	return &CorruptError{Path: j.path, Offset: off, Reason: fmt.Sprintf("reading operation %s back: %s (the file changed after it was opened)", QuoteID(e.ID), reason)}
}

// readBackError is the error of a failed read of a record at off. A file
// that now ends before the record does changed after it was opened.
func (j *Journal) readBackError(e *entry, off int64, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return j.readBackCorrupt(e, off, "the file ends before the record does")
	}
	return fmt.Errorf("filejournal: reading journal %s: operation %s at offset %d: %w", j.path, QuoteID(e.ID), off, err)
}
