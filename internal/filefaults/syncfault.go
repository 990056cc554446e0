package filefaults

import (
	"errors"
	"sync/atomic"

	"github.com/idemkit/idem/internal/fileengine"
)

// ErrFsync is the failure of an fsync a SyncFault makes fail.
var ErrFsync = errors.New("model disk: fsync failed")

// SyncFault makes one fsync of a process's journal fail.
type SyncFault struct {
	Armed atomic.Bool  // the next fsync fails
	Fired atomic.Bool  // an fsync failed
	After atomic.Int64 // fsyncs tried after that
}

// SyncedFile remembers in Size how much of the journal file the last
// successful fsync covered, so that a power cut can be modelled: what was
// written after it may be lost. Its fsync fails when Fault is armed.
type SyncedFile struct {
	fileengine.File
	Size  *atomic.Int64
	Fault *SyncFault
}

// Sync fails with ErrFsync once Fault is armed, and otherwise syncs the
// file and records the length the fsync covered.
func (f SyncedFile) Sync() error {
	if f.Fault.Fired.Load() {
		f.Fault.After.Add(1)
	}
	if f.Fault.Armed.CompareAndSwap(true, false) {
		f.Fault.Fired.Store(true)
		return ErrFsync
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
	f.Size.Store(fi.Size())
	return nil
}
