package fileengine

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// memFile is a File held in memory, so the fuzzer can run recovery, torn
// tail truncation included, without touching the disk.
type memFile struct{ b []byte }

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) Write(p []byte) (int, error) { m.b = append(m.b, p...); return len(p), nil }
func (m *memFile) Sync() error                 { return nil }
func (m *memFile) Close() error                { return nil }

func (m *memFile) Truncate(n int64) error {
	if n < 0 || n > int64(len(m.b)) {
		return errors.New("memFile: bad truncate")
	}
	m.b = m.b[:n]
	return nil
}

func (m *memFile) Stat() (os.FileInfo, error) { return memInfo(len(m.b)), nil }

type memInfo int64

func (i memInfo) Name() string       { return "journal" }
func (i memInfo) Size() int64        { return int64(i) }
func (i memInfo) Mode() os.FileMode  { return 0o600 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// recoverBytes runs recovery over b as a writable journal would and returns
// the journal and the file as recovery left it.
func recoverBytes(b []byte) (*Journal, []byte, error) {
	f := &memFile{b: bytes.Clone(b)}
	j := newJournal(quietOptions())
	j.path = "fuzz.journal"
	j.f = f
	err := j.recover(f, int64(len(f.b)))
	return j, f.b, err
}

// seedJournals returns real journal files for the fuzz corpus.
func seedJournals(f *testing.F) [][]byte {
	path := journalPath(f)
	j, err := Open(path, quietOptions())
	if err != nil {
		f.Fatal(err)
	}
	empty := readFile(f, path)
	for i := range 4 {
		mustBegin(f, j, testIntent(i))
	}
	mustComplete(f, j, testOutcome(testIntent(0), 201, `{"id":"ch_1"}`))
	mustComplete(f, j, Completion{ID: testIntent(1).ID, State: Rejected, Status: 409,
		Header: http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": nil}, Body: []byte("{}")})
	mustComplete(f, j, Completion{ID: testIntent(2).ID, State: Done, Status: 200, Flags: FlagBodyTruncated})
	mustComplete(f, j, testOutcome(testIntent(0), 200, strings.Repeat("r", 100)))
	if err := j.Close(); err != nil {
		f.Fatal(err)
	}
	full := readFile(f, path)
	return [][]byte{
		empty,
		full,
		full[:len(full)-5], // torn
		append(bytes.Clone(full), make([]byte, 40)...),      // zero tail
		append(bytes.Clone(full[:60]), full[100:]...),       // a hole
		append(bytes.Clone(full), full[fileHeaderSize:]...), // repeated records
	}
}

// FuzzDecode feeds arbitrary bytes to recovery as a journal file. Recovery
// must not panic; it either opens the journal or returns an error matching
// ErrCorrupt and leaves the bytes as they were. An opened journal's file,
// as recovery left it, must open again to the same operations with nothing
// more to cut, and rewriting those operations must read back the same.
func FuzzDecode(f *testing.F) {
	for _, b := range seedJournals(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, after, err := recoverBytes(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("recovery error does not match ErrCorrupt: %v", err)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset < 0 || ce.Offset > int64(len(data)) {
				t.Fatalf("recovery error is not a *CorruptError with an offset in the file: %#v", err)
			}
			if !bytes.Equal(after, data) {
				t.Fatal("recovery changed a corrupt file")
			}
			return
		}
		if !bytes.Equal(after, data[:len(after)]) {
			t.Fatal("recovery did more than cut a tail")
		}
		recs := records(j)

		again, after2, err := recoverBytes(after)
		if err != nil {
			t.Fatalf("recovered file does not open again: %v", err)
		}
		if len(after2) != len(after) || again.truncated != 0 {
			t.Fatalf("recovered file had a torn tail again: %d bytes cut", again.truncated)
		}
		if got := records(again); !reflect.DeepEqual(got, recs) {
			t.Fatalf("reopened records differ:\n got  %+v\n want %+v", got, recs)
		}

		// Writing the index out (as compaction does) reads back the same.
		w := &memFile{}
		buf := appendFileHeader(nil)
		for _, r := range recs {
			var start int
			buf, start = beginRecord(buf)
			buf, _ = endRecord(appendIntent(buf, &r), start, recIntent)
			if r.State.final() {
				buf, start = beginRecord(buf)
				buf, _ = endRecord(appendCompletion(buf, r.ID, r.State, &r.Outcome), start, recCompletion)
			}
		}
		w.Write(buf)
		rewritten, _, err := recoverBytes(w.b)
		if err != nil {
			t.Fatalf("rewritten journal does not open: %v", err)
		}
		if got := records(rewritten); !reflect.DeepEqual(got, recs) {
			t.Fatalf("rewritten records differ:\n got  %+v\n want %+v", got, recs)
		}
	})
}

// TestJournalRecoversFromDiskAsFromMemory checks that the in-memory file
// the fuzzer uses sees what a file on disk does.
func TestJournalRecoversFromDiskAsFromMemory(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustComplete(t, j, testOutcome(testIntent(1), 200, "ok"))
	mustBegin(t, j, testIntent(2))
	mustClose(t, j)
	file := readFile(t, path)
	torn := file[:len(file)-9]
	writeFile(t, path, torn)

	mem, after, err := recoverBytes(torn)
	if err != nil {
		t.Fatal(err)
	}
	disk := openTestJournal(t, path, quietOptions())
	sameRecords(t, "disk vs memory", records(disk), records(mem))
	if got := readFile(t, path); !bytes.Equal(got, after) {
		t.Fatalf("disk recovery left %d bytes, memory recovery %d", len(got), len(after))
	}
}
