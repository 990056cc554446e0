//go:build unix

package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLinkCountCountsHardLinks(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	if err := os.WriteFile(a, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		t.Helper()
		fi, err := os.Stat(a)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := LinkCount(fi)
		if !ok {
			t.Fatal("LinkCount: no count on a unix file")
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("LinkCount = %d, want 1", n)
	}
	if err := os.Link(a, filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("LinkCount after os.Link = %d, want 2", n)
	}
}

func TestInodeFollowsTheFileNotTheName(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ino := func(p string) uint64 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := Inode(fi)
		if !ok {
			t.Fatal("Inode: no number on a unix file")
		}
		return n
	}
	ib := ino(b)
	if ino(a) == ib {
		t.Fatal("two files share an inode number")
	}
	if err := os.Rename(b, a); err != nil {
		t.Fatal(err)
	}
	if ino(a) != ib {
		t.Fatal("a rename changed the inode number")
	}
}
