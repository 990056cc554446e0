package fileengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
	"time"
)

// --- J2, torn tail --------------------------------------------------------

// tornTailCase is a journal whose last record a crash may have torn.
type tornTailCase struct {
	name   string
	file   []byte   // the whole journal
	last   int64    // offset of its last record
	before []Record // what the journal holds without the last record
}

// tornTailCases builds journals ending in an intent, a small completion
// and a large completion.
func tornTailCases(t *testing.T) []tornTailCase {
	var cases []tornTailCase
	for _, c := range []struct {
		name string
		last func(t *testing.T, j *Journal) // appends the last record
	}{
		{"intent", func(t *testing.T, j *Journal) { mustBegin(t, j, testIntent(9)) }},
		{"completion", func(t *testing.T, j *Journal) {
			mustComplete(t, j, testOutcome(testIntent(2), 200, "ok"))
		}},
		{"large completion", func(t *testing.T, j *Journal) {
			mustComplete(t, j, testOutcome(testIntent(2), 200, strings.Repeat("b", 400)))
		}},
	} {
		path := journalPath(t)
		j := openTestJournal(t, path, quietOptions())
		for i := 1; i <= 3; i++ {
			mustBegin(t, j, testIntent(i))
		}
		mustComplete(t, j, testOutcome(testIntent(1), 201, `{"id":1}`))
		before := records(j)
		last := j.Stats().FileSize
		c.last(t, j)
		mustClose(t, j)
		cases = append(cases, tornTailCase{c.name, readFile(t, path), last, before})
	}
	return cases
}

// Clauses: J2.1, J2.2, J2.4.
func TestJournalTruncatesATornTailAtEveryOffset(t *testing.T) {
	if testing.Short() {
		t.Skip("tears the journal at every offset of its last record; -short skips the exhaustive runs")
	}
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
func checkTornTailRecovers(t *testing.T, file []byte, good int64, before []Record, what string) {
	t.Helper()
	path := journalPath(t)
	writeFile(t, path, file)
	j, err := Open(path, quietOptions())
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	sameRecords(t, what+": after recovery", records(j), before)
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

	j2, err := Open(path, quietOptions())
	if err != nil {
		t.Fatalf("%s: reopen after append: %v", what, err)
	}
	defer j2.Close()
	if st := j2.Stats(); st.Truncated != 0 {
		t.Fatalf("%s: reopen after append truncated %d bytes", what, st.Truncated)
	}
	got, ok := lookup(t, j2, next.ID)
	if !ok || !reflect.DeepEqual(got, recordOf(next)) || len(records(j2)) != len(before)+1 {
		t.Fatalf("%s: reopen after append holds %+v", what, records(j2))
	}
}

// Clause: J2.1.
func TestJournalTruncatesATornRecordLargerThanTheReadBuffer(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	before := records(j)
	last := j.Stats().FileSize
	mustComplete(t, j, testOutcome(testIntent(1), 200, strings.Repeat("L", readChunk+readChunk/2)))
	mustClose(t, j)
	file := readFile(t, path)
	for _, cut := range []int64{last + 1, last + recordHeaderSize, last + int64(readChunk) - 1, last + int64(readChunk), last + int64(readChunk) + 1, int64(len(file)) - 1} {
		checkTornTailRecovers(t, file[:cut], last, before, fmt.Sprintf("cut at %d", cut))
	}
}

// Clause: J2.2.
func TestJournalTruncatesGarbageAfterTheLastRecord(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	good := readFile(t, path)
	// Bytes that are no record: a torn write of something never finished.
	torn := append(bytes.Clone(good), bytes.Repeat([]byte{0xA5, 0x5A, 0xFF}, 40)...)
	checkTornTailRecovers(t, torn, int64(len(good)), []Record{recordOf(testIntent(1))}, "garbage tail")
}

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
		j, err := Open(path, o)
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
			if j, err := Open(path, o); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("second open: err = %v, want ErrCorrupt again", err)
			} else if j != nil {
				j.Close()
			}
		}
	}
}

// Clauses: J1.1, J1.4, J1.7, J1.8, J3.1, J3.2, J3.3, J3.4.
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
			binary.LittleEndian.PutUint32(b[lastRec:], MaxPayload+1)
			resealHeader(b, lastRec)
			return lastRec
		}, "over the"},
		{"file magic", func(b []byte) int64 { b[0] = 'X'; return 0 }, ReasonNotJournal},
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

// Clauses: J1.8, J3.1, J3.2.
func TestJournalReportsInvalidRecordContents(t *testing.T) {
	a, b := testIntent(1), testIntent(2)
	intentA := frameRecord(t, recIntent, intentPayload(a))
	intentB := frameRecord(t, recIntent, intentPayload(b))
	at := func(records ...[]byte) int64 { return int64(len(fileOf(records...))) }

	otherKey := a
	otherKey.Key = "another key"
	badVersion := intentPayload(b)
	badVersion[0] = 3
	otherTTL := a
	otherTTL.KeyTTL = time.Hour
	zeroTTL := intentPayload(b)
	zeroTTL = append(zeroTTL[:len(zeroTTL)-len(binary.AppendUvarint(nil, uint64(DefaultKeyTTL)))], 0)
	trailing := append(intentPayload(b), 0)
	emptyID := intentPayload(Intent{ID: "", Key: "k", KeyTTL: DefaultKeyTTL})
	completeB := completionPayload(testOutcome(b, 200, "x"))
	badState := completionPayload(testOutcome(a, 200, "x"))
	badState[1+1+len(a.ID)] = byte(Pending) // version, ID length, ID, then the state
	truncatedWithBody := completionPayload(testOutcome(a, 200, "x"))
	truncatedWithBody[1+1+len(a.ID)+1] = FlagBodyTruncated
	unknownFlags := completionPayload(testOutcome(a, 200, "x"))
	unknownFlags[1+1+len(a.ID)+1] = 1 << 3
	summaryWithHeader := completionPayload(testOutcome(a, 200, ""))
	summaryWithHeader[1+1+len(a.ID)+1] = FlagSummarized
	bigStatus := completionPayload(testOutcome(a, 999, "x"))
	bigStatus = bytes.Replace(bigStatus, binary.AppendUvarint(nil, 999), binary.AppendUvarint(nil, 1000), 1)

	cases := []struct {
		name    string
		records [][]byte
		reason  string
	}{
		{"intent for a present ID with another key", [][]byte{intentA, frameRecord(t, recIntent, intentPayload(otherKey)), intentB}, "second intent"},
		{"completion for an unknown ID", [][]byte{intentA, frameRecord(t, recCompletion, completeB), intentB}, "no intent"},
		{"intent for a present ID with another key lifetime", [][]byte{intentA, frameRecord(t, recIntent, intentPayload(otherTTL)), intentB}, "second intent"},
		{"intent encoding version", [][]byte{intentA, frameRecord(t, recIntent, badVersion), intentB}, "unsupported intent encoding 3"},
		{"intent key lifetime zero", [][]byte{intentA, frameRecord(t, recIntent, zeroTTL)}, "key lifetime 0 ns is not positive"},
		{"trailing payload bytes", [][]byte{intentA, frameRecord(t, recIntent, trailing)}, "trailing"},
		{"empty payload", [][]byte{intentA, frameRecord(t, recIntent, nil)}, "payload ends early"},
		{"empty ID", [][]byte{intentA, frameRecord(t, recIntent, emptyID)}, "empty operation ID"},
		{"completion state", [][]byte{intentA, frameRecord(t, recCompletion, badState)}, "invalid state"},
		{"truncated body kept", [][]byte{intentA, frameRecord(t, recCompletion, truncatedWithBody)}, "marked truncated"},
		{"unknown flags", [][]byte{intentA, frameRecord(t, recCompletion, unknownFlags)}, "unknown flags"},
		{"summary with a header", [][]byte{intentA, frameRecord(t, recCompletion, summaryWithHeader)}, "a summary keeps"},
		{"status over 999", [][]byte{intentA, frameRecord(t, recCompletion, bigStatus)}, "status 1000"},
		{"truncated varint", [][]byte{intentA, frameRecord(t, recIntent, []byte{1, 0x80})}, "bad varint"},
		{"over-long ID", [][]byte{intentA, frameRecord(t, recIntent, binary.AppendUvarint([]byte{1}, MaxIDLen+1))}, "too long"},
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
		sameRecords(t, "records", records(j), []Record{recordOf(b), recordOf(a)})
	})
}

// Clause: J1.1.
func TestJournalReportsAShortFileHeader(t *testing.T) {
	for n := 1; n < fileHeaderSize; n++ {
		expectCorrupt(t, appendFileHeader(nil)[:n], 0, "file header is")
	}
}
