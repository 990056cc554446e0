// Package fsutil holds the file-system facts the standard library does not
// name: making a change to a directory's entries durable, and reading a
// file's link count and inode number.
package fsutil

// SyncDir does nothing on Windows: a directory handle cannot be flushed
// there (FlushFileBuffers needs write access that directories do not grant),
// and NTFS journals directory metadata itself, so a completed rename
// survives a crash.
func SyncDir(dir string) error { return nil }
