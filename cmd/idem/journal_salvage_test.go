package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// fixtureRecords returns the offset of every record of the journal file b,
// read from the framing (a u32 length, then align8(16+length) bytes each),
// and the file size after them. The fixture's records are, in order:
// old's intent, charge-1's intent and completion, charge-2's intent and
// completion, charge-3's intent, blob's intent and completion.
func fixtureRecords(t *testing.T, b []byte) []int64 {
	t.Helper()
	var offs []int64
	off := int64(16)
	for off < int64(len(b)) {
		offs = append(offs, off)
		off += (16 + int64(binary.LittleEndian.Uint32(b[off:])) + 7) &^ 7
	}
	if off != int64(len(b)) || len(offs) != 8 {
		t.Fatalf("fixture: %d records ending at %d in %d bytes", len(offs), off, len(b))
	}
	return append(offs, off)
}

// damaged returns a copy of the fixture journal with one payload byte of
// record i flipped, written beside it, and the record's offset.
func damaged(t *testing.T, f fixture, i int) (string, int64) {
	t.Helper()
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	off := fixtureRecords(t, data)[i]
	data[off+12+3] ^= 0x20
	path := filepath.Join(t.TempDir(), "damaged.journal")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, off
}

func TestJournalVerifyClean(t *testing.T) {
	f := newFixture(t)
	before := stateOf(t, f.path)
	r := runCLI(t, "journal", "verify", f.path)
	want := fmt.Sprintf("%s: 8 records, 5 operations, no problems\n", f.path)
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	if after := stateOf(t, f.path); !reflect.DeepEqual(after, before) {
		t.Error("verify changed the journal")
	}
}

func TestJournalVerifyTornTail(t *testing.T) {
	f := newFixture(t)
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	size := len(data)
	data = append(data, data[16:36]...) // the first 20 bytes of a record
	if err := os.WriteFile(f.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, f.path)
	r := runCLI(t, "journal", "verify", f.path)
	want := fmt.Sprintf("offset %d: torn tail (a write a crash cut short; the next writer cuts it), 20 bytes unreadable: the file ends inside a record; after a record of operation blob\n"+
		"%s: 8 records, 5 operations, no problems (a torn tail of 20 bytes, which the next writer cuts)\n", size, f.path)
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Errorf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	if after := stateOf(t, f.path); !reflect.DeepEqual(after, before) {
		t.Error("verify cut the torn tail")
	}
}

func TestJournalVerifyMidFileDamage(t *testing.T) {
	f := newFixture(t)
	path, off := damaged(t, f, 2) // charge-1's completion
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := fixtureRecords(t, f.readBytes(t))[3]
	before := stateOf(t, path)
	r := runCLI(t, "journal", "verify", path)
	want := fmt.Sprintf("offset %d: damaged, %d bytes unreadable: record data checksum mismatch; between records of operations charge-1 and charge-2\n"+
		"operation old ambiguous: its completion may have been in the damaged bytes; it is kept pending, and a rerun resumes it under its key\n"+
		"operation charge-1 ambiguous: its completion may have been in the damaged bytes; it is kept pending, and a rerun resumes it under its key\n"+
		"%s: 7 records, 5 operations, 1 problem: the journal is damaged; salvage what reads with: idem journal salvage %s NEWPATH\n",
		off, end-off, path, path)
	if r.code != exitDamaged || r.stdout != want || r.stderr != "" {
		t.Errorf("exit code %d, stdout %q, stderr %q; want %d and %q", r.code, r.stdout, r.stderr, exitDamaged, want)
	}
	if after := stateOf(t, path); !reflect.DeepEqual(after, before) || string(after.data) != string(data) {
		t.Error("verify changed the damaged journal")
	}
}

// readBytes returns the fixture journal's bytes.
func (f fixture) readBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJournalSalvage(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name      string
		record    int      // the damaged record
		pending   []string // operations salvaged as pending
		lost      string   // the operation lost, if any
		ambiguous string
	}{
		{name: "a completion", record: 2, pending: []string{"old", "charge-1", "charge-3"}, ambiguous: "charge-1"},
		{name: "an intent", record: 3, pending: []string{"old", "charge-3"}, lost: "charge-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := damaged(t, f, tc.record)
			before := stateOf(t, src)
			dst := filepath.Join(t.TempDir(), "salvaged.journal")
			r := runCLI(t, "journal", "salvage", src, dst)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("exit code %d, stderr %q, stdout:\n%s", r.code, r.stderr, r.stdout)
			}
			if after := stateOf(t, src); !reflect.DeepEqual(after, before) {
				t.Fatal("salvage changed SRC")
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "salvaged "+src+" to "+dst+": ") {
				t.Errorf("last line %q", last)
			}
			if tc.lost != "" && !strings.Contains(r.stdout, "operation "+tc.lost+" lost: its intent, and so its key, is unreadable") {
				t.Errorf("%s not listed as lost:\n%s", tc.lost, r.stdout)
			}
			if tc.ambiguous != "" && !strings.Contains(r.stdout, "operation "+tc.ambiguous+" ambiguous") {
				t.Errorf("%s not listed as ambiguous:\n%s", tc.ambiguous, r.stdout)
			}

			j, err := filejournal.Open(dst, filejournal.Options{})
			if err != nil {
				t.Fatalf("opening the salvaged journal: %v", err)
			}
			defer j.Close()
			for id, want := range f.ops {
				got, ok := lookup(j, id)
				if id == tc.lost {
					if ok {
						t.Errorf("lost operation %s is in the salvaged journal", id)
					}
					continue
				}
				if !ok || got.Key != want.Key || got.Fingerprint != want.Fingerprint {
					t.Errorf("%s: salvaged %v (found %v), want key %s", id, got, ok, want.Key)
					continue
				}
				wantState := want.State
				for _, p := range tc.pending {
					if p == id {
						wantState = journal.StatePending
					}
				}
				if got.State != wantState || (wantState != journal.StatePending && got.Status != want.Status) {
					t.Errorf("%s: salvaged %v %d, want %v %d", id, got.State, got.Status, wantState, want.Status)
				}
			}
			if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("salvaged journal: %v, %v", fi, err)
			}
			// The salvaged journal verifies clean.
			if r := runCLI(t, "journal", "verify", dst); r.code != exitOK {
				t.Errorf("verify of the salvaged journal: exit code %d, stdout %q", r.code, r.stdout)
			}
		})
	}
}

func TestJournalSalvageRefusesAnExistingDestination(t *testing.T) {
	f := newFixture(t)
	dst := filepath.Join(t.TempDir(), "taken")
	if err := os.WriteFile(dst, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dst, f.path} {
		r := runCLI(t, "journal", "salvage", f.path, d)
		want := fmt.Sprintf("idem journal salvage: %s exists; salvage writes a new journal and never replaces a file\n", d)
		if r.code != exitFailure || r.stdout != "" || r.stderr != want {
			t.Errorf("salvage to %s: exit code %d, stdout %q, stderr %q; want %d and %q", d, r.code, r.stdout, r.stderr, exitFailure, want)
		}
	}
	if b, _ := os.ReadFile(dst); string(b) != "mine" {
		t.Error("the existing destination was changed")
	}
}

func TestJournalVerifyAndSalvageBadPaths(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a journal at all, just a few words of text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nosuch.journal")
	dst := filepath.Join(dir, "out.journal")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"verify", garbage}, exitDamaged, "idem journal verify: " + garbage + ` is not an idem journal (it begins with "not a jo", not "IDEMJRNL")`},
		{[]string{"salvage", garbage, dst}, exitDamaged, "idem journal salvage: " + garbage + ` is not an idem journal (it begins with "not a jo", not "IDEMJRNL")`},
		{[]string{"verify", dir}, exitPath, "idem journal verify: " + dir + " is a directory, not a journal"},
		{[]string{"salvage", dir, dst}, exitPath, "idem journal salvage: " + dir + " is a directory, not a journal"},
		{[]string{"verify", missing}, exitPath, "idem journal verify: no journal at " + missing},
		{[]string{"salvage", missing, dst}, exitPath, "idem journal salvage: no journal at " + missing},
	} {
		r := runCLI(t, append([]string{"journal"}, tc.args...)...)
		if r.code != tc.code || r.stdout != "" || r.stderr != tc.want+"\n" {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q; want %d and %q", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
	}
	// A destination that cannot be written: one line naming it.
	nodir := filepath.Join(dir, "nosuch", "out.journal")
	r := runCLI(t, "journal", "salvage", f.path, nodir)
	if r.code != exitFailure || r.stdout != "" || !strings.HasPrefix(r.stderr, "idem journal salvage: writing "+nodir+": ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("salvage to %s: exit code %d, stdout %q, stderr %q", nodir, r.code, r.stdout, r.stderr)
	}
	if exists(dst) || exists(missing) {
		t.Error("a failed verify or salvage left a file behind")
	}
}

func TestJournalVerifyAndSalvageUsage(t *testing.T) {
	for _, args := range [][]string{
		{"journal", "verify"},
		{"journal", "verify", "a", "b"},
		{"journal", "salvage", "a"},
		{"journal", "salvage", "a", "b", "c"},
		{"journal", "verify", "--bogus", "a"},
	} {
		r := runCLI(t, args...)
		if r.code != exitUsage || r.stdout != "" || !strings.HasSuffix(r.stderr, "-h' for usage.\n") {
			t.Errorf("%q: exit code %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"journal", "-h"}, "  salvage   SRC DST"},
		{[]string{"journal", "-h"}, "7  journal corrupt or not a journal; verify: damage"},
		{[]string{"journal", "verify", "-h"}, "Usage: idem journal verify PATH"},
		{[]string{"journal", "salvage", "-h"}, "Usage: idem journal salvage SRC DST"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != exitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%q: exit code %d, stdout lacks %q:\n%s", tc.args, r.code, tc.want, r.stdout)
		}
	}
}
