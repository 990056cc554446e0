//go:build unix

package fsutil

import (
	"os"
	"syscall"
)

// LinkCount returns the number of hard links (names) of the file fi
// describes, and false when fi does not say.
func LinkCount(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}

// Inode returns the inode number of the file fi describes, and false when
// fi does not say.
func Inode(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Ino), true
}
