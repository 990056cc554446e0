package faultsuite

import (
	"sync"

	"github.com/idemkit/idem/internal/fileengine"
)

// Journal record types, as the journal's file format numbers them (the
// byte at offset 4 of a record's header).
const (
	RecordIntent     byte = 1
	RecordCompletion byte = 2
)

// DiskFaults makes the files of a journal fail on command, through
// filefaults.WrapFiles:
//
//	faults := new(faultsuite.DiskFaults)
//	j, err := filejournal.Open(path, filefaults.WrapFiles(filejournal.Options{}, faults.Wrap))
//	faults.FailNextSync(errDisk)
//
// A failure fires once, on the next matching call to any wrapped file. It
// is safe for concurrent use.
type DiskFaults struct {
	mu        sync.Mutex
	writeErr  error // the next write of a record of writeType fails with it
	writeType byte
	short     bool  // that write writes half its bytes first
	syncErr   error // the next Sync fails with it
	lose      bool  // that Sync also loses what the file gained since its last good Sync
	syncs     int   // Sync calls, failed ones included
	writes    int   // Write calls, failed ones included
}

// Wrap wraps a file of the journal (filefaults.WrapFiles).
func (d *DiskFaults) Wrap(f fileengine.File) fileengine.File {
	ff := &faultyFile{File: f, d: d}
	if fi, err := f.Stat(); err == nil {
		ff.synced = fi.Size() // what was there when it was opened is on disk
	}
	return ff
}

// FailNextWrite makes the next write of a record of the given type fail
// with err; with short, half its bytes reach the file first, as when a
// disk fills up in the middle of a record.
func (d *DiskFaults) FailNextWrite(recordType byte, short bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeErr, d.writeType, d.short = err, recordType, short
}

// FailNextSync makes the next Sync fail with err.
func (d *DiskFaults) FailNextSync(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncErr, d.lose = err, false
}

// FailNextSyncAndLose makes the next Sync fail with err and cuts the file
// back to its size at its last successful Sync: what a machine that
// crashes after the failure may find, since a kernel that reported EIO
// for an fsync may already have dropped the dirty pages.
func (d *DiskFaults) FailNextSyncAndLose(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncErr, d.lose = err, true
}

// Syncs returns the number of Sync calls so far, failed ones included.
func (d *DiskFaults) Syncs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs
}

// Writes returns the number of Write calls so far, failed ones included.
func (d *DiskFaults) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

type faultyFile struct {
	fileengine.File
	d      *DiskFaults
	synced int64 // the file's size at its last successful Sync
}

func (f *faultyFile) Write(p []byte) (int, error) {
	d := f.d
	d.mu.Lock()
	d.writes++
	err, short := d.writeErr, d.short
	if err != nil && len(p) > 4 && p[4] == d.writeType {
		d.writeErr = nil
	} else {
		err = nil
	}
	d.mu.Unlock()
	if err == nil {
		return f.File.Write(p)
	}
	if short {
		n, werr := f.File.Write(p[:len(p)/2])
		if werr != nil {
			return n, werr
		}
		return n, err
	}
	return 0, err
}

func (f *faultyFile) Sync() error {
	d := f.d
	d.mu.Lock()
	d.syncs++
	err, lose := d.syncErr, d.lose
	d.syncErr, d.lose = nil, false
	d.mu.Unlock()
	if err != nil {
		if lose {
			if terr := f.File.Truncate(f.synced); terr != nil {
				return terr
			}
		}
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.synced = fi.Size()
	return nil
}
