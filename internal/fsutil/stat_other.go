//go:build !unix

package fsutil

import "os"

// LinkCount returns false: os.FileInfo does not carry the link count on
// this platform.
func LinkCount(fi os.FileInfo) (uint64, bool) { return 0, false }

// Inode returns false: os.FileInfo does not carry the inode number on this
// platform.
func Inode(fi os.FileInfo) (uint64, bool) { return 0, false }
