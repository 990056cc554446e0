package idem_test

import (
	"errors"
	"sync/atomic"

	"github.com/idemkit/idem/internal/fileengine"
)

// errModelFsync is the failure of an fsync a test makes fail.
var errModelFsync = errors.New("model disk: fsync failed")

// syncedFile remembers how much of the journal file the last successful
// fsync covered, so that a power cut can be modelled: what was written
// after it may be lost. Its fsync fails when the fault is armed.
type syncedFile struct {
	fileengine.File
	size  *atomic.Int64
	fault *syncFault
}

// syncFault makes one fsync of a process's journal fail.
type syncFault struct {
	armed atomic.Bool  // the next fsync fails
	fired atomic.Bool  // an fsync failed
	after atomic.Int64 // fsyncs tried after that
}

func (f syncedFile) Sync() error {
	if f.fault.fired.Load() {
		f.fault.after.Add(1)
	}
	if f.fault.armed.CompareAndSwap(true, false) {
		f.fault.fired.Store(true)
		return errModelFsync
	}
	// The length before the fsync is what it covers for sure: records
	// appended while it runs may miss it.
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.size.Store(fi.Size())
	return nil
}
