package fileengine

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
)

// withSmallReadAhead makes read-ahead chunks small, so that a small file
// crosses many, and records straddle them or outgrow them.
func withSmallReadAhead(t *testing.T) {
	chunk, room, first := readAheadChunk, readAheadRoom, readChunk
	readAheadChunk, readAheadRoom, readChunk = 4096, 1024, 3000
	t.Cleanup(func() { readAheadChunk, readAheadRoom, readChunk = chunk, room, first })
}

// readAheadJournal is a journal file of operations whose bodies range from
// empty to several read-ahead chunks.
func readAheadJournal(t *testing.T) []byte {
	buf := appendFileHeader(nil)
	for i := range 200 {
		r := recordOf(testIntent(i))
		var start int
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendIntent(buf, &r), start, recIntent)
		if i%3 == 0 {
			continue
		}
		size := (i * 37) % 700
		if i%50 == 1 {
			size = 3*4096 + i // longer than a chunk and its room
		}
		c := Completion{ID: r.ID, State: Done, Completed: testNow, Status: 201,
			Header: http.Header{"N": {strconv.Itoa(i)}}, Body: bytes.Repeat([]byte{byte(i)}, size)}
		o := newOutcome(c)
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendCompletion(buf, r.ID, Done, &o), start, recCompletion)
	}
	return buf
}

// recoverCounting is recoverBytes, counting the reads of a read-ahead
// chunk's size.
func recoverCounting(b []byte) (*Journal, []byte, int, error) {
	f := &countingFile{memFile: memFile{b: bytes.Clone(b)}}
	j := newJournal(quietOptions())
	j.path = "fuzz.journal"
	j.f = f
	err := j.recover(f, int64(len(f.b)))
	return j, f.b, int(f.chunks.Load()), err
}

type countingFile struct {
	memFile
	chunks atomic.Int64
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == readAheadChunk {
		f.chunks.Add(1)
	}
	return f.memFile.ReadAt(p, off)
}

// recoverBoth recovers b with read-ahead and without, and fails unless
// both end the same: the same records, the same bytes cut, the same error.
func recoverBoth(t *testing.T, what string, b []byte) {
	t.Helper()
	ahead, aheadAfter, chunks, aheadErr := recoverCounting(b)
	if chunks == 0 && len(b) > readChunk+readAheadChunk {
		t.Fatalf("%s: nothing was read ahead", what)
	}
	chunk := readAheadChunk
	readAheadChunk = math.MaxInt // never
	plain, plainAfter, plainErr := recoverBytes(b)
	readAheadChunk = chunk
	if (aheadErr == nil) != (plainErr == nil) || (aheadErr != nil && aheadErr.Error() != plainErr.Error()) {
		t.Fatalf("%s: with read-ahead err = %v, without %v", what, aheadErr, plainErr)
	}
	if !bytes.Equal(aheadAfter, plainAfter) {
		t.Fatalf("%s: with read-ahead the file is %d bytes after, without %d", what, len(aheadAfter), len(plainAfter))
	}
	if aheadErr == nil {
		if got, want := records(ahead), records(plain); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: with read-ahead %d records, without %d, or they differ", what, len(got), len(want))
		}
	}
	if ahead.idx.len() == 0 && aheadErr == nil && len(b) > 4096 {
		t.Fatalf("%s: nothing recovered", what)
	}
}

func TestRecoveryReadsAheadAsItReadsOnDemand(t *testing.T) {
	withSmallReadAhead(t)
	file := readAheadJournal(t)
	if len(file) < 20*4096 {
		t.Fatalf("test journal is %d bytes, want many read-ahead chunks", len(file))
	}
	recoverBoth(t, "whole", file)
	for _, cut := range []int{len(file) - 1, len(file) - 5000, len(file) / 2, 4096 + 3, 4096 * 7} {
		recoverBoth(t, "torn at "+strconv.Itoa(cut), file[:cut])
	}
	for _, at := range []int{4096 - 2, 4096 * 5, len(file) / 3, len(file) - 100} {
		damaged := bytes.Clone(file)
		damaged[at] ^= 0xff
		recoverBoth(t, "damaged at "+strconv.Itoa(at), damaged)
	}
}

func TestRecoveryReadAheadReportsAFailedRead(t *testing.T) {
	withSmallReadAhead(t)
	file := readAheadJournal(t)
	j := newJournal(quietOptions())
	j.path = "failing.journal"
	f := &failAfter{memFile: memFile{b: file}, at: int64(len(file) / 2)}
	err := j.recover(f, int64(len(file)))
	if !errors.Is(err, errInjected) {
		t.Fatalf("recovery over a failing read: err = %v, want the injected error", err)
	}
}

// failAfter is a file whose reads fail from offset at on.
type failAfter struct {
	memFile
	at int64
}

func (f *failAfter) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.at {
		return 0, errInjected
	}
	return f.memFile.ReadAt(p, off)
}
