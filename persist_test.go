package idem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testNow is the fixed clock of the journal tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC)

// quietOptions returns options with the fixed clock and no log output.
func quietOptions() JournalOptions {
	return JournalOptions{
		Now:    func() time.Time { return testNow },
		Logger: slog.New(slog.DiscardHandler),
	}
}

// testIntent returns the intent of operation i, with Created i seconds
// before testNow.
func testIntent(i int) Operation {
	url := fmt.Sprintf("https://api.example.test/charges?n=%d", i)
	body := fmt.Appendf(nil, `{"amount":%d}`, i)
	return Operation{
		ID:          fmt.Sprintf("op-%04d", i),
		Key:         fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		Fingerprint: fingerprintOf(http.MethodPost, url, body),
		Method:      http.MethodPost,
		URL:         url,
		Created:     testNow.Add(-time.Duration(i) * time.Second),
		State:       Pending,
	}
}

// testOutcome returns op completed as done with a response.
func testOutcome(op Operation, status int, body string) Operation {
	op.State = Done
	op.Completed = op.Created.Add(1500 * time.Millisecond)
	op.Status = status
	op.Header = http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"a", "b"}}
	op.Body = []byte(body)
	return op
}

func journalPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "ops.journal")
}

func openTestJournal(t testing.TB, path string, o JournalOptions) *FileJournal {
	t.Helper()
	j, err := OpenJournalWithOptions(path, o)
	if err != nil {
		t.Fatalf("OpenJournalWithOptions(%s): %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mustBegin(t testing.TB, j *FileJournal, op Operation) {
	t.Helper()
	if err := j.Begin(op); err != nil {
		t.Fatalf("Begin(%s): %v", op.ID, err)
	}
}

func mustComplete(t testing.TB, j *FileJournal, op Operation) {
	t.Helper()
	if err := j.Complete(op); err != nil {
		t.Fatalf("Complete(%s): %v", op.ID, err)
	}
}

func mustClose(t testing.TB, j *FileJournal) {
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

// sameOperations fails the test unless got and want are equal field by
// field.
func sameOperations(t testing.TB, what string, got, want []Operation) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %d operations %+v\n want %d operations %+v", what, len(got), got, len(want), want)
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

func intentPayload(op Operation) []byte {
	e := entry{id: op.ID, key: op.Key, fp: op.Fingerprint, method: op.Method, url: op.URL, created: op.Created.UnixNano()}
	return appendIntent(nil, &e)
}

func completionPayload(op Operation) []byte {
	o := newOutcome(op.Completed, op.Status, op.flags(), op.Header, op.Body)
	return appendCompletion(nil, op.ID, op.State, &o)
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
	write func(f File, p []byte) (int, error)
	sync  func(f File) error
	close func(f File) error
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

// --- J8, round trip -------------------------------------------------------

func TestJournalReopenRoundTripsEveryField(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())

	pending := testIntent(1)
	done := testIntent(2)
	rejected := testIntent(3)
	truncated := testIntent(4)
	odd := Operation{ // empty method and URL, zero fingerprint, a time far from now
		ID:      strings.Repeat("x", maxIDLen),
		Key:     "k\x00with\xffbytes",
		Created: time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC),
	}
	for _, op := range []Operation{pending, done, rejected, truncated, odd} {
		mustBegin(t, j, op)
	}
	done = testOutcome(done, 201, `{"id":"ch_1"}`)
	mustComplete(t, j, done)
	rejected.State = Rejected
	rejected.Completed = time.Date(2031, 5, 6, 7, 8, 9, 999999999, time.UTC)
	rejected.Status = 409
	rejected.Header = http.Header{"Content-Type": {"application/problem+json"}, "Empty": nil, "Retry-After": {"3"}}
	rejected.Body = []byte("{\"type\":\"https://x/insufficient-stock\"}\x00\xff")
	mustComplete(t, j, rejected)
	truncated.State = Done
	truncated.Completed = testNow
	truncated.Status = 200
	truncated.BodyTruncated = true
	mustComplete(t, j, truncated)
	odd.State = Done
	odd.Completed = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
	mustComplete(t, j, odd)

	// Ordered by Created.
	want := []Operation{odd, truncated, rejected, done, pending}

	sameOperations(t, "before reopen", list(j, ListAll), want)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", list(j2, ListAll), want)
	for _, op := range want {
		got, ok := lookup(j2, op.ID)
		if !ok || !reflect.DeepEqual(got, op) {
			t.Fatalf("Lookup(%s) = %+v, %v; want %+v", quoteID(op.ID), got, ok, op)
		}
	}
	st := j2.Stats()
	if st.Records != 9 || st.Operations != 5 || st.Appends != 0 || st.Truncated != 0 {
		t.Fatalf("stats after reopen = %+v; want 9 records, 5 operations, 0 appends, 0 truncated", st)
	}
}

func TestJournalLookupReturnsCopies(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	op := testIntent(1)
	mustBegin(t, j, op)
	done := testOutcome(op, 200, "body")
	mustComplete(t, j, done)
	done.Header.Set("Content-Type", "changed by caller")
	done.Body[0] = 'X'

	got, _ := lookup(j, op.ID)
	got.Header.Set("X-Request-Id", "changed")
	got.Body[0] = 'Y'
	again, _ := lookup(j, op.ID)
	if again.Header.Get("Content-Type") != "application/json" || again.Header.Get("X-Request-Id") != "a" || string(again.Body) != "body" {
		t.Fatalf("journal's copy changed through a caller's slice or map: %+v", again)
	}
}

func TestJournalCompletionReplacesOutcome(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	op := testIntent(1)
	mustBegin(t, j, op)
	mustComplete(t, j, testOutcome(op, 500, "first"))
	second := testOutcome(op, 201, "second")
	mustComplete(t, j, second)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", list(j2, ListAll), []Operation{second})
}

func TestJournalListings(t *testing.T) {
	o := quietOptions()
	o.KeyTTL = time.Hour
	j := openTestJournal(t, journalPath(t), o)
	fresh := testIntent(10)     // 10s old
	expired := testIntent(3600) // exactly KeyTTL old: expired
	young := testIntent(3599)   // one second short of KeyTTL
	done := testOutcome(testIntent(20), 200, "")
	rejected := testIntent(30)
	for _, op := range []Operation{fresh, expired, young, testIntent(20), rejected} {
		mustBegin(t, j, op)
	}
	mustComplete(t, j, done)
	rejected.State, rejected.Completed, rejected.Status = Rejected, testNow, 422
	mustComplete(t, j, rejected)
	done.Body = nil // an empty body reads back as nil

	sameOperations(t, "Pending", list(j, ListPending), []Operation{young, fresh})
	sameOperations(t, "Expired", list(j, ListExpired), []Operation{expired})
	sameOperations(t, "Completed", list(j, ListCompleted), []Operation{rejected, done})
	sameOperations(t, "Operations", list(j, ListAll), []Operation{expired, young, rejected, done, fresh})
	if _, ok := lookup(j, "missing"); ok {
		t.Fatal("Lookup(missing) found an operation")
	}
	if !expired.Expired(testNow, time.Hour) || young.Expired(testNow, time.Hour) || done.Expired(testNow.Add(48*time.Hour), time.Hour) {
		t.Fatal("Operation.Expired disagrees with its definition")
	}
}

func TestJournalOrdersEqualCreatedTimesByID(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	b, a := testIntent(1), testIntent(2)
	b.ID, a.ID = "b", "a"
	a.Created = b.Created
	mustBegin(t, j, b)
	mustBegin(t, j, a)
	sameOperations(t, "Operations", list(j, ListAll), []Operation{a, b})
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Pending: "pending", Done: "done", Rejected: "rejected", 0: "State(0)", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}

// --- validation -----------------------------------------------------------

func TestJournalRefusesInvalidOperations(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	mustBegin(t, j, testIntent(1))
	okOutcome := testOutcome(testIntent(1), 200, "ok")

	begins := map[string]Operation{
		"empty ID":         {Key: "k"},
		"long ID":          {ID: strings.Repeat("i", maxIDLen+1), Key: "k"},
		"empty key":        {ID: "x"},
		"long key":         {ID: "x", Key: strings.Repeat("k", maxKeyLen+1)},
		"done state":       {ID: "x", Key: "k", State: Done},
		"invalid state":    {ID: "x", Key: "k", State: 7},
		"outcome set":      {ID: "x", Key: "k", Status: 200},
		"body set":         {ID: "x", Key: "k", Body: []byte{}},
		"time too early":   {ID: "x", Key: "k", Created: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
		"time too late":    {ID: "x", Key: "k", Created: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"record too large": {ID: "x", Key: "k", Method: "POST", URL: strings.Repeat("u", maxPayload)},
	}
	for name, op := range begins {
		if err := j.Begin(op); !errors.Is(err, ErrInvalidOperation) {
			t.Errorf("Begin with %s: err = %v, want ErrInvalidOperation", name, err)
		}
	}
	completes := map[string]Operation{
		"empty ID":        {State: Done},
		"pending state":   {ID: "op-0001", State: Pending},
		"zero state":      {ID: "op-0001"},
		"negative status": {ID: "op-0001", State: Done, Status: -1},
		"status 1000":     {ID: "op-0001", State: Done, Status: 1000},
		"truncated body":  {ID: "op-0001", State: Done, BodyTruncated: true, Body: []byte("x")},
		"summarized":      {ID: "op-0001", State: Done, Summarized: true},
		"wrong key":       {ID: "op-0001", Key: "other", State: Done},
		"body too large":  {ID: "op-0001", State: Done, Body: make([]byte, maxPayload+1)},
		"time too late":   {ID: "op-0001", State: Done, Completed: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for name, op := range completes {
		if err := j.Complete(op); !errors.Is(err, ErrInvalidOperation) {
			t.Errorf("Complete with %s: err = %v, want ErrInvalidOperation", name, err)
		}
	}
	if err := j.Begin(testIntent(1)); !errors.Is(err, ErrOperationExists) {
		t.Errorf("second Begin of op-0001: err = %v, want ErrOperationExists", err)
	}
	if err := j.Complete(Operation{ID: "never-begun", State: Done}); !errors.Is(err, ErrNoSuchOperation) {
		t.Errorf("Complete of unknown ID: err = %v, want ErrNoSuchOperation", err)
	}
	if st := j.Stats(); st.Appends != 1 || st.Records != 1 {
		t.Fatalf("refused calls wrote records: %+v", st)
	}
	mustComplete(t, j, okOutcome)
}

func TestJournalFillsZeroTimesFromItsClock(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, Operation{ID: "a", Key: "k"})
	mustComplete(t, j, Operation{ID: "a", State: Rejected, Status: 400})
	want := []Operation{{ID: "a", Key: "k", Created: testNow, State: Rejected, Completed: testNow, Status: 400}}
	sameOperations(t, "Operations", list(j, ListAll), want)
	mustClose(t, j)
	sameOperations(t, "after reopen", list(openTestJournal(t, path, quietOptions()), ListAll), want)
}

// --- J7, creation ---------------------------------------------------------

func TestJournalCreateWritesAndSyncsHeaderAndDirectory(t *testing.T) {
	path := journalPath(t)
	var synced []string
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			synced = append(synced, fileName(f))
			return f.Sync()
		}}
	}
	var dirSynced []string
	o.syncDir = func(dir string) error {
		dirSynced = append(dirSynced, dir)
		return syncDir(dir)
	}
	j := openTestJournal(t, path, o)
	if got := readFile(t, path); !bytes.Equal(got, appendFileHeader(nil)) {
		t.Fatalf("new journal is %x, want the file header %x", got, appendFileHeader(nil))
	}
	if want := []string{"ops.journal.compact"}; !reflect.DeepEqual(synced, want) {
		t.Fatalf("files fsync'd on create = %q, want %q", synced, want)
	}
	if want := []string{filepath.Dir(path)}; !reflect.DeepEqual(dirSynced, want) {
		t.Fatalf("directories fsync'd on create = %q, want %q", dirSynced, want)
	}
	if st := j.Stats(); st.Syncs != 1 || st.DirSyncs != 1 || st.FileSize != fileHeaderSize {
		t.Fatalf("stats after create = %+v", st)
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left after create: %v", err)
	}
}

func TestJournalTreatsAnEmptyFileAsNew(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, nil)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	if n := len(list(openTestJournal(t, path, quietOptions()), ListAll)); n != 1 {
		t.Fatalf("reopened journal holds %d operations, want 1", n)
	}
}

func TestJournalOpenRefusesEmptyPathAndMissingDirectory(t *testing.T) {
	if _, err := OpenJournal(""); err == nil {
		t.Fatal("OpenJournal(\"\") succeeded")
	}
	if _, err := OpenJournal(filepath.Join(t.TempDir(), "missing", "j")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenJournal in a missing directory: err = %v, want a not-exist error", err)
	}
}

// --- J2, torn tail --------------------------------------------------------

// tornTailCase is a journal whose last record a crash may have torn.
type tornTailCase struct {
	name   string
	file   []byte      // the whole journal
	last   int64       // offset of its last record
	before []Operation // what the journal holds without the last record
}

// tornTailCases builds journals ending in an intent, a small completion
// and a large completion.
func tornTailCases(t *testing.T) []tornTailCase {
	var cases []tornTailCase
	for _, c := range []struct {
		name string
		last func(t *testing.T, j *FileJournal) // appends the last record
	}{
		{"intent", func(t *testing.T, j *FileJournal) { mustBegin(t, j, testIntent(9)) }},
		{"completion", func(t *testing.T, j *FileJournal) {
			mustComplete(t, j, testOutcome(testIntent(2), 200, "ok"))
		}},
		{"large completion", func(t *testing.T, j *FileJournal) {
			mustComplete(t, j, testOutcome(testIntent(2), 200, strings.Repeat("b", 400)))
		}},
	} {
		path := journalPath(t)
		j := openTestJournal(t, path, quietOptions())
		for i := 1; i <= 3; i++ {
			mustBegin(t, j, testIntent(i))
		}
		mustComplete(t, j, testOutcome(testIntent(1), 201, `{"id":1}`))
		before := list(j, ListAll)
		last := j.Stats().FileSize
		c.last(t, j)
		mustClose(t, j)
		cases = append(cases, tornTailCase{c.name, readFile(t, path), last, before})
	}
	return cases
}

func TestJournalTruncatesATornTailAtEveryOffset(t *testing.T) {
	for _, c := range tornTailCases(t) {
		payloadEnd := c.last + recordHeaderSize + int64(binary.LittleEndian.Uint32(c.file[c.last:]))
		for _, fill := range []string{"cut", "zero-filled"} {
			t.Run(c.name+"/"+fill, func(t *testing.T) {
				for cut := c.last; cut < int64(len(c.file)); cut++ {
					torn := bytes.Clone(c.file[:cut])
					if fill == "zero-filled" {
						if cut >= payloadEnd+recordCRCSize {
							break // zeros after the checksum are the padding: the record is whole
						}
						// The file grew but the data never reached the disk.
						torn = append(torn, make([]byte, int64(len(c.file))-cut)...)
					}
					checkTornTailRecovers(t, torn, c.last, c.before, fmt.Sprintf("cut at %d", cut))
				}
			})
		}
		t.Run(c.name+"/data checksum", func(t *testing.T) {
			// The whole record is there but one byte of its payload is not.
			for i := c.last + recordHeaderSize; i < payloadEnd; i += 7 {
				torn := bytes.Clone(c.file)
				torn[i] ^= 0x40
				checkTornTailRecovers(t, torn, c.last, c.before, fmt.Sprintf("byte %d flipped", i))
			}
		})
	}
}

// checkTornTailRecovers opens file, expects the torn tail from good on cut
// away, and then appends and reopens.
func checkTornTailRecovers(t *testing.T, file []byte, good int64, before []Operation, what string) {
	t.Helper()
	path := journalPath(t)
	writeFile(t, path, file)
	j, err := OpenJournalWithOptions(path, quietOptions())
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	sameOperations(t, what+": after recovery", list(j, ListAll), before)
	st := j.Stats()
	if st.FileSize != good || st.Truncated != int64(len(file))-good {
		t.Fatalf("%s: stats = %+v; want FileSize %d, Truncated %d", what, st, good, int64(len(file))-good)
	}
	if got := readFile(t, path); !bytes.Equal(got, file[:good]) {
		t.Fatalf("%s: file after recovery is %d bytes, want the %d bytes before the torn record", what, len(got), good)
	}
	next := testIntent(100)
	mustBegin(t, j, next)
	mustClose(t, j)

	j2, err := OpenJournalWithOptions(path, quietOptions())
	if err != nil {
		t.Fatalf("%s: reopen after append: %v", what, err)
	}
	defer j2.Close()
	if st := j2.Stats(); st.Truncated != 0 {
		t.Fatalf("%s: reopen after append truncated %d bytes", what, st.Truncated)
	}
	got, ok := lookup(j2, next.ID)
	if !ok || !reflect.DeepEqual(got, next) || len(list(j2, ListAll)) != len(before)+1 {
		t.Fatalf("%s: reopen after append holds %+v", what, list(j2, ListAll))
	}
}

func TestJournalTruncatesATornRecordLargerThanTheReadBuffer(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	before := list(j, ListAll)
	last := j.Stats().FileSize
	mustComplete(t, j, testOutcome(testIntent(1), 200, strings.Repeat("L", readChunk+readChunk/2)))
	mustClose(t, j)
	file := readFile(t, path)
	for _, cut := range []int64{last + 1, last + recordHeaderSize, last + readChunk - 1, last + readChunk, last + readChunk + 1, int64(len(file)) - 1} {
		checkTornTailRecovers(t, file[:cut], last, before, fmt.Sprintf("cut at %d", cut))
	}
}

func TestJournalTruncatesGarbageAfterTheLastRecord(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	good := readFile(t, path)
	// Bytes that are no record: a torn write of something never finished.
	torn := append(bytes.Clone(good), bytes.Repeat([]byte{0xA5, 0x5A, 0xFF}, 40)...)
	checkTornTailRecovers(t, torn, int64(len(good)), []Operation{testIntent(1)}, "garbage tail")
}

// --- J3, corruption -------------------------------------------------------

// corruptFixture is a journal of five records: three intents and two
// completions.
func corruptFixture(t *testing.T) (file []byte, offs []int64) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	for i := 1; i <= 3; i++ {
		mustBegin(t, j, testIntent(i))
	}
	mustComplete(t, j, testOutcome(testIntent(1), 200, "a body of some length"))
	mustComplete(t, j, testOutcome(testIntent(2), 201, "x"))
	mustClose(t, j)
	file = readFile(t, path)
	return file, recordOffsets(t, file)
}

// expectCorrupt opens file and expects a *CorruptError at offset whose reason
// contains reason, with the file left as it was.
func expectCorrupt(t *testing.T, file []byte, offset int64, reason string) {
	t.Helper()
	for _, readOnly := range []bool{false, true} {
		path := journalPath(t)
		writeFile(t, path, file)
		o := quietOptions()
		o.ReadOnly = readOnly
		j, err := OpenJournalWithOptions(path, o)
		if err == nil {
			j.Close()
			t.Fatalf("open (read-only %v) succeeded, want corruption at %d (%s)", readOnly, offset, reason)
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open (read-only %v): err = %v, want a *CorruptError matching ErrCorrupt", readOnly, err)
		}
		if ce.Path != path || ce.Offset != offset || !strings.Contains(ce.Reason, reason) {
			t.Fatalf("open (read-only %v): %+v; want offset %d, reason containing %q", readOnly, ce, offset, reason)
		}
		if got := readFile(t, path); !bytes.Equal(got, file) {
			t.Fatalf("open (read-only %v) changed the corrupt file", readOnly)
		}
		if !readOnly {
			// The failed open released its lock.
			if j, err := OpenJournalWithOptions(path, o); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("second open: err = %v, want ErrCorrupt again", err)
			} else if j != nil {
				j.Close()
			}
		}
	}
}

func TestJournalReportsCorruptionMidFile(t *testing.T) {
	file, offs := corruptFixture(t)
	lastRec := offs[len(offs)-2]
	cases := []struct {
		name   string
		damage func(b []byte) int64 // returns the offset the error must name
		reason string
	}{
		{"header length", func(b []byte) int64 { b[offs[1]] ^= 0x08; return offs[1] }, "header checksum"},
		{"header length high byte", func(b []byte) int64 { b[offs[2]+3] = 0x7f; return offs[2] }, "header checksum"},
		{"header checksum", func(b []byte) int64 { b[offs[0]+9] ^= 1; return offs[0] }, "header checksum"},
		{"header type", func(b []byte) int64 { b[offs[3]+4] = 9; return offs[3] }, "header checksum"},
		{"intent payload", func(b []byte) int64 { b[offs[1]+recordHeaderSize+5] ^= 0x20; return offs[1] }, "data checksum"},
		{"completion payload", func(b []byte) int64 { b[offs[3]+recordHeaderSize+20] ^= 0x01; return offs[3] }, "data checksum"},
		{"data checksum", func(b []byte) int64 {
			n := int64(binary.LittleEndian.Uint32(b[offs[0]:]))
			b[offs[0]+recordHeaderSize+n] ^= 0x80
			return offs[0]
		}, "data checksum"},
		{"padding", func(b []byte) int64 { return damagePadding(t, b, offs[:len(offs)-2]) }, "padding"},
		{"padding of the last record", func(b []byte) int64 { return damagePadding(t, b, []int64{lastRec}) }, "padding"},
		{"reserved header byte", func(b []byte) int64 { b[offs[2]+6] = 1; resealHeader(b, offs[2]); return offs[2] }, "reserved"},
		{"unknown type", func(b []byte) int64 {
			b[offs[1]+4] = 7
			resealHeader(b, offs[1])
			resealData(b, offs[1])
			return offs[1]
		}, "unknown record type 7"},
		{"length over the limit, last record", func(b []byte) int64 {
			binary.LittleEndian.PutUint32(b[lastRec:], maxPayload+1)
			resealHeader(b, lastRec)
			return lastRec
		}, "over the"},
		{"file magic", func(b []byte) int64 { b[0] = 'X'; return 0 }, "bad magic"},
		{"file header checksum", func(b []byte) int64 { b[13] ^= 1; return 0 }, "file header checksum"},
		{"file version", func(b []byte) int64 {
			binary.LittleEndian.PutUint32(b[8:], 2)
			binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
			return 0
		}, "unsupported journal version 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(file)
			off := c.damage(b)
			expectCorrupt(t, b, off, c.reason)
		})
	}
}

// damagePadding sets a padding byte of the first of the records that has
// padding, and returns its offset.
func damagePadding(t *testing.T, b []byte, offs []int64) int64 {
	for _, off := range offs {
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		end := off + recordHeaderSize + n + recordCRCSize
		if end%recordAlign != 0 {
			b[end] = 0x01
			return off
		}
	}
	t.Fatal("no record with padding")
	return 0
}

func TestJournalReportsInvalidRecordContents(t *testing.T) {
	a, b := testIntent(1), testIntent(2)
	intentA := frameRecord(t, recIntent, intentPayload(a))
	intentB := frameRecord(t, recIntent, intentPayload(b))
	at := func(records ...[]byte) int64 { return int64(len(fileOf(records...))) }

	otherKey := a
	otherKey.Key = "another key"
	badVersion := intentPayload(b)
	badVersion[0] = 2
	trailing := append(intentPayload(b), 0)
	emptyID := intentPayload(Operation{ID: "", Key: "k"})
	completeB := completionPayload(testOutcome(b, 200, "x"))
	badState := completionPayload(testOutcome(a, 200, "x"))
	badState[1+1+len(a.ID)] = byte(Pending) // version, ID length, ID, then the state
	truncatedWithBody := completionPayload(testOutcome(a, 200, "x"))
	truncatedWithBody[1+1+len(a.ID)+1] = flagBodyTruncated
	unknownFlags := completionPayload(testOutcome(a, 200, "x"))
	unknownFlags[1+1+len(a.ID)+1] = 1 << 3
	summaryWithHeader := completionPayload(testOutcome(a, 200, ""))
	summaryWithHeader[1+1+len(a.ID)+1] = flagSummarized
	bigStatus := completionPayload(testOutcome(a, 999, "x"))
	bigStatus = bytes.Replace(bigStatus, binary.AppendUvarint(nil, 999), binary.AppendUvarint(nil, 1000), 1)

	cases := []struct {
		name    string
		records [][]byte
		reason  string
	}{
		{"intent for a present ID with another key", [][]byte{intentA, frameRecord(t, recIntent, intentPayload(otherKey)), intentB}, "second intent"},
		{"completion for an unknown ID", [][]byte{intentA, frameRecord(t, recCompletion, completeB), intentB}, "no intent"},
		{"intent encoding version", [][]byte{intentA, frameRecord(t, recIntent, badVersion), intentB}, "unsupported intent encoding 2"},
		{"trailing payload bytes", [][]byte{intentA, frameRecord(t, recIntent, trailing)}, "trailing"},
		{"empty payload", [][]byte{intentA, frameRecord(t, recIntent, nil)}, "payload ends early"},
		{"empty ID", [][]byte{intentA, frameRecord(t, recIntent, emptyID)}, "empty operation ID"},
		{"completion state", [][]byte{intentA, frameRecord(t, recCompletion, badState)}, "invalid state"},
		{"truncated body kept", [][]byte{intentA, frameRecord(t, recCompletion, truncatedWithBody)}, "marked truncated"},
		{"unknown flags", [][]byte{intentA, frameRecord(t, recCompletion, unknownFlags)}, "unknown flags"},
		{"summary with a header", [][]byte{intentA, frameRecord(t, recCompletion, summaryWithHeader)}, "a summary keeps"},
		{"status over 999", [][]byte{intentA, frameRecord(t, recCompletion, bigStatus)}, "status 1000"},
		{"truncated varint", [][]byte{intentA, frameRecord(t, recIntent, []byte{1, 0x80})}, "bad varint"},
		{"over-long ID", [][]byte{intentA, frameRecord(t, recIntent, binary.AppendUvarint([]byte{1}, maxIDLen+1))}, "too long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectCorrupt(t, fileOf(c.records...), at(c.records[0]), c.reason)
		})
	}
	t.Run("repeated identical intent", func(t *testing.T) {
		path := journalPath(t)
		writeFile(t, path, fileOf(intentA, intentA, intentB))
		j := openTestJournal(t, path, quietOptions())
		sameOperations(t, "Operations", list(j, ListAll), []Operation{b, a})
	})
}

func TestJournalReportsAShortFileHeader(t *testing.T) {
	for n := 1; n < fileHeaderSize; n++ {
		expectCorrupt(t, appendFileHeader(nil)[:n], 0, "file header is")
	}
}

// --- J4, locking ----------------------------------------------------------

func TestJournalSecondOpenerIsLockedOut(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))

	if _, err := OpenJournalWithOptions(path, quietOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open in this process: err = %v, want ErrLocked", err)
	}
	if err := lockHelper(t, path); !strings.Contains(err, "ErrLocked") {
		t.Fatalf("open from another process: %s, want ErrLocked", err)
	}
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if _, err := OpenJournalWithOptions(path, quietOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open after compaction: err = %v, want ErrLocked", err)
	}
	if err := lockHelper(t, path); !strings.Contains(err, "ErrLocked") {
		t.Fatalf("open from another process after compaction: %s, want ErrLocked", err)
	}
	mustClose(t, j)
	if err := lockHelper(t, path); err != "opened" {
		t.Fatalf("open from another process after Close: %s, want opened", err)
	}
	j2 := openTestJournal(t, path, quietOptions())
	if _, ok := lookup(j2, testIntent(1).ID); !ok {
		t.Fatal("reopened journal lost its operation")
	}
}

// lockHelper opens the journal at path in a child process and returns what
// it reported: "opened", "ErrLocked" or an error text.
func lockHelper(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEM_JOURNAL_LOCK_HELPER="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lock helper process: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "lock-helper: "); ok {
			return v
		}
	}
	t.Fatalf("lock helper process said nothing:\n%s", out)
	return ""
}

// TestJournalLockHelperProcess is the child of lockHelper; it does nothing
// in a normal run.
func TestJournalLockHelperProcess(t *testing.T) {
	path := os.Getenv("IDEM_JOURNAL_LOCK_HELPER")
	if path == "" {
		t.Skip("runs only as the child of lockHelper")
	}
	j, err := OpenJournalWithOptions(path, quietOptions())
	switch {
	case errors.Is(err, ErrLocked):
		fmt.Println("lock-helper: ErrLocked")
	case err != nil:
		fmt.Println("lock-helper: " + err.Error())
	default:
		j.Close()
		fmt.Println("lock-helper: opened")
	}
}

// --- J4, read-only --------------------------------------------------------

func TestJournalReadOnlyReadsWhileAWriterHoldsTheLock(t *testing.T) {
	path := journalPath(t)
	w := openTestJournal(t, path, quietOptions())
	mustBegin(t, w, testIntent(1))
	mustBegin(t, w, testIntent(2))
	mustComplete(t, w, testOutcome(testIntent(1), 200, "ok"))
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	o := quietOptions()
	o.ReadOnly = true
	r := openTestJournal(t, path, o)
	sameOperations(t, "read-only view", list(r, ListAll), list(w, ListAll))

	for name, err := range map[string]error{
		"Begin":    r.Begin(testIntent(3)),
		"Complete": r.Complete(testOutcome(testIntent(2), 200, "")),
		"Compact":  r.Compact(),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only %s: err = %v, want ErrReadOnly", name, err)
		}
	}
	if err := r.Sync(); err != nil {
		t.Errorf("read-only Sync: %v, want nil", err)
	}
	mustClose(t, r)
	// The writer still holds its lock and works.
	mustBegin(t, w, testIntent(3))
}

func TestJournalReadOnlyIgnoresATornTailWithoutWriting(t *testing.T) {
	c := tornTailCases(t)[1]
	path := journalPath(t)
	torn := c.file[:len(c.file)-3]
	writeFile(t, path, torn)
	o := quietOptions()
	o.ReadOnly = true
	r := openTestJournal(t, path, o)
	sameOperations(t, "read-only view", list(r, ListAll), c.before)
	if st := r.Stats(); st.Truncated != int64(len(torn))-c.last || st.Syncs != 0 {
		t.Fatalf("stats = %+v; want %d truncated bytes and no fsync", st, int64(len(torn))-c.last)
	}
	if got := readFile(t, path); !bytes.Equal(got, torn) {
		t.Fatal("read-only open changed the file")
	}
	if _, err := os.Stat(path + lockSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open created a lock file: %v", err)
	}
}

// A read-only open may race its writer cutting a torn tail: the file then
// ends before the size it had when opened, and is read again as it is.
func TestJournalReadOnlyRereadsAFileCutWhileItIsRead(t *testing.T) {
	c := tornTailCases(t)[1]
	path := journalPath(t)
	torn := c.file[:len(c.file)-3]
	writeFile(t, path, torn)
	o := quietOptions()
	o.ReadOnly = true
	opens := 0
	o.WrapFile = func(f File) File {
		opens++
		if opens == 1 {
			return &cutOnFirstRead{File: f, path: path, size: c.last}
		}
		return f
	}
	r := openTestJournal(t, path, o)
	sameOperations(t, "read-only view", list(r, ListAll), c.before)
	if st := r.Stats(); opens != 2 || st.Truncated != 0 {
		t.Fatalf("%d opens, %d torn bytes ignored; want 2 opens and the second seeing the cut file", opens, st.Truncated)
	}
}

// cutOnFirstRead truncates the file at path to size before its first read,
// as a writer cutting a torn tail would.
type cutOnFirstRead struct {
	File
	path string
	size int64
	done bool
}

func (f *cutOnFirstRead) ReadAt(p []byte, off int64) (int, error) {
	if !f.done {
		f.done = true
		if err := os.Truncate(f.path, f.size); err != nil {
			return 0, err
		}
	}
	return f.File.ReadAt(p, off)
}

func TestJournalReadOnlyNeedsAnExistingFile(t *testing.T) {
	o := quietOptions()
	o.ReadOnly = true
	path := journalPath(t)
	if _, err := OpenJournalWithOptions(path, o); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing journal: err = %v, want a not-exist error", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("read-only open created the journal")
	}
}

// --- J5, group commit -----------------------------------------------------

func TestJournalConcurrentBeginsShareFsyncs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const appenders = 64
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))

	// The first fsync blocks until every appender has written its record,
	// so they cannot each have their own: every one of them arrives while
	// an fsync runs.
	var written, syncCalls atomic.Int32
	allWritten := make(chan struct{})
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{
			File: f,
			write: func(f File, p []byte) (int, error) {
				n, err := f.Write(p)
				if written.Add(1) == appenders {
					close(allWritten)
				}
				return n, err
			},
			sync: func(f File) error {
				if syncCalls.Add(1) == 1 {
					<-allWritten
				}
				return f.Sync()
			},
		}
	}
	j := openTestJournal(t, path, o)
	start := make(chan struct{})
	errs := make(chan error, appenders)
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			<-start
			errs <- j.Begin(testIntent(i))
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
	}
	// One fsync for the first record, one shared by the other 63.
	if st := j.Stats(); st.Syncs != 2 || st.Appends != appenders {
		t.Fatalf("stats = %+v; want 2 fsyncs for %d appends", st, appenders)
	}
	mustClose(t, j)
	if n := len(list(openTestJournal(t, path, quietOptions()), ListAll)); n != appenders {
		t.Fatalf("reopened journal holds %d operations, want %d", n, appenders)
	}
}

func TestJournalBeginWaitsForFsyncAndCompleteDoesNot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	inSync := make(chan struct{}, 1)
	release := make(chan struct{})
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			inSync <- struct{}{}
			<-release
			return f.Sync()
		}}
	}
	j := openTestJournal(t, path, o)
	began := make(chan error, 1)
	go func() { began <- j.Begin(testIntent(1)) }()
	select {
	case <-inSync:
	case err := <-began:
		t.Fatalf("Begin returned (%v) without an fsync", err)
	}
	select {
	case err := <-began:
		t.Fatalf("Begin returned (%v) while its fsync was still running", err)
	default:
	}
	close(release)
	if err := <-began; err != nil {
		t.Fatal(err)
	}

	// Complete writes and returns without an fsync.
	before := j.Stats().Syncs
	mustComplete(t, j, testOutcome(testIntent(1), 200, "ok"))
	if st := j.Stats(); st.Syncs != before || st.Appends != 2 {
		t.Fatalf("Complete: stats = %+v; want no new fsync and 2 appends", st)
	}
	// Close makes it durable with one more fsync.
	mustClose(t, j)
	if st := j.Stats(); st.Syncs != before+1 {
		t.Fatalf("Close: %d fsyncs, want %d", st.Syncs, before+1)
	}
}

func TestJournalSerialBeginsEachPayOneFsync(t *testing.T) {
	j := openTestJournal(t, journalPath(t), quietOptions())
	base := j.Stats().Syncs
	for i := range 3 {
		mustBegin(t, j, testIntent(i))
	}
	if got := j.Stats().Syncs - base; got != 3 {
		t.Fatalf("3 serial Begins made %d fsyncs, want 3", got)
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := j.Stats().Syncs - base; got != 3 {
		t.Fatalf("Sync with nothing new made an fsync (%d in all)", got)
	}
}

// --- J6, latched failures -------------------------------------------------

func TestJournalFsyncFailureLatches(t *testing.T) {
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	var syncCalls atomic.Int32
	failing := false
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, sync: func(f File) error {
			if !failing {
				return f.Sync()
			}
			syncCalls.Add(1)
			return errInjected
		}}
	}
	j, err := OpenJournalWithOptions(path, o)
	if err != nil {
		t.Fatal(err)
	}
	mustBegin(t, j, testIntent(0))
	failing = true
	if err := j.Begin(testIntent(1)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin with a failing fsync: err = %v, want the injected error", err)
	}
	// The failed intent may never reach the disk: it must not be found as
	// pending, or it would be sent. The one synced before stays.
	if op, ok := lookup(j, testIntent(1).ID); ok {
		t.Fatalf("Lookup finds the operation whose intent fsync failed: %+v", op)
	}
	sameOperations(t, "after the failure", list(j, ListAll), []Operation{testIntent(0)})
	for name, err := range map[string]error{
		"Begin":    j.Begin(testIntent(2)),
		"Complete": j.Complete(testOutcome(testIntent(1), 200, "")),
		"Sync":     j.Sync(),
		"Compact":  j.Compact(),
	} {
		if !errors.Is(err, errInjected) {
			t.Errorf("%s after the failure: err = %v, want the injected error", name, err)
		}
	}
	if err := j.Close(); !errors.Is(err, errInjected) {
		t.Errorf("Close after the failure: err = %v, want the injected error", err)
	}
	if n := syncCalls.Load(); n != 1 {
		t.Fatalf("fsync was called %d times on the failed file, want exactly 1", n)
	}
	if st := j.Stats(); st.Appends != 2 {
		t.Fatalf("appends: %d, want the two before the failure", st.Appends)
	}
	// Close released the lock; the file is readable.
	j2 := openTestJournal(t, path, quietOptions())
	mustBegin(t, j2, testIntent(3))
}

func TestJournalFsyncFailureForgetsEveryIntentItCovered(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const appenders = 8
	path := journalPath(t)
	mustClose(t, openTestJournal(t, path, quietOptions()))
	// The first fsync waits for every appender's record, then fails: one
	// of them led it, the others were waiting for it or for the next.
	var written atomic.Int32
	allWritten := make(chan struct{})
	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{
			File: f,
			write: func(f File, p []byte) (int, error) {
				n, err := f.Write(p)
				if written.Add(1) == appenders {
					close(allWritten)
				}
				return n, err
			},
			sync: func(File) error {
				<-allWritten
				return errInjected
			},
		}
	}
	j := openTestJournal(t, path, o)
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			if err := j.Begin(testIntent(i)); !errors.Is(err, errInjected) {
				t.Errorf("Begin(%d): err = %v, want the injected error", i, err)
			}
		})
	}
	wg.Wait()
	if ops := list(j, ListAll); len(ops) != 0 {
		t.Fatalf("operations whose intent fsync failed are in the index: %+v", ops)
	}
	if st := j.Stats(); st.Syncs != 1 {
		t.Fatalf("%d fsyncs, want the one that failed", st.Syncs)
	}
}

func TestJournalShortWriteLatchesAndLeavesATornTail(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	good := int64(len(readFile(t, path)))

	o := quietOptions()
	o.WrapFile = func(f File) File {
		return &hookFile{File: f, write: func(f File, p []byte) (int, error) {
			n, _ := f.Write(p[:len(p)/2])
			return n, errInjected
		}}
	}
	j, err := OpenJournalWithOptions(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Begin(testIntent(2)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin with a short write: err = %v, want the injected error", err)
	}
	if _, ok := lookup(j, testIntent(2).ID); ok {
		t.Fatal("an operation whose intent was not written is in the index")
	}
	if err := j.Complete(testOutcome(testIntent(1), 200, "")); !errors.Is(err, errInjected) {
		t.Fatalf("Complete after a short write: err = %v, want the injected error", err)
	}
	j.Close()

	// The half record is a torn tail: cut, and appends after it reopen.
	j2 := openTestJournal(t, path, quietOptions())
	if st := j2.Stats(); st.FileSize != good || st.Truncated == 0 {
		t.Fatalf("stats after reopen = %+v; want the half record (from %d) cut", st, good)
	}
	mustBegin(t, j2, testIntent(3))
	mustClose(t, j2)
	sameOperations(t, "after reopen", list(openTestJournal(t, path, quietOptions()), ListAll), []Operation{testIntent(3), testIntent(1)})
}

// --- J7, compaction -------------------------------------------------------

// compactionFixture fills a journal at path with one operation of each
// kind and returns what compaction at testNow keeps with KeyTTL 24h, in
// Operations order: the live set whole, and summaries of the operations
// completed KeyTTL ago or more.
func compactionFixture(t *testing.T, j *FileJournal) (kept []Operation) {
	summaries, live := compactionSets(t, j)
	return append(summaries, live...)
}

// compactionSets fills the journal as compactionFixture does and returns
// the summaries compaction keeps and the live set it keeps whole.
func compactionSets(t *testing.T, j *FileJournal) (summaries, live []Operation) {
	fresh := testIntent(10)
	expired := testIntent(30 * 3600) // created 30h ago, never completed
	recent := testIntent(20)
	old := testIntent(40 * 3600)
	oldRejected := testIntent(50 * 3600)
	for _, op := range []Operation{fresh, expired, recent, old, oldRejected} {
		mustBegin(t, j, op)
	}
	recent = testOutcome(recent, 200, "recent")
	recent.Completed = testNow.Add(-time.Hour)
	mustComplete(t, j, recent)
	old = testOutcome(old, 200, "old")
	old.Completed = testNow.Add(-DefaultKeyTTL) // exactly KeyTTL ago: dropped
	mustComplete(t, j, old)
	oldRejected.State, oldRejected.Completed, oldRejected.Status = Rejected, testNow.Add(-25*time.Hour), 400
	mustComplete(t, j, oldRejected)
	// A summary keeps all but the response header and body, marked as
	// dropped, so that reading the body says why it is missing. The
	// rejection recorded neither, so its summary is the outcome unchanged.
	old.Header, old.Body, old.BodyTruncated, old.HeaderTruncated, old.Summarized = nil, nil, true, true, true
	return []Operation{oldRejected, old}, []Operation{expired, recent, fresh}
}

func TestJournalCompactKeepsExactlyTheLiveSet(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	live := compactionFixture(t, j)
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	sameOperations(t, "after Compact", list(j, ListAll), live)
	st := j.Stats()
	size := int64(len(readFile(t, path)))
	if st.Compactions != 1 || st.Records != 8 || st.FileSize != size || st.LiveBytes != size-fileHeaderSize || st.Live != 5 {
		t.Fatalf("stats after Compact = %+v (file is %d bytes)", st, size)
	}
	// Appends continue in the new file.
	mustBegin(t, j, testIntent(5))
	mustClose(t, j)
	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "after reopen", list(j2, ListAll), append(live, testIntent(5)))
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left after compaction: %v", err)
	}
}

func TestJournalCompactsOnItsOwnWhenGarbageOutweighsLiveData(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.CompactMinSize = 4096
	o.ForgetAfter = 36 * time.Hour // forget, rather than summarize, what this test makes garbage
	j := openTestJournal(t, path, o)
	keep := testIntent(1)
	mustBegin(t, j, keep)
	// Operations completed two days ago are garbage as soon as written.
	// Stop at the first append that compacted, and know what it kept.
	var want []Operation
	for i := 2; want == nil; i++ {
		op := testIntent(i)
		mustBegin(t, j, op)
		if j.Stats().Compactions == 1 {
			want = []Operation{op, keep} // the new intent is pending
			break
		}
		op = testOutcome(op, 200, strings.Repeat("z", 100))
		op.Completed = testNow.Add(-48 * time.Hour)
		mustComplete(t, j, op)
		if j.Stats().Compactions == 1 {
			want = []Operation{keep}
		}
		if i > 1000 {
			t.Fatal("no automatic compaction after 1000 operations")
		}
	}
	sameOperations(t, "after automatic compaction", list(j, ListAll), want)
	if st := j.Stats(); st.FileSize >= o.CompactMinSize || st.Records != int64(len(want)) {
		t.Fatalf("after automatic compaction: stats = %+v", st)
	}
	mustClose(t, j)
	sameOperations(t, "after reopen", list(openTestJournal(t, path, o), ListAll), want)
}

func TestJournalAutomaticCompactionRespectsItsMinimumAndSwitch(t *testing.T) {
	for _, minSize := range []int64{-1, 1 << 30} {
		o := quietOptions()
		o.CompactMinSize = minSize
		j := openTestJournal(t, journalPath(t), o)
		for i := range 50 {
			op := testIntent(i)
			mustBegin(t, j, op)
			op = testOutcome(op, 200, "x")
			op.Completed = testNow.Add(-48 * time.Hour)
			mustComplete(t, j, op)
		}
		if st := j.Stats(); st.Compactions != 0 || st.Operations != 50 {
			t.Fatalf("CompactMinSize %d: stats = %+v; want no compaction", minSize, st)
		}
	}
}

func TestJournalSurvivesACrashAroundTheCompactionRename(t *testing.T) {
	path := journalPath(t)
	var snapshot []byte // the compaction file as a crash before its rename leaves it
	crash := false      // creating the journal goes through the same steps
	o := quietOptions()
	o.WrapFile = func(f File) File {
		if fileName(f) != filepath.Base(path)+compactSuffix {
			return f
		}
		return &hookFile{File: f, close: func(f File) error {
			// Closing comes after the fsync and before the rename.
			b, err := contents(f)
			if err != nil {
				t.Error(err)
			}
			snapshot = b
			f.Close()
			if crash {
				return errInjected
			}
			return nil
		}}
	}
	j := openTestJournal(t, path, o)
	live := compactionFixture(t, j)
	all := list(j, ListAll)
	journalBefore := readFile(t, path)

	crash = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failure before the rename: err = %v, want the injected error", err)
	}
	// The journal is untouched and still in use.
	if !bytes.Equal(readFile(t, path), journalBefore) {
		t.Fatal("a compaction that failed before its rename changed the journal")
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed compaction left its file: %v", err)
	}
	sameOperations(t, "after the failed compaction", list(j, ListAll), all)
	mustBegin(t, j, testIntent(7))
	all = list(j, ListAll)
	mustClose(t, j)

	// Crash before the rename: the compaction file is there beside the
	// intact journal. Opening removes it and keeps every operation.
	writeFile(t, path+compactSuffix, snapshot)
	j2 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "crash before rename", list(j2, ListAll), all)
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open left the compaction file: %v", err)
	}
	mustClose(t, j2)

	// Crash after the rename: the compaction file is the journal.
	writeFile(t, path, snapshot)
	j3 := openTestJournal(t, path, quietOptions())
	sameOperations(t, "crash after rename", list(j3, ListAll), live)
}

func TestJournalDirectoryFsyncFailureAfterRenameLatches(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	fail := false
	o.syncDir = func(dir string) error {
		if fail {
			return errInjected
		}
		return syncDir(dir)
	}
	j := openTestJournal(t, path, o)
	live := compactionFixture(t, j)
	fail = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failing directory fsync: err = %v, want the injected error", err)
	}
	if err := j.Begin(testIntent(8)); !errors.Is(err, errInjected) {
		t.Fatalf("Begin after the failure: err = %v, want the injected error", err)
	}
	j.Close()
	sameOperations(t, "reopened", list(openTestJournal(t, path, quietOptions()), ListAll), live)
}

func TestJournalFailedRenameLeavesTheJournalInUse(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	fail := false
	o.rename = func(from, to string) error {
		if fail {
			return errInjected
		}
		return os.Rename(from, to)
	}
	j := openTestJournal(t, path, o)
	compactionFixture(t, j)
	all := list(j, ListAll)
	before := readFile(t, path)
	fail = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact with a failing rename: err = %v, want the injected error", err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("a failed rename changed the journal")
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed rename left the compaction file: %v", err)
	}
	mustBegin(t, j, testIntent(6))
	mustClose(t, j)
	sameOperations(t, "reopened", list(openTestJournal(t, path, quietOptions()), ListAll), append(all[:len(all):len(all)], testIntent(6)))
}

func TestJournalCompactionTempFsyncFailureDoesNotLatch(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	failTemp := false
	o.WrapFile = func(f File) File {
		if fileName(f) != filepath.Base(path)+compactSuffix {
			return f
		}
		return &hookFile{File: f, sync: func(f File) error {
			if failTemp {
				return errInjected
			}
			return f.Sync()
		}}
	}
	j := openTestJournal(t, path, o)
	compactionFixture(t, j)
	failTemp = true
	if err := j.Compact(); !errors.Is(err, errInjected) {
		t.Fatalf("Compact: err = %v, want the injected error", err)
	}
	mustBegin(t, j, testIntent(9))
	failTemp = false
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact after a failed one: %v", err)
	}
	mustClose(t, j)
	if n := len(list(openTestJournal(t, path, quietOptions()), ListAll)); n != 6 {
		t.Fatalf("after compaction: %d operations, want 6 (3 live, 2 summaries, 1 new)", n)
	}
}

// ForgetAfter bounds how long completed operations are remembered: past
// it, compaction drops them, summaries included.
func TestJournalForgetAfterDropsOldCompletedOperations(t *testing.T) {
	path := journalPath(t)
	o := quietOptions()
	o.ForgetAfter = 25 * time.Hour
	j := openTestJournal(t, path, o)
	summaries, live := compactionSets(t, j)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	// The rejection completed 25h ago is forgotten; the one 24h ago is
	// summarized.
	want := append([]Operation{summaries[1]}, live...)
	sameOperations(t, "after Compact", list(j, ListAll), want)
	mustClose(t, j)
	sameOperations(t, "after reopen", list(openTestJournal(t, path, o), ListAll), want)
}

// A summary is compacted once: compacting again keeps it as it is.
func TestJournalSummariesAreStable(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	kept := compactionFixture(t, j)
	for i := range 3 {
		if err := j.Compact(); err != nil {
			t.Fatal(err)
		}
		sameOperations(t, fmt.Sprint("after compaction ", i+1), list(j, ListAll), kept)
	}
	if st := j.Stats(); st.LiveBytes != st.FileSize-fileHeaderSize {
		t.Fatalf("stats = %+v: live bytes should be the whole file", st)
	}
}

// --- Close ----------------------------------------------------------------

func TestJournalCloseIsIdempotentAndRefusesLaterCalls(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Begin":    j.Begin(testIntent(2)),
		"Complete": j.Complete(testOutcome(testIntent(1), 200, "")),
		"Sync":     j.Sync(),
		"Compact":  j.Compact(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	if _, ok := lookup(j, testIntent(1).ID); !ok {
		t.Error("Lookup after Close lost the index")
	}
	// The lock is released.
	mustClose(t, openTestJournal(t, path, quietOptions()))
}

func TestJournalCloseWaitsForConcurrentBegins(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	const n = 16
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range n {
		wg.Go(func() {
			err := j.Begin(testIntent(i))
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, ErrClosed):
				t.Errorf("Begin racing Close: %v", err)
			}
		})
	}
	mustClose(t, j)
	wg.Wait()
	// Every Begin that succeeded is in the file.
	if got := len(list(openTestJournal(t, path, quietOptions()), ListAll)); got != int(ok.Load()) {
		t.Fatalf("reopened journal holds %d operations, %d Begins succeeded", got, ok.Load())
	}
}

// --- memory journal -------------------------------------------------------

func TestMemoryJournalKeepsTheIndexWithoutAFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	j := newMemoryJournalWithOptions(quietOptions())
	op := testIntent(1)
	mustBegin(t, j, op)
	if err := j.Begin(op); !errors.Is(err, ErrOperationExists) {
		t.Fatalf("second Begin: err = %v, want ErrOperationExists", err)
	}
	if err := j.Begin(Operation{Key: "k"}); !errors.Is(err, ErrInvalidOperation) {
		t.Fatalf("Begin without ID: err = %v, want ErrInvalidOperation", err)
	}
	done := testOutcome(op, 200, "ok")
	mustComplete(t, j, done)
	sameOperations(t, "Completed", list(j, ListCompleted), []Operation{done})
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Syncs != 0 || st.Appends != 2 || j.Path() != "" {
		t.Fatalf("stats = %+v, path %q", st, j.Path())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("memory journal wrote files: %v", entries)
	}
	mustClose(t, j)
	if err := j.Begin(testIntent(2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Begin after Close: err = %v, want ErrClosed", err)
	}
}

func TestMemoryJournalCompactsItsIndex(t *testing.T) {
	o := quietOptions()
	o.CompactMinSize = 2048
	j := newMemoryJournalWithOptions(o)
	mustBegin(t, j, testIntent(0))
	for i := 1; i < 100; i++ {
		op := testIntent(i)
		mustBegin(t, j, op)
		op = testOutcome(op, 200, "x")
		op.Completed = testNow.Add(-48 * time.Hour)
		mustComplete(t, j, op)
	}
	st := j.Stats()
	if st.Compactions == 0 || st.Operations >= 100 {
		t.Fatalf("stats = %+v; want automatic compaction to have dropped old outcomes", st)
	}
	if _, ok := lookup(j, testIntent(0).ID); !ok {
		t.Fatal("compaction dropped a pending operation")
	}
	if err := newMemoryJournal().Compact(); err != nil {
		t.Fatal(err)
	}
}
