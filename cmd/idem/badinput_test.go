package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idemkit/idem/filejournal"
)

// TestEveryJournalCommandRefusesBadInputInOneLine: every journal command,
// given a missing file, a directory, a file that is not a journal or a
// journal another process holds locked, prints one line naming the problem
// (never the help text), fails with the code for that problem, and writes
// nothing.
func TestEveryJournalCommandRefusesBadInputInOneLine(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a journal at all, just some bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(dir, "locked.journal")
	holder, err := filejournal.Open(locked, filejournal.Options{}) // this process holds it for writing
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	lockedBefore, _ := os.ReadFile(locked)
	missing := filepath.Join(dir, "missing.journal")
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.journal")

	type input struct {
		name, path string
		code       int
		says       string
	}
	inputs := []input{
		{"missing", missing, exitPath, "no journal at " + missing},
		{"directory", sub, exitPath, sub + " is a directory, not a journal"},
		{"garbage", garbage, exitDamaged, garbage + " is not an idem journal (it begins with "},
	}
	writers := map[string]bool{"compact": true, "settle": true, "load": true}
	commands := map[string]func(path string) []string{
		"ls":        func(p string) []string { return []string{"journal", "ls", p} },
		"pending":   func(p string) []string { return []string{"journal", "pending", p} },
		"expired":   func(p string) []string { return []string{"journal", "expired", p} },
		"completed": func(p string) []string { return []string{"journal", "completed", p} },
		"show":      func(p string) []string { return []string{"journal", "show", p, "op"} },
		"dump":      func(p string) []string { return []string{"journal", "dump", p} },
		"compact":   func(p string) []string { return []string{"journal", "compact", p} },
		"settle":    func(p string) []string { return []string{"journal", "settle", p, "op", "--done", "201"} },
		"copy":      func(p string) []string { return []string{"journal", "copy", p, out} },
	}
	for name, args := range commands {
		cases := inputs
		if writers[name] {
			cases = append(cases, input{"locked", locked, exitJournal, "is locked"})
		}
		for _, in := range cases {
			if name == "verify" && in.name == "garbage" {
				continue
			}
			r := runCLI(t, args(in.path)...)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if r.code != in.code || len(lines) > 2 || !strings.Contains(r.stderr, in.says) || strings.Contains(r.stderr, "Usage:") {
				t.Errorf("idem %s on a %s path: exit code %d, stderr %q; want %d and one line saying %q",
					strings.Join(args(in.path), " "), in.name, r.code, r.stderr, in.code, in.says)
			}
		}
	}
	// Nothing was written: no journal where one was missing, the garbage
	// and the locked journal as they were, no copy made.
	for _, p := range []string{missing, out} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	if b, _ := os.ReadFile(garbage); string(b) != "not a journal at all, just some bytes\n" {
		t.Error("the garbage file was changed")
	}
	if b, _ := os.ReadFile(locked); string(b) != string(lockedBefore) {
		t.Error("the locked journal was changed")
	}
	if entries, _ := os.ReadDir(sub); len(entries) != 0 {
		t.Errorf("files were made in the directory given as a journal: %v", entries)
	}
}

// TestReadOnlyAndPermissionProblemsAreNamed: the failures this machine's
// tests cannot cause for real (they run as root, and mounting a read-only
// file system needs privileges) are named by the same function that names
// the others, with the same exit code.
func TestReadOnlyAndPermissionProblemsAreNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.journal")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&os.PathError{Op: "open", Path: path, Err: syscall.EROFS}, "journal " + path + ": the file system is read-only"},
		{&os.PathError{Op: "open", Path: path, Err: syscall.EACCES}, "journal " + path + ": permission denied"},
	} {
		var stderr strings.Builder
		code := reportJournalError(env{stderr: &stderr}, "idem journal compact", path, fmt.Errorf("filejournal: opening journal: %w", tc.err))
		if code != exitPath || stderr.String() != "idem journal compact: "+tc.want+"\n" {
			t.Errorf("%v: exit code %d, stderr %q; want %d and %q", tc.err, code, stderr.String(), exitPath, tc.want)
		}
	}
}
