package fileengine

// Verifying and salvaging a journal file: reading all of it, past damage,
// for "idem journal verify" and "idem journal salvage".
//
// Recovery (recover.go) stops at the first failed check: a torn tail is
// cut (J2), anything else is reported and the file left alone (J3). Scan
// reads on. After a record that fails a check it resynchronises the way
// recovery decides torn from corrupt: it looks at every 8-byte-aligned
// offset for a record whose header checksum, data checksum, padding and
// type all hold, and goes on from there. Each record it keeps is decoded
// with the same decoders and the same rules as recovery's (an intent
// before its completions, one set of fields per ID), so WriteSalvaged can
// only ever write what a writer once wrote, framed and checksummed anew,
// in a journal that Open reads.
//
// What damage costs is named, per operation:
//
//   - lost: a completion was read whose intent was not (it lay in the
//     damaged bytes). The operation's key is gone with its intent, so it
//     cannot be kept: a person reconciles it by its ID.
//   - ambiguous: an operation whose intent lies before damaged bytes and
//     for which no completion was read. Its completion may have been in
//     those bytes; it is kept pending, which is safe: a rerun resumes it
//     under its key, and the server answers from what it stored.
//
// An intent that was itself in the damaged bytes, with nothing after it
// naming its operation, leaves no trace: the problem's offset, its size and
// the operations read either side of it are all that can be said.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ScannedRecord is a record Scan read whole.
type ScannedRecord struct {
	// Offset is where the record starts in the file, and Size its framed
	// size.
	Offset, Size int64
	// Completion is false for an intent, true for a completion.
	Completion bool
	// ID is the operation the record belongs to.
	ID string
}

// Problem is a stretch of the file Scan could not read.
type Problem struct {
	// Offset is where the unreadable bytes start; End is where the next
	// readable record starts, or the end of the file.
	Offset, End int64
	// Reason says which check failed first.
	Reason string
	// Torn is set for a torn tail (J2): nothing whole follows it, and the
	// next writer that opens the journal cuts it. Anything else is damage.
	Torn bool
	// Before and After are the IDs of the operations of the nearest
	// records read before and after the unreadable bytes, "" where there
	// is none.
	Before, After string
}

// LostOperation is an operation that cannot be salvaged.
type LostOperation struct {
	ID string
	// Reason says why: its intent is unreadable, or it conflicts with an
	// earlier intent for the same ID.
	Reason string
	// Offset is where the record that names it starts.
	Offset int64
}

// ScanReport is what Scan read of a journal file.
type ScanReport struct {
	// Size is the file's size.
	Size int64
	// Records are the records read whole and kept, in file order.
	Records []ScannedRecord
	// Operations are the operations the records make, in the order of
	// their intents, each with its latest readable completion.
	Operations []Record
	// Problems are the unreadable stretches, in file order.
	Problems []Problem
	// Lost are the operations named by a readable record that cannot be
	// kept.
	Lost []LostOperation
	// Ambiguous are the IDs of operations kept pending whose completion
	// may have been in damaged bytes (damage, not a torn tail, after their
	// intent).
	Ambiguous []string
}

// Damaged reports whether the file has a problem other than a torn tail,
// or loses an operation.
func (r *ScanReport) Damaged() bool {
	if len(r.Lost) > 0 {
		return true
	}
	for _, p := range r.Problems {
		if !p.Torn {
			return true
		}
	}
	return false
}

// Scan reads the whole journal file r of size bytes, past damage, and
// reports what it holds and what it could not read. It writes nothing. An
// error is returned for a failed read, and, as a *CorruptError at offset 0,
// for a file that is not a journal: its header fails its check and no
// record in it does. An empty file is an empty journal, as Open takes it.
func Scan(r io.ReaderAt, size int64) (*ScanReport, error) {
	rep := &ScanReport{Size: size}
	if size == 0 {
		return rep, nil
	}
	fr := newFileReader(r, size)
	h, err := fr.at(0, fileHeaderSize)
	if err != nil {
		return nil, err
	}
	s := scanner{fr: fr, rep: rep, ops: map[string]int{}}
	off := int64(fileHeaderSize)
	if reason := checkFileHeader(h); reason != "" {
		next, found, err := s.resync(fileHeaderSize)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &CorruptError{Offset: 0, Reason: reason}
		}
		s.problem(0, next, "file header: "+reason, false)
		off = next
	}
	if err := s.run(off); err != nil {
		return nil, err
	}
	s.finish()
	return rep, nil
}

// scanner is Scan's state.
type scanner struct {
	fr  *fileReader
	rep *ScanReport
	ops map[string]int // operation ID → index in rep.Operations
	// intentOff[i] is where the intent of rep.Operations[i] starts.
	intentOff []int64
	completed []bool
}

// run reads records from off to the end of the file.
func (s *scanner) run(off int64) error {
	size := s.fr.size
	for off < size {
		fm, check, reason, err := s.fr.check(off)
		if err != nil {
			return err
		}
		var searchFrom int64
		switch check {
		case recordOK:
			if reason := s.apply(off, fm); reason != "" {
				// Whole and checksummed, so its size is as written:
				// only this record is unreadable.
				s.problem(off, off+fm.size, reason, false)
			}
			off += fm.size
			continue
		case recordShort:
			// The file ends inside the record: nothing can follow it.
			s.problem(off, size, "the file ends inside a record", true)
			return nil
		case recordBadHeader:
			reason, searchFrom = "record header checksum mismatch", off+recordAlign
		case recordBadData:
			// The header's checksum holds, so its length does: the
			// record's own bytes are not searched for another.
			reason, searchFrom = "record data checksum mismatch", off+fm.size
		case recordInvalid:
			searchFrom = off + recordAlign
		}
		// Torn or damaged, decided as recovery decides it.
		valid, err := s.fr.validFrom(searchFrom)
		if err != nil {
			return err
		}
		next, found, err := s.resync(searchFrom)
		if err != nil {
			return err
		}
		if !found {
			next = size
		}
		s.problem(off, next, reason, !valid && check != recordInvalid)
		off = next
	}
	return nil
}

// resync returns the first aligned offset from off on where a record
// passes every check of its frame.
func (s *scanner) resync(off int64) (int64, bool, error) {
	for p := off; p+minRecordSize <= s.fr.size; p += recordAlign {
		_, check, _, err := s.fr.check(p)
		if err != nil {
			return 0, false, err
		}
		if check == recordOK {
			return p, true, nil
		}
	}
	return 0, false, nil
}

// apply decodes a whole record and adds it, by recovery's rules. It
// returns why the record cannot be decoded, or "": a record that decodes
// but cannot be kept (a completion without its intent, a second intent
// with other fields) is listed in Lost instead.
func (s *scanner) apply(off int64, fm frame) string {
	rep := s.rep
	switch fm.typ {
	case recIntent:
		var r Record
		if reason := decodeIntent(fm.payload, &r); reason != "" {
			return reason
		}
		if i, ok := s.ops[r.ID]; ok {
			old := &rep.Operations[i]
			if old.Key != r.Key || old.Fingerprint != r.Fingerprint || old.Method != r.Method || old.URL != r.URL || old.Created != r.Created {
				rep.Lost = append(rep.Lost, LostOperation{ID: r.ID, Offset: off,
					Reason: "a second intent with different fields; the first is kept"})
				return ""
			}
		} else {
			s.ops[r.ID] = len(rep.Operations)
			rep.Operations = append(rep.Operations, r)
			s.intentOff = append(s.intentOff, off)
			s.completed = append(s.completed, false)
		}
		rep.Records = append(rep.Records, ScannedRecord{Offset: off, Size: fm.size, ID: r.ID})
	case recCompletion:
		h, reason := decodeCompletionHead(fm.payload)
		if reason != "" {
			return reason
		}
		var o Outcome
		raw, reason := decodeOutcome(&h, &o)
		if reason != "" {
			return reason
		}
		o.Raw = string(raw)
		id := string(h.id)
		i, ok := s.ops[id]
		if !ok {
			rep.Lost = append(rep.Lost, LostOperation{ID: id, Offset: off,
				Reason: fmt.Sprintf("its intent, and so its key, is unreadable; its completion says %s, status %d", stateName(h.state), o.Status)})
			return ""
		}
		rep.Operations[i].State = h.state
		rep.Operations[i].Outcome = o
		s.completed[i] = true
		rep.Records = append(rep.Records, ScannedRecord{Offset: off, Size: fm.size, Completion: true, ID: id})
	}
	return ""
}

// problem notes the unreadable bytes [off, end).
func (s *scanner) problem(off, end int64, reason string, torn bool) {
	s.rep.Problems = append(s.rep.Problems, Problem{Offset: off, End: end, Reason: reason, Torn: torn})
}

// finish names the operations either side of each problem, and the
// operations left ambiguous by damage.
func (s *scanner) finish() {
	rep := s.rep
	for i := range rep.Problems {
		p := &rep.Problems[i]
		for _, r := range rep.Records {
			if r.Offset < p.Offset {
				p.Before = r.ID
			} else if r.Offset >= p.End && p.After == "" {
				p.After = r.ID
			}
		}
	}
	last := lastDamage(rep.Problems)
	for i, r := range rep.Operations {
		if !s.completed[i] && s.intentOff[i] < last {
			rep.Ambiguous = append(rep.Ambiguous, r.ID)
		}
	}
}

// lastDamage is the offset of the last problem that is not a torn tail.
func lastDamage(ps []Problem) int64 {
	last := int64(-1)
	for _, p := range ps {
		if !p.Torn {
			last = p.Offset
		}
	}
	return last
}

// stateName names a final state for a message.
func stateName(s State) string {
	switch s {
	case Done:
		return "done"
	case Rejected:
		return "rejected"
	}
	return "pending"
}

// salvageSuffix names the file WriteSalvaged writes before renaming it.
// It is the compaction's, so that Open of the new journal removes one a
// crash left behind.
const salvageSuffix = compactSuffix

// WriteSalvaged writes a new journal at path holding ops, in order, each
// as an intent and, when its state is final, its completion, the way
// compaction writes a journal (J7): to a temporary file beside path,
// fsync'd, renamed to path, the directory fsync'd. It refuses, with an
// error matching fs.ErrExist, when something is at path already; the name
// is claimed first, with an empty file (which Open takes for an empty
// journal), so it never replaces what another process created meanwhile.
// The file gets mode perm.
func WriteSalvaged(path string, ops []Record, perm os.FileMode) error {
	return writeSalvaged(path, ops, Options{FileMode: perm})
}

// writeSalvaged is WriteSalvaged with the file seams of o (FileMode,
// WrapFile, syncDir, rename).
func writeSalvaged(path string, ops []Record, o Options) (err error) {
	if o.FileMode == 0 {
		o.FileMode = DefaultFileMode
	}
	claim, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.FileMode)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := claim.Close(); err != nil {
		return err
	}
	j := newJournal(o)
	j.path, j.file = path, path
	for i := range ops {
		if err := CheckIDKey(ops[i].ID, ops[i].Key, true); err != nil {
			return fmt.Errorf("salvaging operation %s: %w", QuoteID(ops[i].ID), err)
		}
	}
	tmp := path + salvageSuffix
	source := func(i int) (Record, error) { return ops[i], nil }
	if _, _, err := j.writeFile(tmp, len(ops), source, nil); err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return err
	}
	if err := j.opt.rename(tmp, path); err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("renaming %s into place: %w", tmp, err)
	}
	renamed = true
	if err := j.opt.syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("fsync of directory after rename: %w", err)
	}
	return nil
}
