// Package fsutil holds the file-system step the standard library does not
// name: making a change to a directory's entries durable.
package fsutil

// SyncDir does nothing on Windows: a directory handle cannot be flushed
// there (FlushFileBuffers needs write access that directories do not grant),
// and NTFS journals directory metadata itself, so a completed rename
// survives a crash.
func SyncDir(dir string) error { return nil }
