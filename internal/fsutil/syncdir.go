//go:build !windows

// Package fsutil holds the file-system facts the standard library does not
// name: making a change to a directory's entries durable, and reading a
// file's link count and inode number.
package fsutil

import "os"

// SyncDir fsyncs the directory dir. Creating, renaming or removing a file
// changes the directory, not the file: until the directory itself is synced,
// a crash may bring back the entry as it was before the change.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
