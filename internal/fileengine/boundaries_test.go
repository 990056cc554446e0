package fileengine

// Tests written against the mutants gremlins left alive: each pins a limit,
// a boundary or a reported reason exactly.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// corruptAt fails the test unless err is a *CorruptError at off for reason.
func corruptAt(t *testing.T, what string, err error, off int64, reason string) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != off || ce.Reason != reason {
		t.Errorf("%s: err = %v, want a *CorruptError at offset %d: %q", what, err, off, reason)
	}
}

// uv appends the uvarints ns to b.
func uv(b []byte, ns ...int) []byte {
	for _, n := range ns {
		b = binary.AppendUvarint(b, uint64(n))
	}
	return b
}

// cat joins byte slices.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// The decoder refuses every malformed intent and completion payload with
// its exact reason, at the record's offset, and accepts fields at their
// limits.
// Clauses: J1.8, J3.1.
func TestDecoderReasonsAndLimits(t *testing.T) {
	fp := make([]byte, 32)
	intentHead := cat([]byte{payloadVersion}, uv(nil, 1), []byte("i"), uv(nil, 1), []byte("k"), fp)
	valid := intentPayload(testIntent(1))
	completionHead := appendCompletionHead(nil, "i", Done, &Outcome{Completed: 1, Status: 200})
	completionOK := completionPayload(testOutcome(testIntent(1), 200, "ok"))
	for _, tc := range []struct {
		name    string
		typ     recordType
		payload []byte
		reason  string
	}{
		{"ID longer than MaxIDLen", recIntent, cat([]byte{payloadVersion}, uv(nil, MaxIDLen+1), bytes.Repeat([]byte("i"), MaxIDLen+1), valid), "intent: operation ID length 4097 is too long"},
		{"ID longer than the payload", recIntent, cat([]byte{payloadVersion}, uv(nil, 5), []byte("ab")), "intent: operation ID length 5 is too long"},
		{"trailing bytes", recIntent, cat(valid, []byte{0, 0, 0}), "intent: 3 trailing payload bytes"},
		{"ends after the fingerprint", recIntent, intentHead, "intent: bad varint"},
		{"ends before the created time", recIntent, cat(intentHead, uv(nil, 4), []byte("POST"), uv(nil, 1), []byte("u")), "intent: bad varint"},
		{"completion version 2", recCompletion, cat([]byte{2}, completionOK[1:]), "unsupported completion encoding 2"},
		{"empty completion", recCompletion, nil, "completion: payload ends early"},
		{"completion ends before its time", recCompletion, cat([]byte{payloadVersion}, uv(nil, 1), []byte("i"), []byte{byte(Done), 0}), "completion: bad varint"},
		{"more header names than bytes allow", recCompletion, cat(completionHead, []byte{3, 0, 0}), "completion: header name count 3 is too large"},
		{"header names at half the bytes", recCompletion, cat(completionHead, []byte{1, 0}), "completion: bad varint"},
		{"a header name repeated", recCompletion, cat(completionHead, []byte{2, 1, 'A', 0, 1, 'A', 0, 0}), `completion: header name "A" is out of order`},
		{"more header values than bytes", recCompletion, cat(completionHead, []byte{1, 1, 'A', 5, 0}), "completion: header value count 5 is too large"},
		{"header values as many as the bytes left", recCompletion, cat(completionHead, []byte{1, 1, 'A', 2, 0, 0}), "completion: bad varint"},
	} {
		_, _, err := recoverBytes(fileOf(frameRecord(t, tc.typ, tc.payload)))
		corruptAt(t, tc.name, err, fileHeaderSize, tc.reason)
	}

	// An ID and a key of exactly their maximum length are valid.
	in := testIntent(1)
	in.ID, in.Key = strings.Repeat("i", MaxIDLen), strings.Repeat("k", MaxKeyLen)
	j, _, err := recoverBytes(fileOf(frameRecord(t, recIntent, intentPayload(in))))
	if err != nil {
		t.Fatalf("intent with an ID and a key at their limits: %v", err)
	}
	if r, ok := lookup(t, j, in.ID); !ok || r != recordOf(in) {
		t.Fatalf("intent with an ID and a key at their limits read back as %+v, %v", r, ok)
	}
}

// damagedIntent is the framed intent of operation i with a payload byte
// changed: its header holds, its data checksum fails.
func damagedIntent(t *testing.T, i int) []byte {
	b := frameRecord(t, recIntent, intentPayload(testIntent(i)))
	b[recordHeaderSize+3] ^= 0xff
	return b
}

// notTornReason is the reason of a record whose data checksum fails with a
// whole record after it.
const notTornReason = "record data checksum mismatch; a valid record follows, so this is not a torn tail"

// A record of exactly MaxPayload bytes is valid: recovery reads it, and it
// proves that a damaged record before it is not a torn tail.
// Clauses: J1.7, J3.3.
func TestRecordOfExactlyMaxPayload(t *testing.T) {
	in := testIntent(1)
	in.URL = ""
	base := len(intentPayload(in))
	in.URL = strings.Repeat("u", MaxPayload-base-3) // its length takes 4 bytes, not 1
	p := intentPayload(in)
	if len(p) != MaxPayload {
		t.Fatalf("payload is %d bytes, want %d", len(p), MaxPayload)
	}
	big := frameRecord(t, recIntent, p)
	j, _, err := recoverBytes(fileOf(big))
	if err != nil {
		t.Fatalf("a record of MaxPayload bytes: %v", err)
	}
	if r, ok := lookup(t, j, in.ID); !ok || r.URL != in.URL {
		t.Fatalf("a record of MaxPayload bytes read back as %v (URL of %d bytes)", ok, len(r.URL))
	}
	first := frameRecord(t, recIntent, intentPayload(testIntent(2)))
	_, _, err = recoverBytes(fileOf(first, damagedIntent(t, 3), big))
	corruptAt(t, "damaged record before one of MaxPayload bytes", err, fileHeaderSize+int64(len(first)), notTornReason)
}

// Recovery's and Scan's searches for a whole record after a damaged one
// look as far as a minimal record ending exactly at the end of the file.
// Clause: J3.3.
func TestAMinimalRecordAtTheEndProvesDamage(t *testing.T) {
	first := frameRecord(t, recIntent, intentPayload(testIntent(1)))
	b := fileOf(first, damagedIntent(t, 2), frameRecord(t, recIntent, nil))
	_, after, err := recoverBytes(b)
	corruptAt(t, "damaged record before a minimal one", err, fileHeaderSize+int64(len(first)), notTornReason)
	if !bytes.Equal(after, b) {
		t.Fatal("the file was changed")
	}
	last := int64(len(b)) - minRecordSize
	rep := scanBytes(t, b)
	if len(rep.Problems) != 2 || rep.Problems[0].End != last || rep.Problems[1].Offset != last || rep.Problems[1].End != int64(len(b)) {
		t.Fatalf("Scan found %+v, want the damaged record up to the minimal one at %d, and that one", rep.Problems, last)
	}
}

// After a damaged record, a record whose header holds but whose length runs
// past the end of the file is no evidence: the damaged record is the torn
// tail, and the file is cut there.
// Clauses: J2.1, J2.2.
func TestARecordRunningPastTheEndIsNoEvidence(t *testing.T) {
	first := frameRecord(t, recIntent, intentPayload(testIntent(1)))
	h := make([]byte, recordHeaderSize)
	binary.LittleEndian.PutUint32(h, 4096)
	h[4] = byte(recIntent)
	resealHeader(h, 0)
	b := fileOf(first, damagedIntent(t, 2), h, []byte("12345678"))
	j, after, err := recoverBytes(b)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if want := fileOf(first); !bytes.Equal(after, want) || j.truncated != int64(len(b)-len(want)) {
		t.Fatalf("file after recovery is %d bytes, %d cut; want %d", len(after), j.truncated, len(want))
	}
}

// countingReaderAt counts its ReadAt calls.
type countingReaderAt struct {
	r     io.ReaderAt
	reads atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.r.ReadAt(p, off)
}

// Recovery's reader serves every range inside its buffer, the one that
// starts at the buffer's first byte included, without reading the file
// again.
// Clause: J2 (recovery's reads; no clause of their own).
func TestFileReaderServesRangesInsideItsBuffer(t *testing.T) {
	b := fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))
	c := &countingReaderAt{r: bytes.NewReader(b)}
	fr := newFileReader(c, int64(len(b)))
	for _, r := range [][2]int{{0, fileHeaderSize}, {0, fileHeaderSize}, {fileHeaderSize, recordHeaderSize}, {0, len(b)}} {
		got, err := fr.at(int64(r[0]), r[1])
		if err != nil || !bytes.Equal(got, b[r[0]:r[0]+r[1]]) {
			t.Fatalf("at(%d, %d) = %x, %v", r[0], r[1], got, err)
		}
	}
	if n := c.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the file, want 1", n)
	}
}

// A failed read during recovery is reported as that error, and a short read
// without one as io.ErrUnexpectedEOF: never as corruption.
// Clause: J3.1.
func TestRecoveryReportsTheReadError(t *testing.T) {
	b := fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))
	for _, tc := range []struct {
		name string
		read func(p []byte, off int64) (int, error)
		want error
	}{
		{"failed read", func([]byte, int64) (int, error) { return 0, errInjected }, errInjected},
		{"short read", func(p []byte, off int64) (int, error) { return copy(p[:len(p)-1], b[off:]), nil }, io.ErrUnexpectedEOF},
	} {
		f := &hookFile{File: &memFile{b: b}, readAt: func(_ File, p []byte, off int64) (int, error) { return tc.read(p, off) }}
		j := newJournal(quietOptions())
		j.path = "x"
		err := j.recover(f, int64(len(b)))
		if want := fmt.Sprintf("filejournal: reading journal x: reading at offset 0: %v", tc.want); !errors.Is(err, tc.want) || errors.Is(err, ErrCorrupt) || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, want)
		}
	}
}

// checkRecord accepts a record of exactly minRecordSize bytes, an empty
// payload, when it is the record it is told to expect.
// Clause: J9.3.
func TestCheckRecordAcceptsAMinimalRecord(t *testing.T) {
	b := frameRecord(t, recIntent, nil)
	if p, reason := checkRecord(b, recIntent); reason != "" || len(p) != 0 || len(b) != minRecordSize {
		t.Fatalf("checkRecord(%d-byte record) = %x, %q", len(b), p, reason)
	}
}

// --- compaction -----------------------------------------------------------

// Stats' Live and LiveBytes, before compaction, are exactly what it keeps:
// summaries counted at their size, forgotten operations skipped wherever
// they are in the index.
// Clauses: J7.5, J7.6, J7.7.
func TestLiveBytesAreWhatCompactionKeeps(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.ForgetAfter = 36 * time.Hour
	j := openTestJournal(t, path, o)
	for i, ago := range []time.Duration{48 * time.Hour, 30 * time.Hour, -1, time.Hour} {
		in := testIntent(i)
		mustBegin(t, j, in)
		if ago >= 0 {
			c := testOutcome(in, 200, strings.Repeat("b", 300))
			c.Completed = testNow.Add(-ago)
			mustComplete(t, j, c)
		}
	}
	before := j.Stats()
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	after := j.Stats()
	size := int64(len(readFile(t, path)))
	if before.Live != 3 || before.LiveBytes != size-fileHeaderSize || after.Live != 3 || after.LiveBytes != size-fileHeaderSize {
		t.Fatalf("before compaction %+v, after %+v; the compacted file is %d bytes", before, after, size)
	}
}

// A summary marks as dropped exactly what was recorded, and keeps the flags
// the outcome had.
// Clause: J7.5.
func TestSummaryFlagsSayExactlyWhatWasDropped(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	hdr := http.Header{"Content-Type": {"text/plain"}}
	cases := []struct {
		h     http.Header
		body  string
		flags uint8
		want  uint8
	}{
		{hdr, "", 0, FlagSummarized | FlagHeaderTruncated},
		{nil, "body", 0, FlagSummarized | FlagBodyTruncated},
		{hdr, "", FlagBodyTruncated, FlagSummarized | FlagHeaderTruncated | FlagBodyTruncated},
		{nil, "", FlagBodyTruncated, FlagBodyTruncated},
	}
	for i, tc := range cases {
		in := testIntent(i)
		mustBegin(t, j, in)
		mustComplete(t, j, Completion{ID: in.ID, State: Done, Completed: testNow.Add(-30 * time.Hour), Status: 200, Flags: tc.flags, Header: tc.h, Body: []byte(tc.body)})
	}
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		r, _ := lookup(t, j, testIntent(i).ID)
		if r.Flags != tc.want || r.Raw != emptyHeaderBody {
			t.Errorf("case %d: summary flags %03b, raw %x; want %03b and nothing kept", i, r.Flags, r.Raw, tc.want)
		}
	}
}

// Compaction applies ScrubHeader to the recorded headers it keeps.
// Clause: J7.5.
func TestCompactionScrubsRecordedHeaders(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	in := testIntent(1)
	mustBegin(t, j, in)
	c := testOutcome(in, 200, "ok")
	c.Header = http.Header{"Authorization": {"secret"}, "Content-Type": {"text/plain"}}
	mustComplete(t, j, c)
	mustClose(t, j)
	o := quietOptions()
	o.ScrubHeader = func(h http.Header) (http.Header, bool) {
		h.Del("Authorization")
		return h, true
	}
	j = openTestJournal(t, path, o)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	c.Header = http.Header{"Content-Type": {"text/plain"}}
	if r, _ := lookup(t, j, in.ID); r != recordOf(in, c) {
		t.Fatalf("after compaction: %+v, want %+v", r, recordOf(in, c))
	}
}

// oldCompletion is the completion of in, 48 hours old, whose record is
// exactly size bytes.
func oldCompletion(t *testing.T, in Intent, size int64) Completion {
	t.Helper()
	for n := range 1000 {
		c := Completion{ID: in.ID, State: Done, Completed: testNow.Add(-48 * time.Hour), Status: 200, Body: bytes.Repeat([]byte("g"), n)}
		if int64(len(frameRecord(t, recCompletion, completionPayload(c)))) == size {
			return c
		}
	}
	t.Fatalf("no completion of %d bytes", size)
	return Completion{}
}

// Automatic compaction checks when the file reaches CompactMinSize, at that
// exact size, and then only once it has grown by half; it compacts when the
// garbage outweighs the live data, not when it equals it.
// Clause: J7.7.
func TestAutomaticCompactionThresholdsAreExact(t *testing.T) {
	framed := func(k int) int64 { return int64(len(frameRecord(t, recIntent, intentPayload(testIntent(k))))) }
	type step struct {
		complete    bool // complete the operation, 48 hours old, else begin it
		op          int
		size        int64 // the completion's record size, 0 for a small one
		compactions uint64
	}
	ia := framed(0)
	for _, tc := range []struct {
		name    string
		minSize int64
		steps   []step
	}{
		{"garbage equal to live data", fileHeaderSize + 4*ia, []step{{false, 0, 0, 0}, {false, 1, 0, 0}, {false, 2, 0, 0}, {true, 1, ia, 0}}},
		{"garbage over live data at exactly the minimum", fileHeaderSize + 4*ia + 8, []step{{false, 0, 0, 0}, {false, 1, 0, 0}, {false, 2, 0, 0}, {true, 1, ia + 8, 1}}},
		{"the next check at half again", 1, []step{{false, 0, 0, 0}, {true, 0, 40, 0}, {false, 1, 0, 1}}},
	} {
		o := quietOptions()
		o.ForgetAfter = 36 * time.Hour
		o.CompactMinSize = tc.minSize
		j := openTestJournal(t, journalPath(t), o)
		var sizes []int64
		for i, s := range tc.steps {
			in := testIntent(s.op)
			if s.complete {
				mustComplete(t, j, oldCompletion(t, in, s.size))
			} else {
				mustBegin(t, j, in)
			}
			st := j.Stats()
			sizes = append(sizes, st.FileSize)
			if st.Compactions != s.compactions {
				t.Errorf("%s: after step %d (file sizes %v): %d compactions, want %d", tc.name, i, sizes, st.Compactions, s.compactions)
				break
			}
		}
		if tc.minSize == 1 && !(sizes[1] < sizes[0]+sizes[0]/2 && sizes[0]+sizes[0]/2 <= sizes[0]+40+ia) {
			t.Fatalf("%s: sizes %v do not straddle the next check", tc.name, sizes)
		}
		if tc.minSize > 1 && sizes[2] >= tc.minSize {
			t.Fatalf("%s: sizes %v reach the minimum early", tc.name, sizes)
		}
	}
}

// A compaction that fails before its rename reports exactly what failed,
// and the removal of its temporary file only when that fails too; a short
// write of the temporary file is a failure.
// Clauses: J7.2, J7.3.
func TestFailedCompactionReportsExactlyWhatFailed(t *testing.T) {
	// gone removes the temporary file; undeletable makes it a directory
	// that is not empty.
	gone := func(tmp string) {
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
	}
	undeletable := func(tmp string) {
		gone(tmp)
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(tmp, "x"), []byte("x"))
	}
	for _, tc := range []struct {
		name  string
		fsync func(tmp string) // at the temporary file's fsync, which fails
		short bool             // the temporary file's write is short
		ren   func(tmp string) // at the rename, which fails
		want  string           // with TMP for the temporary file
	}{
		{"fsync, file gone", gone, false, nil, "fsync of TMP: injected fault"},
		{"fsync, file undeletable", undeletable, false, nil, "fsync of TMP: injected fault\nremove TMP: directory not empty"},
		{"short write", nil, true, nil, "writing TMP: short write of N-1 of N bytes"},
		{"rename, file gone", nil, false, gone, "renaming TMP into place: injected fault"},
		{"rename, file undeletable", nil, false, undeletable, "renaming TMP into place: injected fault\nremove TMP: directory not empty"},
	} {
		path := journalPath(t)
		tmp := path + compactSuffix
		o := quietOptions()
		armed := false
		var wrote int
		o.WrapFile = func(f File) File {
			if fileName(f) != filepath.Base(tmp) {
				return f
			}
			return &hookFile{File: f,
				sync: func(f File) error {
					if armed && tc.fsync != nil {
						tc.fsync(tmp)
						return errInjected
					}
					return f.Sync()
				},
				write: func(f File, p []byte) (int, error) {
					if armed && tc.short {
						wrote = len(p)
						return f.Write(p[:len(p)-1])
					}
					return f.Write(p)
				}}
		}
		o.rename = func(from, to string) error {
			if armed && tc.ren != nil {
				tc.ren(from)
				return errInjected
			}
			return os.Rename(from, to)
		}
		j := openTestJournal(t, path, o)
		compactionFixture(t, j)
		before := readFile(t, path)
		armed = true
		err := j.Compact()
		armed = false
		want := strings.NewReplacer("TMP", j.file+compactSuffix, "N-1", fmt.Sprint(wrote-1), "N", fmt.Sprint(wrote)).Replace("filejournal: compacting journal: " + tc.want)
		if err == nil || err.Error() != want {
			t.Errorf("%s: Compact: err = %v, want %q", tc.name, err, want)
			continue
		}
		if !bytes.Equal(readFile(t, path), before) {
			t.Errorf("%s: the journal changed", tc.name)
		}
		mustBegin(t, j, testIntent(9))
	}
}

// A compaction of more than rewriteChunk bytes writes them in chunks of at
// least rewriteChunk and counts every byte: the journal's size is the new
// file's.
// Clauses: J7.2, J7.4.
func TestLargeCompactionWritesInChunksAndCountsEveryByte(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	var writes []int
	o.WrapFile = func(f File) File {
		if fileName(f) != filepath.Base(path)+compactSuffix {
			return f
		}
		return &hookFile{File: f, write: func(f File, p []byte) (int, error) {
			writes = append(writes, len(p))
			return f.Write(p)
		}}
	}
	j := openTestJournal(t, path, o)
	var want []Record
	for i := range 3 {
		in := testIntent(i)
		mustBegin(t, j, in)
		c := bigOutcome(in, 600<<10)
		mustComplete(t, j, c)
		want = append([]Record{recordOf(in, c)}, want...)
	}
	writes = nil
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	size := int64(len(readFile(t, path)))
	total := 0
	for i, n := range writes {
		total += n
		if i < len(writes)-1 && n < rewriteChunk {
			t.Fatalf("writes of %v bytes: one short of rewriteChunk before the last", writes)
		}
	}
	if len(writes) < 2 || int64(total) != size || j.Stats().FileSize != size {
		t.Fatalf("writes of %v bytes, stats %+v, file of %d bytes", writes, j.Stats(), size)
	}
	in := testIntent(7)
	mustBegin(t, j, in)
	if r, _ := lookup(t, j, in.ID); r != recordOf(in) {
		t.Fatalf("Lookup after compaction = %+v", r)
	}
	mustClose(t, j)
	sameRecords(t, "reopened", records(openTestJournal(t, path, quietOptions())), append([]Record{recordOf(in)}, want...))
}

// --- logging, counters, opening and closing -------------------------------

// logCapture is a slog.Handler keeping each record as "LEVEL message",
// followed by its operations, offset and bytes attributes.
type logCapture struct {
	mu   sync.Mutex
	recs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCapture) WithGroup(string) slog.Handler            { return l }

func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "operations", "offset", "bytes":
			s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, s)
	return nil
}

// all returns, and forgets, every record.
func (l *logCapture) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.recs
	l.recs = nil
	return out
}

// above returns, and forgets, the records at level Warn and above.
func (l *logCapture) above() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.recs {
		if !strings.HasPrefix(s, "DEBUG") && !strings.HasPrefix(s, "INFO") {
			out = append(out, s)
		}
	}
	l.recs = nil
	return out
}

// The journal logs, to the Logger it is given, exactly its troubles: none
// on a clean life (compactions, automatic ones included, and Close), the
// cut of a torn tail (at Debug level when read-only), a failed automatic
// compaction, and the operations a latched failure forgets, counted, only
// when there are any.
// Clauses: J2.1, J6.3, J7.7.
func TestJournalLogsExactlyItsTroubles(t *testing.T) {
	logs := &logCapture{}
	path := journalPath(t)
	o := quietOptions()
	o.Logger = slog.New(logs)
	o.CompactMinSize = 1
	o.ForgetAfter = 36 * time.Hour
	failSync, failRename := false, false
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			if failSync {
				return errInjected
			}
			return f.Sync()
		}}
	}
	o.rename = func(from, to string) error {
		if failRename {
			return errInjected
		}
		return os.Rename(from, to)
	}
	// Begin, then complete two days ago with a body: the completion's
	// append compacts on its own.
	beginOld := func(j *Journal, i int) {
		in := testIntent(i)
		mustBegin(t, j, in)
		c := testOutcome(in, 200, strings.Repeat("x", 200))
		c.Completed = testNow.Add(-48 * time.Hour)
		mustComplete(t, j, c)
	}

	j := openTestJournal(t, path, o)
	beginOld(j, 1)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	if st := j.Stats(); st.Compactions != 2 {
		t.Fatalf("stats %+v, want an automatic compaction and Compact's", st)
	}
	if got := logs.above(); len(got) != 0 {
		t.Fatalf("a clean life logged %q", got)
	}

	j = openTestJournal(t, path, o)
	failRename = true
	beginOld(j, 2)
	failRename = false
	if got, want := logs.above(), []string{"ERROR filejournal: automatic journal compaction failed"}; !slices.Equal(got, want) {
		t.Fatalf("a failed automatic compaction logged %q, want %q", got, want)
	}
	mustBegin(t, j, testIntent(3))
	in := testIntent(4)
	mustBegin(t, j, in)
	mustComplete(t, j, testOutcome(in, 200, "ok"))
	failSync = true
	if err := j.Sync(); !errors.Is(err, errInjected) {
		t.Fatalf("Sync: %v", err)
	}
	failSync = false
	if got, want := logs.above(), []string{"ERROR filejournal: journal failed; refusing further appends"}; !slices.Equal(got, want) {
		t.Fatalf("a failure with every intent durable logged %q, want %q", got, want)
	}
	j.Close()
	logs.above()

	j = openTestJournal(t, path, o)
	mustBegin(t, j, testIntent(5))
	failSync = true
	if err := j.Begin(testIntent(6)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin: %v", err)
	}
	failSync = false
	if got, want := logs.above(), []string{"ERROR filejournal: journal failed; refusing further appends", "WARN filejournal: forgetting operations whose intent fsync failed operations=1"}; !slices.Equal(got, want) {
		t.Fatalf("a failed fsync of one intent logged %q, want %q", got, want)
	}
	j.Close()
	logs.above()

	b := readFile(t, path)
	writeFile(t, path, b[:len(b)-3])
	offs := recordOffsets(t, b)
	torn := offs[len(offs)-2]
	ro := o
	ro.ReadOnly = true
	mustClose(t, openTestJournal(t, path, ro))
	if got, want := logs.all(), []string{fmt.Sprintf("DEBUG filejournal: ignoring torn journal tail (read-only) offset=%d bytes=%d", torn, int64(len(b)-3)-torn)}; !slices.Equal(got, want) {
		t.Fatalf("a torn tail read read-only logged %q, want %q", got, want)
	}
	openTestJournal(t, path, o)
	if got, want := logs.above(), []string{fmt.Sprintf("WARN filejournal: truncating torn journal tail offset=%d bytes=%d", torn, int64(len(b)-3)-torn)}; !slices.Equal(got, want) {
		t.Fatalf("a torn tail logged %q, want %q", got, want)
	}
}

// Stats count exactly: records appended, fsyncs (none on a Close or an open
// with nothing to make durable, one on an open after recovery read records,
// one for a cut torn tail), and the pending operations whose key has not
// expired (one created exactly KeyTTL ago has).
// Clauses: J2.3, J5.2, J8.1.
func TestStatsCountExactly(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	j := openTestJournal(t, path, o)
	if st := j.Stats(); st.Syncs != 1 || st.Records != 0 {
		t.Fatalf("new journal: stats %+v", st)
	}
	mustClose(t, j)
	j = openTestJournal(t, path, o) // a header and no records
	if st := j.Stats(); st.Syncs != 0 {
		t.Fatalf("journal without records reopened: stats %+v, want no fsync", st)
	}
	for i, ago := range []time.Duration{0, time.Second, DefaultKeyTTL, 30 * time.Hour, 40 * time.Hour} {
		in := testIntent(i)
		in.Created = testNow.Add(-ago)
		mustBegin(t, j, in)
	}
	in := testIntent(9)
	mustBegin(t, j, in)
	mustComplete(t, j, testOutcome(in, 200, "ok"))
	if st := j.Stats(); st.Records != 7 || st.Appends != 7 || st.Syncs != 6 || st.Pending != 2 || st.Operations != 6 {
		t.Fatalf("after 6 Begins and a Complete: stats %+v, want 7 records, 6 fsyncs, 2 pending", st)
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j) // nothing left to fsync
	if st := j.Stats(); st.Syncs != 7 {
		t.Fatalf("after Sync and Close: stats %+v, want 7 fsyncs", st)
	}
	j = openTestJournal(t, path, o)
	if st := j.Stats(); st.Syncs != 1 || st.Records != 7 {
		t.Fatalf("reopened: stats %+v, want the one fsync of what recovery read", st)
	}
	mustClose(t, j)
	b := readFile(t, path)
	writeFile(t, path, b[:len(b)-3])
	j = openTestJournal(t, path, o)
	if st := j.Stats(); st.Syncs != 1 || st.Records != 6 || st.Truncated == 0 {
		t.Fatalf("reopened after a torn tail: stats %+v, want the one fsync of the cut", st)
	}
}

// Open and Close report exactly their failures and refusals, create a
// journal in an empty file and with the default file mode, and a read-only
// Open reads again a file cut while it is read, three times and only then.
// Clauses: J2.4, J3.2, J4.2, J7.1.
func TestOpenAndCloseEdges(t *testing.T) {
	// A new journal has the default mode; an empty file becomes a journal.
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != DefaultFileMode {
		t.Fatalf("new journal: %v, %v; want mode %v", fi.Mode(), err, DefaultFileMode)
	}
	empty := journalPath(t)
	writeFile(t, empty, nil)
	mustClose(t, openTestJournal(t, empty, quietOptions()))
	if b := readFile(t, empty); !bytes.Equal(b, appendFileHeader(nil)) {
		t.Fatalf("empty file opened: %x, want the file header", b)
	}

	// A path naming a directory.
	dot := filepath.Dir(path) + "/."
	if _, err := Open(dot, quietOptions()); err == nil || err.Error() != "filejournal: opening journal "+dot+": resolving its path: the path names a directory" {
		t.Fatalf("Open(%s): %v", dot, err)
	}

	// Close failures: of recovery's handle, of the appending one, of a
	// read-only journal's.
	failClose := 0 // fail the close of the failClose'th file opened
	opened := 0
	o := quietOptions()
	o.WrapFile = func(f File) File {
		opened++
		n := opened
		return &hookFile{File: f, close: func(f File) error {
			err := f.Close()
			if n == failClose {
				return errInjected
			}
			return err
		}}
	}
	failClose = 1
	if _, err := Open(path, o); err == nil || err.Error() != "filejournal: opening journal: injected fault" {
		t.Fatalf("Open with recovery's file failing to close: %v", err)
	}
	opened, failClose = 0, 2
	j, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err == nil || err.Error() != "filejournal: closing journal "+path+": injected fault" {
		t.Fatalf("Close with its file failing to close: %v", err)
	}
	ro := o
	ro.ReadOnly = true
	opened, failClose = 0, 1
	j, err = Open(path, ro)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err == nil || err.Error() != "filejournal: closing journal "+path+": injected fault" {
		t.Fatalf("read-only Close with its file failing to close: %v", err)
	}

	// A read-only Open reads a file that ends early three times; a corrupt
	// one once.
	opened = 0
	ro.WrapFile = func(f File) File {
		opened++
		return &hookFile{File: f, readAt: func(f File, p []byte, off int64) (int, error) {
			if opened > readOnlyTries+1 {
				return 0, errInjected
			}
			return 0, io.EOF
		}}
	}
	if _, err := Open(path, ro); !errors.Is(err, io.ErrUnexpectedEOF) || opened != readOnlyTries {
		t.Fatalf("read-only Open of a file that ends early: %v after %d opens, want io.ErrUnexpectedEOF after %d", err, opened, readOnlyTries)
	}
	writeFile(t, path, []byte("not a journal, not at all"))
	opened = 0
	ro.WrapFile = func(f File) File { opened++; return f }
	if _, err := Open(path, ro); !errors.Is(err, ErrCorrupt) || opened != 1 {
		t.Fatalf("read-only Open of a corrupt file: %v after %d opens, want ErrCorrupt after one", err, opened)
	}
}

// A journal keeps no buffer larger than it means to between appends and
// between reads: a large completion's encoding buffer and a large record's
// read buffer are dropped, small ones kept.
// Clause: J9.1.
func TestLargeBuffersAreNotKept(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	small, big := testIntent(1), testIntent(2)
	mustBegin(t, j, small)
	mustBegin(t, j, big)
	if cap(j.buf) == 0 {
		t.Fatal("the encoding buffer of a Begin was not kept")
	}
	mustComplete(t, j, bigOutcome(big, 2*rewriteChunk))
	if j.buf != nil {
		t.Fatalf("a completion's %d-byte encoding buffer was kept", cap(j.buf))
	}
	lookup(t, j, small.ID)
	if c := cap(j.rbuf); c == 0 || c > readBufMax {
		t.Fatalf("read buffer of %d bytes after a small record, want one kept", c)
	}
	lookup(t, j, big.ID)
	if c := cap(j.rbuf); c == 0 || c > readBufMax {
		t.Fatalf("read buffer of %d bytes after a large record, want at most %d", c, readBufMax)
	}
}

// The index's table is the smallest power of two, at least 8, at most three
// quarters full: what J9.1's heap bound counts on.
// Clause: J9.1.
func TestIndexTableIsTheSmallestThatFits(t *testing.T) {
	x := newIndex(0)
	for n := range 400 {
		want := 8
		for n > want/4*3 {
			want *= 2
		}
		if len(x.table) != want {
			t.Fatalf("table of %d slots for %d entries, want %d", len(x.table), n, want)
		}
		x.add(&entry{Meta: Meta{ID: fmt.Sprint("op-", n)}})
	}
}

// A chunk reader asked for bytes past the end of the file fails with
// io.ErrUnexpectedEOF rather than returning fewer.
// Clause: J9.3.
func TestChunkReaderReportsAFileEndingEarly(t *testing.T) {
	b := fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))
	read := chunkReader(newFileReader(bytes.NewReader(b), int64(len(b))))
	if got, err := read(fileHeaderSize, len(b)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read past the end = %d bytes, %v; want io.ErrUnexpectedEOF", len(got), err)
	}
}

// fakeAfter returns a file whose last record is a completion ending so
// that its last 8 bytes and the first 8 after it, tail, form a whole
// minimal record: what a search for whole records finds if it starts 8
// bytes before tail. tail's header checksum holds if whole is set.
func fakeAfter(t *testing.T, whole bool) (file []byte, tailAt int64) {
	t.Helper()
	in := testIntent(1)
	for v := range 1 << 16 {
		body := binary.LittleEndian.AppendUint32(nil, uint32(v))
		for len(body) < 64 {
			body = append(body, 'b')
			c := Completion{ID: in.ID, State: Done, Completed: testNow, Status: 200, Body: append(bytes.Clone(body), 0, 0, 0, 0)}
			p := completionPayload(c)
			rec := frameRecord(t, recCompletion, p)
			fake := rec[len(rec)-8:] // a length of 0 and, as type, the data checksum's first byte
			if len(rec) != minRecordSize+len(p) || (fake[4] != byte(recIntent) && fake[4] != byte(recCompletion)) {
				continue
			}
			tail := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(fake, castagnoli))
			tail = binary.LittleEndian.AppendUint32(tail, typeCRC[fake[4]])
			sum := crc32.Checksum(tail, castagnoli)
			if !whole {
				sum ^= 1
			}
			tail = binary.LittleEndian.AppendUint32(tail, sum)
			intent := frameRecord(t, recIntent, intentPayload(in))
			return fileOf(intent, rec, tail), int64(fileHeaderSize + len(intent) + len(rec))
		}
	}
	t.Fatal("no completion ends in a fake record")
	return nil, 0
}

// After a record whose header checksum fails, recovery and Scan search for
// whole records from the next aligned offset on, never from before it:
// bytes of the last whole record and of the damaged header that happen to
// form a record are no evidence, and the damaged record is a torn tail, or,
// with its checksums holding, damage that ends at the end of the file.
// Clauses: J2.2, J3.4.
func TestTheSearchAfterADamagedRecordStartsAfterIt(t *testing.T) {
	file, off := fakeAfter(t, false)
	_, after, err := recoverBytes(file)
	if err != nil || !bytes.Equal(after, file[:off]) {
		t.Fatalf("recovery: %v, the file cut to %d bytes; want it cut at %d", err, len(after), off)
	}
	size := int64(len(file))
	if rep := scanBytes(t, file); len(rep.Problems) != 1 || rep.Problems[0].Offset != off || rep.Problems[0].End != size || !rep.Problems[0].Torn {
		t.Fatalf("Scan found %+v, want one torn tail from %d to %d", rep.Problems, off, size)
	}
	file, off = fakeAfter(t, true)
	var ce *CorruptError
	if _, _, err := recoverBytes(file); !errors.As(err, &ce) || ce.Offset != off {
		t.Fatalf("recovery of a record whose checksums hold but that is invalid: %v, want corruption at %d", err, off)
	}
	if rep := scanBytes(t, file); len(rep.Problems) != 1 || rep.Problems[0].Offset != off || rep.Problems[0].End != size || rep.Problems[0].Torn {
		t.Fatalf("Scan found %+v, want one damaged stretch from %d to %d", rep.Problems, off, size)
	}
}

// byteCountingFile counts the bytes its reads ask for.
type byteCountingFile struct {
	memFile
	asked atomic.Int64
}

func (f *byteCountingFile) ReadAt(p []byte, off int64) (int, error) {
	f.asked.Add(int64(len(p)))
	return f.memFile.ReadAt(p, off)
}

// Recovery with read-ahead reads every byte of a whole journal exactly
// once, whatever its records' sizes against the chunks, and finds what
// recovery without it finds.
// Clause: J2 (recovery's reads; no clause of their own).
func TestRecoveryReadsEveryByteOnce(t *testing.T) {
	withSmallReadAhead(t)
	file := readAheadJournal(t)
	f := &byteCountingFile{memFile: memFile{b: bytes.Clone(file)}}
	j := newJournal(quietOptions())
	j.path = "x"
	j.f = f
	if err := j.recover(f, int64(len(file))); err != nil {
		t.Fatal(err)
	}
	if n := f.asked.Load(); n != int64(len(file)) {
		t.Fatalf("recovery asked for %d bytes of a %d-byte file", n, len(file))
	}
	plain, _, err := recoverBytes(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := records(j), records(plain); !reflect.DeepEqual(got, want) {
		t.Fatalf("with read-ahead %d records, without %d, or they differ", len(got), len(want))
	}
}

// WriteSalvaged gives the file the mode asked for, keeps the new journal
// once renamed into place even if the directory fsync then fails, and,
// failing before that, removes its claim on the name and reports exactly
// what failed.
// Clause: J7.3.
func TestWriteSalvagedEdges(t *testing.T) {
	ops := []Record{recordOf(testIntent(1))}
	dir := t.TempDir()
	path := filepath.Join(dir, "a.journal")
	if err := WriteSalvaged(path, ops, 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("salvaged journal: %v, %v; want mode 0640", fi.Mode(), err)
	}

	path = filepath.Join(dir, "b.journal")
	o := quietOptions()
	o.syncDir = func(string) error { return errInjected }
	if err := writeSalvaged(path, ops, o); err == nil || err.Error() != "fsync of directory after rename: injected fault" {
		t.Fatalf("writeSalvaged with a failing directory fsync: %v", err)
	}
	mustClose(t, openTestJournal(t, path, quietOptions()))
	if b := readFile(t, path); !bytes.Equal(b, fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))) {
		t.Fatalf("the journal renamed into place is %x", b)
	}

	for _, tc := range []struct {
		name  string
		claim func(path string) // at the temporary file's fsync, which fails
		want  string
	}{
		{"claim gone", func(path string) { removeFile(t, path) }, "fsync of PATH.compact: injected fault"},
		{"claim undeletable", func(path string) { makeUndeletable(t, path) },
			"fsync of PATH.compact: injected fault\nremove PATH: directory not empty"},
	} {
		path := filepath.Join(t.TempDir(), "c.journal")
		o := quietOptions()
		o.WrapFile = func(f File) File {
			return &hookFile{File: f, sync: func(File) error {
				tc.claim(path)
				return errInjected
			}}
		}
		err := writeSalvaged(path, ops, o)
		if want := strings.ReplaceAll(tc.want, "PATH", path); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, want)
		}
	}
}

// Recovery with read-ahead over records of every size against the chunks,
// up to several chunks, reads every byte once and finds what recovery
// without read-ahead finds; it cuts a file ending inside a record header
// after reading ahead to its end; a file shorter than its size is
// io.ErrUnexpectedEOF.
// Clause: J2 (recovery's reads; no clause of their own).
func TestRecoveryReadsAheadRecordsOfEverySize(t *testing.T) {
	withSmallReadAhead(t)
	buf := appendFileHeader(nil)
	for i := range 300 {
		r := recordOf(testIntent(i))
		var start int
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendIntent(buf, &r), start, recIntent)
		c := Completion{ID: r.ID, State: Done, Completed: testNow, Status: 200, Body: bytes.Repeat([]byte{byte(i)}, (i*977)%14000)}
		o := newOutcome(c)
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendCompletion(buf, r.ID, Done, &o), start, recCompletion)
	}
	f := &byteCountingFile{memFile: memFile{b: bytes.Clone(buf)}}
	j := newJournal(quietOptions())
	j.path = "x"
	j.f = f
	if err := j.recover(f, int64(len(buf))); err != nil {
		t.Fatal(err)
	}
	if n := f.asked.Load(); n != int64(len(buf)) {
		t.Fatalf("recovery asked for %d bytes of a %d-byte file", n, len(buf))
	}
	chunk := readAheadChunk
	readAheadChunk = math.MaxInt // never
	plain, _, err := recoverBytes(buf)
	readAheadChunk = chunk
	if err != nil {
		t.Fatal(err)
	}
	if got, want := records(j), records(plain); len(got) != 300 || !reflect.DeepEqual(got, want) {
		t.Fatalf("with read-ahead %d records, without %d, or they differ", len(got), len(want))
	}

	torn := append(bytes.Clone(buf), frameRecord(t, recIntent, nil)[:5]...)
	if _, after, err := recoverBytes(torn); err != nil || !bytes.Equal(after, buf) {
		t.Fatalf("recovery of a file ending inside a record header: %v, %d bytes left; want %d", err, len(after), len(buf))
	}

	short := &memFile{b: buf[:len(buf)/2]}
	j = newJournal(quietOptions())
	j.path = "x"
	if err := j.recover(short, int64(len(buf))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("recovery of a file that ends early: %v, want io.ErrUnexpectedEOF", err)
	}
}

// Recovery with read-ahead reads once a record longer than a chunk whose
// header straddles the end of one: the header's read and the record's read
// both come from the read-ahead.
// Clause: J2 (recovery's reads; no clause of their own).
func TestRecoveryReadsAheadARecordWhoseHeaderStraddlesAChunk(t *testing.T) {
	withSmallReadAhead(t)
	intent := func(i int) []byte { return frameRecord(t, recIntent, intentPayload(testIntent(i))) }
	completion := func(i, n int) []byte {
		c := Completion{ID: testIntent(i).ID, State: Done, Completed: testNow, Status: 200, Body: bytes.Repeat([]byte("c"), n)}
		return frameRecord(t, recCompletion, completionPayload(c))
	}
	straddle := readChunk + readAheadChunk - 8 // where the long record starts
	first := fileOf(intent(0))
	var filler []byte
	for n := 0; len(first)+len(filler)+len(intent(1)) < straddle; n++ {
		filler = completion(0, n)
	}
	file := cat(first, filler, intent(1))
	if len(file) != straddle {
		t.Fatalf("the long record would start at %d, want %d", len(file), straddle)
	}
	file = cat(file, completion(1, 3*readAheadChunk))
	f := &byteCountingFile{memFile: memFile{b: bytes.Clone(file)}}
	j := newJournal(quietOptions())
	j.path = "x"
	j.f = f
	if err := j.recover(f, int64(len(file))); err != nil {
		t.Fatal(err)
	}
	if n := f.asked.Load(); n != int64(len(file)) {
		t.Fatalf("recovery asked for %d bytes of a %d-byte file", n, len(file))
	}
	if r, _ := lookup(t, j, testIntent(1).ID); len(r.Raw) < 3*readAheadChunk {
		t.Fatalf("the long record read back with %d bytes of header and body", len(r.Raw))
	}
}

// Scan goes on after a record whose checksums hold but that breaks the
// format from the next aligned offset, never from before it: the end of the
// record before and the invalid header, which here happen to form a whole
// record, are not read as one.
// Clause: J3.4.
func TestScanResumesAfterAnInvalidRecord(t *testing.T) {
	// A record whose 13-byte payload makes its last 8 bytes (a payload
	// byte, the data checksum, 3 bytes of padding) a record header that
	// holds with a length of 121*256 and type 2, found by search.
	p := binary.LittleEndian.AppendUint64(nil, 5235875)
	p = append(p, 0, 0, 0, 0, 0)
	prev := frameRecord(t, recIntent, p)
	fake := prev[len(prev)-8:]
	n := int(binary.LittleEndian.Uint32(fake))
	if len(prev) != 32 || n != 121*256 || fake[4] != byte(recCompletion) || fake[5]|fake[6]|fake[7] != 0 {
		t.Fatalf("the record's end is %x", fake)
	}
	// The invalid record: its length is the fake header's checksum, its
	// reserved bytes are not zero, its header checksum holds; it and the
	// rest are the fake record's payload.
	invalid := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(fake, castagnoli))
	invalid = append(invalid, byte(recIntent), 1, 1, 1)
	invalid = binary.LittleEndian.AppendUint32(invalid, crc32.Checksum(invalid, castagnoli))
	payload := append(bytes.Clone(invalid[4:]), make([]byte, n-8)...)
	tail := append(invalid[:4:4], payload...)
	tail = binary.LittleEndian.AppendUint32(tail, crc32.Update(typeCRC[recCompletion], castagnoli, payload))
	for (len(tail)+8)%recordAlign != 0 {
		tail = append(tail, 0)
	}
	file := fileOf(prev, tail)
	off, size := int64(fileHeaderSize+len(prev)), int64(len(file))
	rep := scanBytes(t, file)
	if len(rep.Problems) != 2 || rep.Problems[0].End != off || rep.Problems[1].Offset != off || rep.Problems[1].End != size || rep.Problems[1].Torn ||
		rep.Problems[1].Reason != "reserved record header bytes are not zero" {
		t.Fatalf("Scan found %+v, want the undecodable record up to %d and damage from there to %d", rep.Problems, off, size)
	}
}

// Recovery's reader returns nothing for a range at the end of the file, without reading it, and keeps its buffer.
// Clause: J2 (recovery's reads; no clause of their own).
func TestFileReaderReadsNothingAtTheEndOfTheFile(t *testing.T) {
	b := fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))
	c := &countingReaderAt{r: bytes.NewReader(b)}
	fr := newFileReader(c, int64(len(b)))
	if got, err := fr.at(0, fileHeaderSize); err != nil || !bytes.Equal(got, b[:fileHeaderSize]) {
		t.Fatalf("at(0, %d) = %x, %v", fileHeaderSize, got, err)
	}
	if got, err := fr.at(int64(len(b)), recordHeaderSize); got != nil || err != nil {
		t.Fatalf("at(%d, %d), the end of the file, = %#v, %v; want nil, nil", len(b), recordHeaderSize, got, err)
	}
	if got, err := fr.at(fileHeaderSize, recordHeaderSize); err != nil || !bytes.Equal(got, b[fileHeaderSize:fileHeaderSize+recordHeaderSize]) {
		t.Fatalf("at(%d, %d) = %x, %v", fileHeaderSize, recordHeaderSize, got, err)
	}
	if n := c.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the file, want 1", n)
	}
}

// A read that fails in the read-ahead fails recovery with that error, also when reading the same range again would succeed.
// Clause: J3.1.
func TestRecoveryReportsTheReadAheadsReadError(t *testing.T) {
	withSmallReadAhead(t)
	file := readAheadJournal(t)
	ahead := int64(readChunk) // where read-ahead starts: after the first read, of readChunk bytes
	if int64(len(file))-ahead <= int64(readAheadChunk) {
		t.Fatalf("a %d-byte file is read without read-ahead", len(file))
	}
	for _, failures := range []int64{1, 1 << 30} {
		var failed atomic.Int64
		f := &hookFile{File: &memFile{b: bytes.Clone(file)}, readAt: func(f File, p []byte, off int64) (int, error) {
			if off >= ahead && failed.Add(1) <= failures {
				return 0, errInjected
			}
			return f.ReadAt(p, off)
		}}
		j := newJournal(quietOptions())
		j.path = "x"
		err := j.recover(f, int64(len(file)))
		if want := "filejournal: reading journal x: " + errInjected.Error(); !errors.Is(err, errInjected) || errors.Is(err, ErrCorrupt) || err.Error() != want {
			t.Errorf("%d failing reads: err = %v, want %q", failures, err, want)
		}
	}
}

// After a damaged record, the search for a whole record goes on past a header that holds with a length over the limit or past the end.
// Clauses: J3.3, J2.2.
func TestTheSearchGoesOnPastAHeaderWithAnImpossibleLength(t *testing.T) {
	first := frameRecord(t, recIntent, intentPayload(testIntent(1)))
	for _, n := range []uint32{MaxPayload + 1, 1 << 20} {
		h := make([]byte, 2*recordAlign) // a header that holds, then zeros to the next aligned offset
		binary.LittleEndian.PutUint32(h, n)
		h[4] = byte(recIntent)
		resealHeader(h, 0)
		b := fileOf(first, damagedIntent(t, 2), h, frameRecord(t, recIntent, intentPayload(testIntent(3))))
		_, after, err := recoverBytes(b)
		corruptAt(t, fmt.Sprintf("damaged record before a header of length %d and a whole record", n), err, fileHeaderSize+int64(len(first)), notTornReason)
		if !bytes.Equal(after, b) {
			t.Errorf("length %d: the file was changed", n)
		}
	}
}

// When an fsync ends, wakeWaiters wakes exactly the waiters it covered and one leader, and keeps the others parked.
// Clause: J5.5.
func TestWakeWaitersWakesTheCoveredAndOneLeaderOnly(t *testing.T) {
	j := newJournal(quietOptions())
	j.f = &memFile{}
	j.syncedSeq = 5
	ws := []*waiter{{seq: 3}, {seq: 5}, {seq: 7}, {seq: 9}}
	for _, w := range ws {
		w.wake = make(chan struct{}, 1)
	}
	j.waiters = slices.Clone(ws)
	j.wakeWaiters()
	for i, want := range []bool{true, true, true, false} {
		if got := len(ws[i].wake) == 1; got != want {
			t.Errorf("waiter for record %d woken: %v, want %v", ws[i].seq, got, want)
		}
	}
	if len(j.waiters) != 1 || j.waiters[0] != ws[3] {
		t.Errorf("%d waiters left parked, want only the one for record 9", len(j.waiters))
	}
}

// When a salvaged journal's temporary file fails, WriteSalvaged reports
// its removal's failure, and only a failure other than "not there".
// Clause: J7.3.
func TestWriteSalvagedReportsExactlyWhyTheTemporaryFileStayed(t *testing.T) {
	ops := []Record{recordOf(testIntent(1))}
	for _, tc := range []struct {
		name string
		tmp  func(tmp string) // at the temporary file's fsync, which fails
		want string
	}{
		{"temporary file gone", func(tmp string) { removeFile(t, tmp) }, "fsync of PATH.compact: injected fault"},
		{"temporary file undeletable", func(tmp string) { makeUndeletable(t, tmp) },
			"fsync of PATH.compact: injected fault\nremove PATH.compact: directory not empty"},
	} {
		path := filepath.Join(t.TempDir(), "c.journal")
		o := quietOptions()
		o.WrapFile = func(f File) File {
			return &hookFile{File: f, sync: func(File) error {
				tc.tmp(path + salvageSuffix)
				return errInjected
			}}
		}
		err := writeSalvaged(path, ops, o)
		if want := strings.ReplaceAll(tc.want, "PATH", path); err == nil || err.Error() != want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, want)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the claim on the name is left: %v", tc.name, err)
		}
	}
}

// removeFile removes path.
func removeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// makeUndeletable replaces the file at path by a directory that is not
// empty, which os.Remove cannot remove.
func makeUndeletable(t *testing.T, path string) {
	t.Helper()
	removeFile(t, path)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(path, "x"), nil)
}
