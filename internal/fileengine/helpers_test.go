package fileengine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// testNow is the fixed clock of the journal tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC)

// quietOptions returns options with the fixed clock and no log output.
func quietOptions() Options {
	return Options{
		Now:    func() time.Time { return testNow },
		Logger: slog.New(slog.DiscardHandler),
	}
}

// testIntent returns the intent of operation i, with Created i seconds
// before testNow.
func testIntent(i int) Intent {
	url := fmt.Sprintf("https://api.example.test/charges?n=%d", i)
	body := fmt.Appendf(nil, `{"amount":%d}`, i)
	return Intent{
		ID:          fmt.Sprintf("op-%04d", i),
		Key:         fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Fingerprint: sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s", http.MethodPost, url, body)),
		Method:      http.MethodPost,
		URL:         url,
		Created:     testNow.Add(-time.Duration(i) * time.Second),
		KeyTTL:      DefaultKeyTTL,
	}
}

// testOutcome returns the completion of in as done with a response.
func testOutcome(in Intent, status int, body string) Completion {
	return Completion{
		ID:        in.ID,
		Key:       in.Key,
		State:     Done,
		Completed: in.Created.Add(1500 * time.Millisecond),
		Status:    status,
		Header:    http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a", "b"}},
		Body:      []byte(body),
	}
}

// recordOf returns the record of in after Begin and, if given, after
// Complete with c.
func recordOf(in Intent, c ...Completion) Record {
	r := Record{
		ID:          in.ID,
		Key:         in.Key,
		Method:      in.Method,
		URL:         in.URL,
		Fingerprint: in.Fingerprint,
		Created:     in.Created.UnixNano(),
		KeyTTL:      int64(in.KeyTTL),
		State:       Pending,
	}
	for _, c := range c {
		r.State = c.State
		r.Outcome = newOutcome(c)
	}
	return r
}

// newOutcome encodes c's outcome as the journal keeps it.
func newOutcome(c Completion) Outcome {
	return newOutcomeInto(nil, c.Completed, c.Status, c.Flags, c.Header, c.Body)
}

// newOutcomeInto encodes an outcome as Lookup returns it, through scratch,
// a buffer the caller reuses (or nil).
func newOutcomeInto(scratch *[]byte, completed time.Time, status int, flags uint8, h http.Header, body []byte) Outcome {
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	buf = appendHeaderBody(buf, h, body)
	if scratch != nil {
		*scratch = buf
	}
	return Outcome{Completed: completed.UnixNano(), Status: int32(status), Flags: flags, Raw: string(buf)}
}

// records returns every record j holds, ordered as List orders them. A
// record that cannot be read back panics: the tests that call it expect
// none.
func records(j *Journal) []Record {
	recs, err := List(j, func(*Meta) bool { return true }, func(r *Record) Record { return *r })
	if err != nil {
		panic(err)
	}
	return recs
}

// lookup is Lookup, failing the test on an error.
func lookup(t testing.TB, j *Journal, id string) (Record, bool) {
	t.Helper()
	r, ok, err := j.Lookup(id)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", id, err)
	}
	return r, ok
}

func journalPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "ops.journal")
}

func openTestJournal(t testing.TB, path string, o Options) *Journal {
	t.Helper()
	j, err := Open(path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mustBegin(t testing.TB, j *Journal, in Intent) {
	t.Helper()
	if err := j.Begin(in); err != nil {
		t.Fatalf("Begin(%s): %v", in.ID, err)
	}
}

func mustComplete(t testing.TB, j *Journal, c Completion) {
	t.Helper()
	if err := j.Complete(c); err != nil {
		t.Fatalf("Complete(%s): %v", c.ID, err)
	}
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sameRecords fails the test unless got and want are equal field by field.
func sameRecords(t testing.TB, what string, got, want []Record) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %d records %+v\n want %d records %+v", what, len(got), got, len(want), want)
	}
}

// recordOffsets parses the framing of a journal file independently of the
// journal's reader: the offset of every record, then the file size.
func recordOffsets(t testing.TB, b []byte) []int64 {
	t.Helper()
	var offs []int64
	off := int64(fileHeaderSize)
	for off < int64(len(b)) {
		offs = append(offs, off)
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		off += (16 + n + 7) &^ 7
	}
	if off != int64(len(b)) {
		t.Fatalf("records end at %d, file at %d", off, len(b))
	}
	return append(offs, off)
}

// resealHeader recomputes the header checksum of the record at off.
func resealHeader(b []byte, off int64) {
	h := b[off : off+recordHeaderSize]
	binary.LittleEndian.PutUint32(h[8:], crc32.Checksum(h[:8], castagnoli))
}

// resealData recomputes the data checksum of the record at off.
func resealData(b []byte, off int64) {
	n := int64(binary.LittleEndian.Uint32(b[off:]))
	p := b[off+recordHeaderSize : off+recordHeaderSize+n]
	binary.LittleEndian.PutUint32(b[off+recordHeaderSize+n:], crc32.Update(typeCRC[b[off+4]], castagnoli, p))
}

// frameRecord frames a payload the way the journal does.
func frameRecord(t testing.TB, typ recordType, payload []byte) []byte {
	t.Helper()
	buf, start := beginRecord(nil)
	buf, err := endRecord(append(buf, payload...), start, typ)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func intentPayload(in Intent) []byte {
	r := recordOf(in)
	return appendIntent(nil, &r)
}

func completionPayload(c Completion) []byte {
	o := newOutcome(c)
	return appendCompletion(nil, c.ID, c.State, &o)
}

// fileOf returns a journal file: the header and then the records.
func fileOf(records ...[]byte) []byte {
	b := appendFileHeader(nil)
	for _, r := range records {
		b = append(b, r...)
	}
	return b
}

// hookFile is a File whose calls can be intercepted.
type hookFile struct {
	File
	write  func(f File, p []byte) (int, error)
	sync   func(f File) error
	close  func(f File) error
	readAt func(f File, p []byte, off int64) (int, error)
}

func (h *hookFile) ReadAt(p []byte, off int64) (int, error) {
	if h.readAt != nil {
		return h.readAt(h.File, p, off)
	}
	return h.File.ReadAt(p, off)
}

func (h *hookFile) Write(p []byte) (int, error) {
	if h.write != nil {
		return h.write(h.File, p)
	}
	return h.File.Write(p)
}

func (h *hookFile) Sync() error {
	if h.sync != nil {
		return h.sync(h.File)
	}
	return h.File.Sync()
}

func (h *hookFile) Close() error {
	if h.close != nil {
		return h.close(h.File)
	}
	return h.File.Close()
}

// fileName is the base name of the file f.
func fileName(f File) string {
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	return fi.Name()
}

// contents reads all of f.
func contents(f File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

var errInjected = errors.New("injected fault")
