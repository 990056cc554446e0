package faultsuite

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/fsutil"
)

// Power cuts. A SIGKILL cannot test fsync ordering: the page cache outlives
// the killed process, so every byte it wrote is still there. A power cut
// keeps only what an fsync made durable. To stage one, the killed process
// journals through SyncLog's file seam, which notes after every fsync that
// returned how long the file was when the fsync began: the bytes the disk
// is then sure to hold. After the kill, CutPower cuts the journal back to
// that length and, as a disk may, leaves part of what followed, torn or
// garbled. The journal must then open (its torn tail cut, J2), and no
// operation the process had sent may be lost from it (C2).
//
// Files are told apart by inode, since compaction renames a new file over
// the journal. A rename is taken as durable once done: the seam does not
// see the journal's directory fsyncs.

// SyncLog is a journal's file seam that logs every successful fsync to a
// file: one line per fsync, "inode size". It is safe for concurrent use.
type SyncLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenSyncLog opens (or creates) the log at path for appending.
func OpenSyncLog(path string) (*SyncLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("faultsuite: opening the sync log: %w", err)
	}
	return &SyncLog{f: f}, nil
}

// Wrap wraps a file of the journal (filefaults.WrapFiles).
func (l *SyncLog) Wrap(f fileengine.File) fileengine.File { return &loggedFile{File: f, log: l} }

// Close closes the log.
func (l *SyncLog) Close() error { return l.f.Close() }

type loggedFile struct {
	fileengine.File
	log *SyncLog
}

// Sync notes the file's length before the fsync once it has returned, and
// before the journal learns that it did.
func (f *loggedFile) Sync() error {
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	ino, ok := fsutil.Inode(fi)
	if !ok {
		return errors.New("faultsuite: the sync log needs inode numbers")
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	_, err = fmt.Fprintf(f.log.f, "%d %d\n", ino, fi.Size())
	return err
}

// PowerCut is what CutPower did to a journal.
type PowerCut struct {
	Durable int64  // bytes an fsync had covered, kept
	Lost    int64  // bytes past them the cut took away or garbled
	How     string // "cut", "torn" (a record cut short) or "garbled" (random bytes or zeros from inside a record on)
	// Torn is how many bytes at the journal's new end are no whole
	// record: exactly what the next open must cut as a torn tail (J2).
	Torn int64
}

// CutPower applies a power cut to the journal at path, by the sync log at
// logPath, drawing from rng how the unsynced tail fares: cut away, torn
// (cut inside one of its records), or garbled (random bytes or zeros
// from inside one of its records to the old end). With garble set, the
// tail is always garbled, and where no whole record was unsynced the
// remains of a write in flight are appended. A journal that does not
// exist yet is left alone.
//
// A tear falls inside a record chosen by rng among the whole records no
// fsync covered. A record cut short may end anywhere inside it; garbling
// starts inside its header, payload or data checksum, never in its
// padding, and changes at least one byte there: a record whose checksums
// hold is whole, and one whose padding alone is garbled is corruption,
// which no torn write makes (J3). So the open that follows must cut the
// tail from that record's start, and Torn says how many bytes that is.
func CutPower(path, logPath string, rng *rand.Rand, garble bool) (PowerCut, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return PowerCut{}, nil
	}
	if err != nil {
		return PowerCut{}, err
	}
	ino, ok := fsutil.Inode(fi)
	if !ok {
		return PowerCut{}, errors.New("faultsuite: power cuts need inode numbers")
	}
	durable, found, err := lastSynced(logPath, ino)
	if err != nil {
		return PowerCut{}, err
	}
	if !found {
		// A journal is renamed into place only after its fsync, which
		// the log notes first: this one was never made durable.
		return PowerCut{Lost: fi.Size(), How: "cut"}, os.Remove(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return PowerCut{}, err
	}
	size := int64(len(data))
	if durable > size {
		return PowerCut{}, fmt.Errorf("faultsuite: %s is %d bytes, but %d were synced", path, size, durable)
	}
	records, whole := journalRecords(data)
	var unsynced []journalRecord // whole records no fsync covered: where a tear may fall
	for _, r := range records {
		if r.start >= durable {
			unsynced = append(unsynced, r)
		}
	}
	mode := rng.IntN(3)
	if garble {
		mode = 2
	}
	pc := PowerCut{Durable: durable, Lost: size - durable, How: "cut"}
	switch {
	case mode == 0 || (mode == 1 && len(unsynced) == 0):
		// The last whole record that ends by durable ends the file's
		// whole part; anything left after it is torn.
		end := int64(journalHeaderSize)
		for _, r := range records {
			if r.end <= durable {
				end = r.end
			}
		}
		pc.Torn = durable - end
		return pc, os.Truncate(path, durable)
	case mode == 1:
		r := unsynced[rng.IntN(len(unsynced))]
		keep := r.start + 1 + rng.Int64N(r.end-r.start-1) // inside r: its header, payload or checksum cut short
		pc.How, pc.Lost, pc.Torn = "torn", size-keep, keep-r.start
		return pc, os.Truncate(path, keep)
	case len(unsynced) == 0:
		// Nothing whole was unsynced: leave the remains of a write that
		// was in flight when the power went, after the whole records.
		junk := make([]byte, 1+rng.IntN(600))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return PowerCut{}, err
		}
		_, err = f.Write(junk)
		pc = PowerCut{Durable: durable, Lost: int64(len(junk)), How: "garbled", Torn: size + int64(len(junk)) - whole}
		return pc, errors.Join(err, f.Close())
	}
	r := unsynced[rng.IntN(len(unsynced))]
	keep := r.start + rng.Int64N(r.checked-r.start) // inside r, before the end of its data checksum
	junk := make([]byte, size-keep)
	if rng.IntN(2) == 0 {
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
	}
	if last := r.checked - 1 - keep; bytes.Equal(junk[:last+1], data[keep:r.checked]) {
		junk[last] = ^data[r.checked-1] // garbled, so that r's checksums fail
	}
	pc.How, pc.Lost, pc.Torn = "garbled", size-keep, size-r.start
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return PowerCut{}, err
	}
	_, err = f.WriteAt(junk, keep)
	return pc, errors.Join(err, f.Close())
}

// The journal's file format, as far as a power cut needs it: a 16-byte
// file header, then records, each starting at a multiple of 8: a 12-byte
// header (payload length, type, three reserved bytes, and the CRC-32C of
// those 8 bytes), the payload, the CRC-32C of the type byte and the
// payload, and zero padding to the next multiple of 8.
const (
	journalHeaderSize = 16
	recordHeaderSize  = 12
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalRecord is where a whole record of a journal file lies: it starts
// at start, its data checksum ends at checked, its padding at end.
type journalRecord struct{ start, checked, end int64 }

// journalRecords returns the whole records of the journal file data, in
// order, and where the last of them ends: where the part of the file
// that is not whole records, a torn tail, starts.
func journalRecords(data []byte) ([]journalRecord, int64) {
	var recs []journalRecord
	off := int64(journalHeaderSize)
	size := int64(len(data))
	for off+recordHeaderSize <= size {
		h := data[off : off+recordHeaderSize]
		if binary.LittleEndian.Uint32(h[8:12]) != crc32.Checksum(h[:8], castagnoli) {
			break
		}
		n := int64(binary.LittleEndian.Uint32(h[0:4]))
		checked := off + recordHeaderSize + n + 4
		end := (checked + 7) &^ 7
		if end > size {
			break
		}
		crc := crc32.Update(crc32.Checksum(h[4:5], castagnoli), castagnoli, data[off+recordHeaderSize:checked-4])
		if binary.LittleEndian.Uint32(data[checked-4:checked]) != crc {
			break
		}
		recs = append(recs, journalRecord{off, checked, end})
		off = end
	}
	return recs, off
}

// lastSynced returns the length the last logged fsync of inode ino covered.
// The last line wins: an inode number freed by compaction may be reused,
// and the file now holding it was synced before it was renamed into place.
func lastSynced(logPath string, ino uint64) (int64, bool, error) {
	f, err := os.Open(logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var size int64
	found := false
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF {
			return size, found, nil // a line cut short by the kill is no fsync
		}
		if err != nil {
			return 0, false, err
		}
		a, b, _ := strings.Cut(strings.TrimSpace(line), " ")
		i, err1 := strconv.ParseUint(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false, fmt.Errorf("faultsuite: bad sync log line %q", line)
		}
		if i == ino {
			size, found = n, true
		}
	}
}
