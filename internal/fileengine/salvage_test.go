package fileengine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// salvageFixture writes a journal of nine records through the journal
// itself and returns its path, its bytes, the offsets of its records (and
// the file size after them) and the final record of each operation:
//
//	0 intent op-0001        5 intent op-0004
//	1 intent op-0002        6 completion op-0003
//	2 completion op-0001    7 intent op-0005
//	3 intent op-0003        8 completion op-0005
//	4 completion op-0002
func salvageFixture(t *testing.T) (path string, file []byte, offs []int64, want map[string]Record) {
	t.Helper()
	path = journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	in := map[int]Intent{}
	for i := 1; i <= 5; i++ {
		in[i] = testIntent(i)
	}
	done := func(i, status int, body string) Completion { return testOutcome(in[i], status, body) }
	rejected := func(i int) Completion {
		c := testOutcome(in[i], 422, `{"title":"declined"}`)
		c.State = Rejected
		return c
	}
	want = map[string]Record{}
	mustBegin(t, j, in[1])
	mustBegin(t, j, in[2])
	mustComplete(t, j, done(1, 201, `{"id":"ch_1"}`))
	mustBegin(t, j, in[3])
	mustComplete(t, j, rejected(2))
	mustBegin(t, j, in[4])
	mustComplete(t, j, done(3, 200, "three"))
	mustBegin(t, j, in[5])
	mustComplete(t, j, done(5, 201, `{"id":"ch_5"}`))
	want[in[1].ID] = recordOf(in[1], done(1, 201, `{"id":"ch_1"}`))
	want[in[2].ID] = recordOf(in[2], rejected(2))
	want[in[3].ID] = recordOf(in[3], done(3, 200, "three"))
	want[in[4].ID] = recordOf(in[4])
	want[in[5].ID] = recordOf(in[5], done(5, 201, `{"id":"ch_5"}`))
	mustClose(t, j)
	file = readFile(t, path)
	offs = recordOffsets(t, file)
	if len(offs) != 10 {
		t.Fatalf("fixture has %d records, want 9", len(offs)-1)
	}
	return path, file, offs, want
}

// scanBytes scans b as a journal file.
func scanBytes(t *testing.T, b []byte) *ScanReport {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scanned.journal")
	writeFile(t, path, b)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Scan(f, int64(len(b)))
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return rep
}

// salvaged writes rep's operations to a new journal and returns what Open
// reads back, by ID.
func salvaged(t *testing.T, dir string, rep *ScanReport) map[string]Record {
	t.Helper()
	dst := filepath.Join(dir, "salvaged.journal")
	if err := WriteSalvaged(dst, rep.Operations, 0o600); err != nil {
		t.Fatalf("WriteSalvaged: %v", err)
	}
	j, err := Open(dst, quietOptions())
	if err != nil {
		t.Fatalf("opening the salvaged journal: %v", err)
	}
	defer mustClose(t, j)
	got := map[string]Record{}
	for _, r := range records(j) {
		got[r.ID] = r
	}
	if len(got) != len(rep.Operations) {
		t.Fatalf("salvaged journal holds %d operations, the scan kept %d", len(got), len(rep.Operations))
	}
	if n := j.Stats().Truncated; n != 0 {
		t.Fatalf("salvaged journal had a torn tail of %d bytes", n)
	}
	return got
}

func TestScanCleanJournal(t *testing.T) {
	_, file, offs, want := salvageFixture(t)
	rep := scanBytes(t, file)
	if len(rep.Problems) != 0 || rep.Damaged() || len(rep.Lost) != 0 || len(rep.Ambiguous) != 0 {
		t.Fatalf("clean journal: problems %+v, lost %+v, ambiguous %q", rep.Problems, rep.Lost, rep.Ambiguous)
	}
	if len(rep.Records) != 9 {
		t.Fatalf("%d records, want 9", len(rep.Records))
	}
	for i, r := range rep.Records {
		if r.Offset != offs[i] || r.Size != offs[i+1]-offs[i] {
			t.Errorf("record %d at %d (%d bytes), want %d (%d bytes)", i, r.Offset, r.Size, offs[i], offs[i+1]-offs[i])
		}
	}
	got := salvaged(t, t.TempDir(), rep)
	for id, w := range want {
		sameRecords(t, "salvaged "+id, []Record{got[id]}, []Record{w})
	}
}

// TestSalvageKeepsEverythingOutsideADamagedWindow damages, in turn, every
// byte of three consecutive records (3, 4 and 5: op-0003's intent,
// op-0002's completion, op-0004's intent), with two bit patterns, and
// salvages each file: every record outside the window is read, every
// operation outside it is kept exactly, nothing is invented, and what the
// damage costs is named.
func TestSalvageKeepsEverythingOutsideADamagedWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("damages every byte of a window; -short skips the exhaustive runs")
	}
	_, file, offs, want := salvageFixture(t)
	from, to := offs[3], offs[6]
	outside := []int{0, 1, 2, 6, 7, 8}
	for off := from; off < to; off++ {
		for _, mask := range []byte{0x01, 0xff} {
			b := slices.Clone(file)
			b[off] ^= mask
			rep := scanBytes(t, b)
			if !rep.Damaged() || len(rep.Problems) == 0 {
				t.Fatalf("byte %d ^ %#x: no damage reported", off, mask)
			}
			for _, p := range rep.Problems {
				if p.Torn || p.Offset < from || p.Offset > off || p.End > to || p.End <= off {
					t.Fatalf("byte %d ^ %#x: problem %+v, want damage in [%d, %d) covering the byte", off, mask, p, from, to)
				}
			}
			// Every record outside the window is read where it is: kept,
			// or listed as lost (op-0003's completion, without its intent).
			for _, i := range outside {
				kept := slices.ContainsFunc(rep.Records, func(r ScannedRecord) bool { return r.Offset == offs[i] })
				lost := slices.ContainsFunc(rep.Lost, func(l LostOperation) bool { return l.Offset == offs[i] })
				if !kept && !lost {
					t.Fatalf("byte %d ^ %#x: record %d at %d not read; records %+v", off, mask, i, offs[i], rep.Records)
				}
			}
			got := salvaged(t, t.TempDir(), rep)
			// Operations entirely outside the window are kept exactly.
			for _, id := range []string{"op-0001", "op-0005"} {
				sameRecords(t, "salvaged "+id, []Record{got[id]}, []Record{want[id]})
			}
			// op-0002's intent is outside: it is kept, complete or,
			// when its completion is damaged, pending and ambiguous.
			op2 := want["op-0002"]
			if got["op-0002"].State == Pending {
				pending := op2
				pending.State, pending.Outcome = Pending, Outcome{}
				sameRecords(t, "pending op-0002", []Record{got["op-0002"]}, []Record{pending})
				if !slices.Contains(rep.Ambiguous, "op-0002") {
					t.Fatalf("byte %d ^ %#x: op-0002 lost its completion but is not listed as ambiguous: %q", off, mask, rep.Ambiguous)
				}
			} else {
				sameRecords(t, "completed op-0002", []Record{got["op-0002"]}, []Record{op2})
			}
			// op-0003's completion is outside: whole, or lost and named.
			if r, ok := got["op-0003"]; ok {
				sameRecords(t, "op-0003", []Record{r}, []Record{want["op-0003"]})
			} else if !slices.ContainsFunc(rep.Lost, func(l LostOperation) bool { return l.ID == "op-0003" && l.Offset == offs[6] }) {
				t.Fatalf("byte %d ^ %#x: op-0003 dropped but not listed as lost: %+v", off, mask, rep.Lost)
			}
			// op-0004 lives inside the window: whole or gone.
			if r, ok := got["op-0004"]; ok {
				sameRecords(t, "op-0004", []Record{r}, []Record{want["op-0004"]})
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Fatalf("byte %d ^ %#x: salvage invented operation %q", off, mask, id)
				}
			}
		}
	}
}

// TestScanAgreesWithRecovery flips one byte at every offset of the file:
// Scan calls the file damaged exactly when Open refuses it as corrupt, and
// a torn tail exactly when Open cuts one.
func TestScanAgreesWithRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("damages every byte of a journal; -short skips the exhaustive runs")
	}
	_, file, _, _ := salvageFixture(t)
	dir := t.TempDir()
	for off := range len(file) {
		b := slices.Clone(file)
		b[off] ^= 0x10
		path := filepath.Join(dir, "j")
		writeFile(t, path, b)
		o := quietOptions()
		o.ReadOnly = true
		j, openErr := Open(path, o)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		rep, scanErr := Scan(f, int64(len(b)))
		f.Close()
		damaged := scanErr != nil || rep.Damaged()
		if (openErr != nil) != damaged {
			t.Fatalf("byte %d: Open error %v, Scan error %v, damaged %v", off, openErr, scanErr, damaged)
		}
		if openErr != nil {
			if !errors.Is(openErr, ErrCorrupt) {
				t.Fatalf("byte %d: Open: %v", off, openErr)
			}
			continue
		}
		torn := len(rep.Problems) == 1 && rep.Problems[0].Torn
		if cut := j.Stats().Truncated; (cut > 0) != torn || (torn && rep.Problems[0].Offset != j.Stats().FileSize) {
			t.Fatalf("byte %d: Open cut %d bytes at %d; Scan problems %+v", off, cut, j.Stats().FileSize, rep.Problems)
		}
	}
}

func TestScanTornTail(t *testing.T) {
	_, file, offs, _ := salvageFixture(t)
	// Half of the last record: the tail a crash leaves.
	b := file[:offs[8]+(offs[9]-offs[8])/2]
	rep := scanBytes(t, b)
	if rep.Damaged() || len(rep.Problems) != 1 || !rep.Problems[0].Torn || rep.Problems[0].Offset != offs[8] ||
		rep.Problems[0].End != int64(len(b)) || rep.Problems[0].Before != "op-0005" || rep.Problems[0].After != "" {
		t.Fatalf("torn tail: problems %+v", rep.Problems)
	}
	if len(rep.Ambiguous) != 0 || len(rep.Records) != 8 {
		t.Fatalf("torn tail: %d records, ambiguous %q", len(rep.Records), rep.Ambiguous)
	}
}

func TestScanMidFileDamageNamesTheOffsetAndTheOperations(t *testing.T) {
	_, file, offs, _ := salvageFixture(t)
	b := slices.Clone(file)
	b[offs[4]+recordHeaderSize+2] ^= 0x40 // op-0002's completion payload
	rep := scanBytes(t, b)
	want := Problem{Offset: offs[4], End: offs[5], Reason: "record data checksum mismatch", Before: "op-0003", After: "op-0004"}
	if !rep.Damaged() || len(rep.Problems) != 1 || rep.Problems[0] != want {
		t.Fatalf("problems %+v, want [%+v]", rep.Problems, want)
	}
	// op-0003's intent precedes the damage too, but its completion
	// follows it; op-0004's intent follows it.
	if !slices.Equal(rep.Ambiguous, []string{"op-0002"}) {
		t.Fatalf("ambiguous %q, want op-0002", rep.Ambiguous)
	}
}

func TestScanDamagedFileHeader(t *testing.T) {
	_, file, offs, want := salvageFixture(t)
	b := slices.Clone(file)
	b[3] ^= 0xff
	rep := scanBytes(t, b)
	if len(rep.Problems) != 1 || rep.Problems[0].Offset != 0 || rep.Problems[0].End != offs[0] || !rep.Damaged() {
		t.Fatalf("problems %+v", rep.Problems)
	}
	got := salvaged(t, t.TempDir(), rep)
	if len(got) != len(want) {
		t.Fatalf("salvaged %d operations, want %d", len(got), len(want))
	}
}

func TestScanRefusesWhatIsNotAJournal(t *testing.T) {
	for name, b := range map[string][]byte{
		"text":  []byte("this is not a journal, only some text that goes on for a while\n"),
		"short": []byte("IDEM"),
	} {
		path := filepath.Join(t.TempDir(), "garbage")
		writeFile(t, path, b)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Scan(f, int64(len(b)))
		f.Close()
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != 0 {
			t.Errorf("%s: Scan: %v, want a *CorruptError at offset 0", name, err)
		}
	}
	// An empty file is an empty journal, as Open takes it.
	if rep := scanBytes(t, nil); len(rep.Problems) != 0 || len(rep.Records) != 0 {
		t.Errorf("empty file: %+v", rep)
	}
}

func TestWriteSalvagedRefusesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "taken")
	writeFile(t, dst, []byte("mine"))
	r := recordOf(testIntent(1))
	if err := WriteSalvaged(dst, []Record{r}, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteSalvaged over a file: %v, want fs.ErrExist", err)
	}
	if string(readFile(t, dst)) != "mine" {
		t.Fatal("the existing file was changed")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind %v", entries)
	}
	// An operation the format cannot hold is refused, and nothing is
	// left at the destination.
	dst2 := filepath.Join(dir, "new")
	if err := WriteSalvaged(dst2, []Record{{ID: "x", State: Pending}}, 0o600); !errors.Is(err, ErrInvalidOperation) {
		t.Fatalf("WriteSalvaged of a record without a key: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind %v", entries)
	}
}

// TestScanListsOperationsItCannotKeep: records that read whole but break
// recovery's rules are named as lost, never written.
func TestScanListsOperationsItCannotKeep(t *testing.T) {
	a, b := testIntent(1), testIntent(2)
	other := a
	other.Key = "00000000-0000-4000-8000-999999999999"
	file := fileOf(
		frameRecord(t, recIntent, intentPayload(a)),
		frameRecord(t, recCompletion, completionPayload(testOutcome(b, 200, "orphan"))),
		frameRecord(t, recIntent, intentPayload(other)),
		frameRecord(t, recIntent, intentPayload(a)), // a repeat of the same intent changes nothing
	)
	offs := recordOffsets(t, file)
	rep := scanBytes(t, file)
	want := []LostOperation{
		{ID: b.ID, Offset: offs[1], Reason: "its intent, and so its key, is unreadable; its completion says done, status 200"},
		{ID: a.ID, Offset: offs[2], Reason: "a second intent with different fields; the first is kept"},
	}
	if !slices.Equal(rep.Lost, want) || !rep.Damaged() || len(rep.Problems) != 0 {
		t.Fatalf("lost %+v, problems %+v; want lost %+v", rep.Lost, rep.Problems, want)
	}
	got := salvaged(t, t.TempDir(), rep)
	if len(got) != 1 {
		t.Fatalf("salvaged %v", got)
	}
	sameRecords(t, "kept", []Record{got[a.ID]}, []Record{recordOf(a)})
}
