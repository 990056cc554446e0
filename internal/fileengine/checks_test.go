package fileengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Every byte the frame checks and every field the read-back compares, one
// at a time: each case below changes one of them and nothing else (the
// checksums resealed where they cover it), so a check that skipped that
// one byte or field would let it through.

// padding is the number of padding bytes of the framed record b.
func padding(b []byte) int {
	return len(b) - recordHeaderSize - int(binary.LittleEndian.Uint32(b)) - recordCRCSize
}

// paddedIntent returns intent i with its URL lengthened until its record
// has exactly pad padding bytes.
func paddedIntent(t testing.TB, i, pad int) Intent {
	t.Helper()
	in := testIntent(i)
	base := in.URL
	for k := range recordAlign {
		in.URL = base + strings.Repeat("x", k)
		if padding(frameRecord(t, recIntent, intentPayload(in))) == pad {
			return in
		}
	}
	t.Fatalf("no URL gives an intent %d padding bytes", pad)
	return in
}

// paddedOutcome returns a completion of in whose record has exactly pad
// padding bytes.
func paddedOutcome(t testing.TB, in Intent, state State, pad int) Completion {
	t.Helper()
	c := testOutcome(in, 201, "")
	c.State = state
	for k := range recordAlign {
		c.Body = bytes.Repeat([]byte("b"), 10+k)
		if padding(frameRecord(t, recCompletion, completionPayload(c))) == pad {
			return c
		}
	}
	t.Fatalf("no body gives a completion %d padding bytes", pad)
	return c
}

// --- J1, the frame recovery checks -----------------------------------------

// J1.1: each byte of the file header's magic, version and checksum is
// checked, the checksum resealed over a changed magic or version byte.
func TestRecoveryChecksEveryFileHeaderByte(t *testing.T) {
	file := fileOf(frameRecord(t, recIntent, intentPayload(testIntent(1))))
	for i := range fileHeaderSize {
		b := bytes.Clone(file)
		b[i] ^= 0x20
		reason := "file header checksum mismatch"
		switch {
		case i < 8:
			reason = "not an idem journal"
		case i < 12:
			reason = "unsupported journal version"
		}
		if i < 12 {
			binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
		}
		t.Run(fmt.Sprint("byte ", i), func(t *testing.T) { expectCorrupt(t, b, 0, reason) })
	}
}

// J1.3, J3.3: each byte of a record header's own checksum is checked: a
// damaged one in the middle of the file is corruption.
func TestRecoveryChecksEveryRecordHeaderChecksumByte(t *testing.T) {
	first := frameRecord(t, recIntent, intentPayload(testIntent(1)))
	file := fileOf(first, frameRecord(t, recIntent, intentPayload(testIntent(2))))
	for i := 8; i < recordHeaderSize; i++ {
		b := bytes.Clone(file)
		b[fileHeaderSize+i] ^= 0x01
		t.Run(fmt.Sprint("byte ", i), func(t *testing.T) {
			expectCorrupt(t, b, fileHeaderSize, "record header checksum mismatch")
		})
	}
}

// J1.6: each of the three reserved bytes of a record header must be zero,
// in an intent and in a completion, in the middle of the file and at its
// end (where a record whose checksums hold is no torn write either).
// Clause: J3.4.
func TestRecoveryChecksEveryReservedByte(t *testing.T) {
	in := testIntent(1)
	other := frameRecord(t, recIntent, intentPayload(testIntent(2)))
	for _, rec := range []struct {
		name   string
		before [][]byte
		rec    []byte
	}{
		{"intent", nil, frameRecord(t, recIntent, intentPayload(in))},
		{"completion", [][]byte{frameRecord(t, recIntent, intentPayload(in))}, frameRecord(t, recCompletion, completionPayload(testOutcome(in, 200, "ok")))},
	} {
		for _, last := range []bool{false, true} {
			for i := 5; i < 8; i++ {
				t.Run(fmt.Sprintf("%s/last %v/byte %d", rec.name, last, i), func(t *testing.T) {
					r := reframe(rec.rec, func(b []byte) { b[i] = 1 })
					recs := append(append([][]byte{}, rec.before...), r)
					if !last {
						recs = append(recs, other)
					}
					expectCorrupt(t, fileOf(recs...), int64(len(fileOf(rec.before...))), "reserved record header bytes are not zero")
				})
			}
		}
	}
}

// J1.5: each padding byte of a record must be zero, the first and the
// seventh alike, in an intent and in a completion, in the middle of the
// file and at its end.
// Clause: J3.4.
func TestRecoveryChecksEveryPaddingByte(t *testing.T) {
	in := paddedIntent(t, 1, 7)
	intent := frameRecord(t, recIntent, intentPayload(in))
	other := frameRecord(t, recIntent, intentPayload(testIntent(2)))
	for _, rec := range []struct {
		name   string
		before [][]byte
		rec    []byte
	}{
		{"intent", nil, intent},
		{"done", [][]byte{intent}, frameRecord(t, recCompletion, completionPayload(paddedOutcome(t, in, Done, 7)))},
		{"rejected", [][]byte{intent}, frameRecord(t, recCompletion, completionPayload(paddedOutcome(t, in, Rejected, 7)))},
	} {
		if padding(rec.rec) != 7 {
			t.Fatalf("%s: %d padding bytes, want 7", rec.name, padding(rec.rec))
		}
		at := int64(len(fileOf(rec.before...)))
		for _, last := range []bool{false, true} {
			for k := range 7 {
				t.Run(fmt.Sprintf("%s/last %v/padding byte %d", rec.name, last, k), func(t *testing.T) {
					r := bytes.Clone(rec.rec)
					r[len(r)-7+k] = 0x80
					recs := append(append([][]byte{}, rec.before...), r)
					if !last {
						recs = append(recs, other)
					}
					expectCorrupt(t, fileOf(recs...), at, fmt.Sprintf("padding byte at offset %d is 0x80", at+int64(len(r)-7+k)))
				})
			}
		}
	}
}

// J1.4: the data checksum covers the type byte: a type changed with only
// the header resealed fails it (and, mid-file, is corruption).
func TestRecoveryDataChecksumCoversTheType(t *testing.T) {
	in := testIntent(1)
	c := frameRecord(t, recCompletion, completionPayload(testOutcome(in, 200, "ok")))
	c[4] = byte(recIntent)
	resealHeader(c, 0)
	file := fileOf(frameRecord(t, recIntent, intentPayload(in)), c, frameRecord(t, recIntent, intentPayload(testIntent(2))))
	expectCorrupt(t, file, int64(len(fileOf(frameRecord(t, recIntent, intentPayload(in))))), "record data checksum mismatch")
}

// --- J9, what is read back -------------------------------------------------

// readBackStage is a stage a journal is brought to before a test changes
// a record on disk under it: the index it reads from was built by the
// appends, by recovery or by compaction.
type readBackStage struct {
	name string
	// reach brings the journal at path, with its operations written, to
	// the stage, and returns the journal to read from.
	reach func(t *testing.T, path string, j *Journal) *Journal
}

// unsyncedOptions are quietOptions whose fsyncs do nothing: for tests
// that read what they wrote, never what a crash leaves.
func unsyncedOptions() Options {
	o := quietOptions()
	o.WrapFile = func(f File) File { return &hookFile{File: f, sync: func(File) error { return nil }} }
	o.syncDir = func(string) error { return nil }
	return o
}

var readBackStages = []readBackStage{
	{"as written", func(_ *testing.T, _ string, j *Journal) *Journal { return j }},
	{"after reopening", func(t *testing.T, path string, j *Journal) *Journal {
		mustClose(t, j)
		return openTestJournal(t, path, unsyncedOptions())
	}},
	{"after compaction", func(t *testing.T, _ string, j *Journal) *Journal {
		if err := j.Compact(); err != nil {
			t.Fatal(err)
		}
		return j
	}},
}

// readBackStates are the operations of a read-back journal: one pending,
// one done, one rejected.
func readBackStates(t *testing.T) (ins []Intent, outs []*Completion) {
	p, d, r := paddedIntent(t, 1, 7), paddedIntent(t, 2, 7), paddedIntent(t, 3, 7)
	done, rejected := paddedOutcome(t, d, Done, 7), paddedOutcome(t, r, Rejected, 7)
	rejected.Status = 409
	return []Intent{p, d, r}, []*Completion{nil, &done, &rejected}
}

// changeAt writes b over the file at path at off.
func changeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkReadBack runs change on the record of each operation of each state
// at each stage, and expects Lookup to report a *CorruptError at the
// record's offset whose reason contains reason. change returns the new
// record, or nil to skip the operation; completion says which record.
func checkReadBack(t *testing.T, completion bool, reason string, change func(t *testing.T, in Intent, c *Completion, rec []byte) []byte) {
	ins, outs := readBackStates(t)
	for _, st := range readBackStages {
		for i, in := range ins {
			if completion && outs[i] == nil {
				continue
			}
			state := "pending"
			if outs[i] != nil {
				state = stateName(outs[i].State)
			}
			t.Run(st.name+"/"+state, func(t *testing.T) {
				path := journalPath(t)
				j := openTestJournal(t, path, unsyncedOptions())
				for k := range ins {
					mustBegin(t, j, ins[k])
					if outs[k] != nil {
						mustComplete(t, j, *outs[k])
					}
				}
				j = st.reach(t, path, j)
				e, _ := j.idx.get(in.ID)
				off, size := e.intentAt, int64(e.intentSize)
				if completion {
					off, size = e.completionAt, int64(e.completionSize)
				}
				rec := readFile(t, path)[off : off+size]
				changed := change(t, in, outs[i], bytes.Clone(rec))
				if len(changed) != len(rec) || bytes.Equal(changed, rec) {
					t.Fatalf("the changed record is %d bytes (same: %v), want another of %d", len(changed), bytes.Equal(changed, rec), len(rec))
				}
				changeAt(t, path, off, changed)
				_, ok, err := j.Lookup(in.ID)
				var ce *CorruptError
				if !ok || !errors.As(err, &ce) || ce.Offset != off || !strings.Contains(ce.Reason, reason) {
					t.Fatalf("Lookup of the changed record = %v, %v; want a *CorruptError at %d saying %q", ok, err, off, reason)
				}
				// The other operations still read back.
				for k := range ins {
					if k == i {
						continue
					}
					want := recordOf(ins[k])
					if outs[k] != nil {
						want = recordOf(ins[k], *outs[k])
					}
					if got, _ := lookup(t, j, ins[k].ID); !reflect.DeepEqual(got, want) {
						t.Fatalf("Lookup(%s) = %+v, want %+v", ins[k].ID, got, want)
					}
				}
			})
		}
	}
}

// J9.4: the intent read back must name the operation the index holds.
func TestReadBackComparesTheIntentsOperationID(t *testing.T) {
	checkReadBack(t, false, "the intent there is operation", func(t *testing.T, in Intent, _ *Completion, _ []byte) []byte {
		r := recordOf(in)
		r.ID = strings.Replace(r.ID, "op-", "op+", 1)
		return frameRecord(t, recIntent, appendIntent(nil, &r))
	})
}

// J9.4: the intent read back must hold the created time the index holds.
func TestReadBackComparesTheIntentsCreatedTime(t *testing.T) {
	checkReadBack(t, false, "the intent there is operation", func(t *testing.T, in Intent, _ *Completion, _ []byte) []byte {
		r := recordOf(in)
		r.Created++
		return frameRecord(t, recIntent, appendIntent(nil, &r))
	})
}

// J9.4: the intent read back must hold the key lifetime the index holds.
func TestReadBackComparesTheIntentsKeyLifetime(t *testing.T) {
	checkReadBack(t, false, "key lifetime of", func(t *testing.T, in Intent, _ *Completion, _ []byte) []byte {
		r := recordOf(in)
		r.KeyTTL++
		return frameRecord(t, recIntent, appendIntent(nil, &r))
	})
}

// J9.4: the intent read back must hold the key whose sum the index holds.
func TestReadBackComparesTheIntentsKeySum(t *testing.T) {
	checkReadBack(t, false, "another key than the one indexed", func(t *testing.T, in Intent, _ *Completion, _ []byte) []byte {
		r := recordOf(in)
		r.Key = r.Key[:len(r.Key)-1] + "x"
		return frameRecord(t, recIntent, appendIntent(nil, &r))
	})
}

// completionChanged returns the record of c changed by change.
func completionChanged(t *testing.T, c *Completion, change func(id *string, s *State, o *Outcome)) []byte {
	id, s, o := c.ID, c.State, newOutcome(*c)
	change(&id, &s, &o)
	return frameRecord(t, recCompletion, appendCompletion(nil, id, s, &o))
}

// J9.5: the completion read back must be the one recovery read: its
// operation, state, completed time, status and flags, each on its own.
func TestReadBackComparesEveryCompletionField(t *testing.T) {
	for _, f := range []struct {
		name   string
		change func(id *string, s *State, o *Outcome)
	}{
		{"operation ID", func(id *string, _ *State, _ *Outcome) { *id = strings.Replace(*id, "op-", "op+", 1) }},
		{"state", func(_ *string, s *State, _ *Outcome) { *s = Done + Rejected - *s }},
		{"completed time", func(_ *string, _ *State, o *Outcome) { o.Completed++ }},
		{"status", func(_ *string, _ *State, o *Outcome) { o.Status++ }},
		{"flags", func(_ *string, _ *State, o *Outcome) { o.Flags ^= FlagHeaderTruncated }},
	} {
		t.Run(f.name, func(t *testing.T) {
			checkReadBack(t, true, "is not the one read at open", func(t *testing.T, _ Intent, c *Completion, _ []byte) []byte {
				return completionChanged(t, c, f.change)
			})
		})
	}
}

// J9.3: what is read back is checked as recovery checked it: each
// reserved byte and each padding byte of an intent and of a completion,
// the checksums resealed.
func TestReadBackChecksEveryReservedAndPaddingByte(t *testing.T) {
	for _, completion := range []bool{false, true} {
		kind := "intent"
		if completion {
			kind = "completion"
		}
		for i := 5; i < 8; i++ {
			t.Run(fmt.Sprintf("%s/reserved byte %d", kind, i), func(t *testing.T) {
				checkReadBack(t, completion, "reserved record header bytes are not zero", func(t *testing.T, _ Intent, _ *Completion, rec []byte) []byte {
					return reframe(rec, func(b []byte) { b[i] = 1 })
				})
			})
		}
		for k := range 7 {
			t.Run(fmt.Sprintf("%s/padding byte %d", kind, k), func(t *testing.T) {
				checkReadBack(t, completion, "padding byte is not 0", func(t *testing.T, _ Intent, _ *Completion, rec []byte) []byte {
					if padding(rec) != 7 {
						t.Fatalf("record has %d padding bytes, want 7", padding(rec))
					}
					rec[len(rec)-7+k] = 1
					return rec
				})
			})
		}
	}
}

// J1.1 to J1.5: the file header and a record are laid out byte for byte
// as frame.go draws them, assembled here without the journal's encoder:
// magic, version and checksum; then per record its length, type, three
// zero bytes and the header's own CRC-32C, the payload, the CRC-32C of the
// type byte and the payload, and zeros up to the next multiple of 8.
// Clauses: J1.2, J1.3, J1.4.
func TestFrameLayoutIsAsDrawn(t *testing.T) {
	table := crc32.MakeTable(crc32.Castagnoli)
	header := append([]byte("IDEMJRNL"), 1, 0, 0, 0)
	header = binary.LittleEndian.AppendUint32(header, crc32.Checksum(header, table))
	if got := appendFileHeader(nil); !bytes.Equal(got, header) {
		t.Fatalf("file header = %x, want %x", got, header)
	}
	for _, typ := range []recordType{recIntent, recCompletion} {
		for n := range 2 * recordAlign {
			payload := bytes.Repeat([]byte{0xA0 + byte(n)}, n)
			want := binary.LittleEndian.AppendUint32(nil, uint32(n))
			want = append(want, byte(typ), 0, 0, 0)
			want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, table))
			want = append(want, payload...)
			want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(append([]byte{byte(typ)}, payload...), table))
			for len(want)%8 != 0 {
				want = append(want, 0)
			}
			if got := frameRecord(t, typ, payload); !bytes.Equal(got, want) {
				t.Fatalf("record of type %d with a %d-byte payload = %x, want %x", typ, n, got, want)
			}
		}
	}
}
