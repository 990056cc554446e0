package fileengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/leakcheck"
)

// --- Reading records back (read.go) ----------------------------------------

// bigOutcome is the completion of in with a body of n bytes that names the
// operation, so that a body read for the wrong operation shows.
func bigOutcome(in Intent, n int) Completion {
	c := testOutcome(in, 201, "")
	c.Body = bytes.Repeat([]byte(in.ID+";"), n/(len(in.ID)+1)+1)[:n]
	return c
}

// Clause: J9.2.
func TestJournalLooksUpBodiesFromTheFile(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	var want []Record
	for i := range 4 {
		in := testIntent(i)
		mustBegin(t, j, in)
		if i == 3 {
			want = append(want, recordOf(in)) // pending
			continue
		}
		c := bigOutcome(in, 1<<(10+4*i)) // 1 KiB, 16 KiB, 256 KiB
		mustComplete(t, j, c)
		want = append(want, recordOf(in, c))
	}
	// In List order: by Created, which testIntent makes decrease with i.
	slicesReverse(want)
	sameRecords(t, "written", records(j), want)
	mustClose(t, j)
	j = openTestJournal(t, path, quietOptions())
	sameRecords(t, "reopened", records(j), want)
	for _, w := range want {
		if got, ok := lookup(t, j, w.ID); !ok || !reflect.DeepEqual(got, w) {
			t.Fatalf("Lookup(%s) = %v, %d-byte raw; want %d bytes", w.ID, ok, len(got.Raw), len(w.Raw))
		}
	}
}

func slicesReverse(rs []Record) {
	for i, k := 0, len(rs)-1; i < k; i, k = i+1, k-1 {
		rs[i], rs[k] = rs[k], rs[i]
	}
}

// TestJournalReportsARecordChangedAfterOpen changes the file under an open
// journal: every byte is checksummed, so what is read back is either the
// record read at open or a *CorruptError at its offset, never another body.
// Clauses: J9.3, J9.6.
func TestJournalReportsARecordChangedAfterOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, f *os.File, intentAt, completionAt, otherCompletionAt int64)
		at     func(intentAt, completionAt int64) int64
		reason string
	}{
		{"a body byte", func(t *testing.T, f *os.File, _, c, _ int64) {
			flipByte(t, f, c+200)
		}, func(_, c int64) int64 { return c }, "record data checksum mismatch"},
		{"a key byte", func(t *testing.T, f *os.File, i, _, _ int64) {
			flipByte(t, f, i+recordHeaderSize+12)
		}, func(i, _ int64) int64 { return i }, "record data checksum mismatch"},
		{"a length", func(t *testing.T, f *os.File, _, c, _ int64) {
			flipByte(t, f, c)
		}, func(_, c int64) int64 { return c }, "record header checksum mismatch"},
		{"another operation's completion in its place", func(t *testing.T, f *os.File, _, c, other int64) {
			// Both bodies are the same size: the record is whole and its
			// checksums hold, but it is not this operation's.
			b := make([]byte, c-other)
			if _, err := f.ReadAt(b, other); err != nil {
				t.Fatal(err)
			}
			size := recordSize(int(binary.LittleEndian.Uint32(b)))
			if _, err := f.WriteAt(b[:size], c); err != nil {
				t.Fatal(err)
			}
		}, func(_, c int64) int64 { return c }, "is not the one read at open"},
		{"the file cut short", func(t *testing.T, f *os.File, _, c, _ int64) {
			if err := f.Truncate(c + 100); err != nil {
				t.Fatal(err)
			}
		}, func(_, c int64) int64 { return c }, "the file ends before the record does"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := journalPath(t)
			j := openTestJournal(t, path, quietOptions())
			a, b := testIntent(1), testIntent(2)
			mustBegin(t, j, a)
			mustComplete(t, j, bigOutcome(a, 1<<12))
			mustBegin(t, j, b)
			mustComplete(t, j, bigOutcome(b, 1<<12))
			ea, _ := j.idx.get(b.ID)
			eo, _ := j.idx.get(a.ID)
			intentAt, completionAt, otherAt := ea.intentAt, ea.completionAt, eo.completionAt

			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.change(t, f, intentAt, completionAt, otherAt)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}

			_, ok, err := j.Lookup(b.ID)
			var ce *CorruptError
			if !ok || !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Lookup of the changed operation = %v, %v; want found, a *CorruptError", ok, err)
			}
			if want := tc.at(intentAt, completionAt); ce.Offset != want || ce.Path != path ||
				!strings.Contains(ce.Reason, tc.reason) || !strings.Contains(ce.Reason, QuoteID(b.ID)) {
				t.Fatalf("error = %q at %d; want offset %d, the operation and %q", ce.Reason, ce.Offset, want, tc.reason)
			}
			if _, err := List(j, func(*Meta) bool { return true }, func(r *Record) Record { return *r }); !errors.As(err, &ce) {
				t.Fatalf("List over the changed operation: err = %v, want a *CorruptError", err)
			}
			if err := j.Compact(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Compact over the changed operation: err = %v, want ErrCorrupt", err)
			}
			if tc.name != "the file cut short" {
				// The other operation still reads back whole.
				if got, ok := lookup(t, j, a.ID); !ok || !reflect.DeepEqual(got, recordOf(a, bigOutcome(a, 1<<12))) {
					t.Fatalf("Lookup of the unchanged operation = %+v", got)
				}
			}
		})
	}
}

func flipByte(t *testing.T, f *os.File, off int64) {
	t.Helper()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestJournalLookupsRacingCompactionReadTheRightFile looks operations up,
// and lists them, while compactions and Forget replace the file under
// them and new operations are appended: every read must return exactly its
// own operation's body.
// Clause: J9.7.
func TestJournalLookupsRacingCompactionReadTheRightFile(t *testing.T) {
	defer leakcheck.Check(t)()
	path := journalPath(t)
	o := quietOptions()
	o.CompactMinSize = -1
	j := openTestJournal(t, path, o)
	const ops = 64
	want := map[string]Record{}
	for i := range ops {
		in := testIntent(i)
		c := bigOutcome(in, 512+97*i)
		mustBegin(t, j, in)
		mustComplete(t, j, c)
		want[in.ID] = recordOf(in, c)
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				id := testIntent(i % ops).ID
				got, ok, err := j.Lookup(id)
				if err != nil || !ok || !reflect.DeepEqual(got, want[id]) {
					t.Errorf("Lookup(%s) during compaction = %v, %v, %d-byte raw; want its own record", id, ok, err, len(got.Raw))
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			recs, err := List(j, func(m *Meta) bool { return m.ID < testIntent(ops).ID }, func(r *Record) Record { return *r })
			if err != nil || len(recs) != ops {
				t.Errorf("List during compaction: %d records, %v", len(recs), err)
				return
			}
			for _, r := range recs {
				if !reflect.DeepEqual(r, want[r.ID]) {
					t.Errorf("List during compaction returned another record for %s", r.ID)
					return
				}
			}
		}
	})
	for i := range 20 {
		extra := testIntent(ops + i)
		mustBegin(t, j, extra)
		mustComplete(t, j, bigOutcome(extra, 300))
		if err := j.Compact(); err != nil {
			t.Error(err)
			break
		}
		if err := j.Forget(extra.ID); err != nil {
			t.Error(err)
			break
		}
	}
	// Stop only once the readers have overlapped the rewrites.
	for reads.Load() < 100 && !t.Failed() {
		if err := j.Compact(); err != nil {
			t.Error(err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if st := j.Stats(); st.Compactions < 20 || st.Operations != ops {
		t.Fatalf("stats = %+v, want 20 compactions or more and %d operations", st, ops)
	}
}

// Clauses: J9.7, J9.8.
func TestJournalReadOnlyReadsBodiesFromTheFileItOpened(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.CompactMinSize = -1
	w := openTestJournal(t, path, o)
	a, b := testIntent(1), testIntent(2)
	ca, cb := bigOutcome(a, 5000), bigOutcome(b, 7000)
	mustBegin(t, w, a)
	mustBegin(t, w, b)
	mustComplete(t, w, ca)
	mustComplete(t, w, cb)
	ro := openTestJournal(t, path, Options{ReadOnly: true, Logger: o.Logger, Now: o.Now})
	if runtime.GOOS != "windows" { // where a file open elsewhere cannot be renamed over
		// The writer rewrites the file under its name: a's records
		// move. The reader keeps reading the file it opened.
		if err := w.Forget(b.ID); err != nil {
			t.Fatal(err)
		}
	}
	sameRecords(t, "read-only", records(ro), []Record{recordOf(b, cb), recordOf(a, ca)})
	mustClose(t, ro)
	if _, ok, err := ro.Lookup(a.ID); !ok || !errors.Is(err, ErrClosed) {
		t.Fatalf("Lookup after Close of a read-only journal = %v, %v; want found, ErrClosed", ok, err)
	}
}

// TestCheckRecordRefusesWhatIsNotTheRecord covers the checks of a record
// read back that the file-level tests above cannot reach with a whole
// record: type, reserved bytes, padding.
// Clause: J9.3.
func TestCheckRecordRefusesWhatIsNotTheRecord(t *testing.T) {
	good := frameRecord(t, recIntent, intentPayload(testIntent(10)))
	if p, reason := checkRecord(good, recIntent); reason != "" || !bytes.Equal(p, intentPayload(testIntent(10))) {
		t.Fatalf("checkRecord(good) = %q", reason)
	}
	for _, tc := range []struct {
		name   string
		b      []byte
		t      recordType
		reason string
	}{
		{"type", good, recCompletion, "record type 1, want 2"},
		{"short", good[:8], recIntent, "too short"},
		{"size", good[:len(good)-8], recIntent, "does not fit"},
		{"reserved", reframe(good, func(b []byte) { b[5] = 1 }), recIntent, "reserved"},
		{"padding", reframe(good, func(b []byte) { b[len(b)-1] = 1 }), recIntent, "padding"},
	} {
		if _, reason := checkRecord(tc.b, tc.t); !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: reason %q, want %q", tc.name, reason, tc.reason)
		}
	}
	// A read error is reported as such, not as corruption.
	j := &Journal{path: "x"}
	e := &entry{Meta: Meta{ID: "op"}, intentAt: 16, intentSize: 32}
	var r Record
	err := j.loadIntent(j.preader(errReader{}), e, &r)
	if !errors.Is(err, errInjected) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("read error = %v, want the injected error, not corruption", err)
	}
	err = j.loadIntent(j.preader(bytes.NewReader(nil)), e, &r)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read past the end = %v, want ErrCorrupt", err)
	}
}

// reframe returns a copy of record b changed by change, its checksums
// recomputed so that only the change is wrong.
func reframe(b []byte, change func([]byte)) []byte {
	c := bytes.Clone(b)
	change(c)
	binary.LittleEndian.PutUint32(c[8:12], crc32.Checksum(c[:8], castagnoli))
	n := int(binary.LittleEndian.Uint32(c[0:4]))
	end := recordHeaderSize + n
	binary.LittleEndian.PutUint32(c[end:], crc32.Update(typeCRC[c[4]], castagnoli, c[recordHeaderSize:end]))
	return c
}

type errReader struct{}

func (errReader) ReadAt([]byte, int64) (int, error) { return 0, fmt.Errorf("reading: %w", errInjected) }

var _ io.ReaderAt = errReader{}
