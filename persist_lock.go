package idem

// Locking: one writer per journal.
//
// The lock is taken on a sidecar file, path+".lock", not on the journal:
// compaction renames a new file over the journal, and a lock held on the old
// file's inode would no longer guard the name. The sidecar is locked with
// github.com/gofrs/flock (flock(2) on Unix, LockFileEx on Windows), which
// the operating system releases when the process dies, so a crash never
// leaves a stale lock. The sidecar itself is never removed: removing it
// would let a second writer lock a new file of the same name while the
// first still holds the old one.
//
// Within one process a registry of open paths refuses a second writer too,
// whatever the platform's lock semantics between two descriptors of one
// process.

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/gofrs/flock"
)

// lockSuffix names the sidecar lock file.
const lockSuffix = ".lock"

// openJournals holds the absolute paths of journals open for writing in this
// process.
var openJournals struct {
	sync.Mutex
	paths map[string]bool
}

// acquire claims the journal for this Journal, in this process and then
// across processes, or returns an error matching ErrLocked.
func (j *Journal) acquire() error {
	abs, err := filepath.Abs(j.path)
	if err != nil {
		return fmt.Errorf("idem: opening journal %s: %w", j.path, err)
	}
	openJournals.Lock()
	if openJournals.paths[abs] {
		openJournals.Unlock()
		return fmt.Errorf("idem: opening journal %s: %w (by this process)", j.path, ErrLocked)
	}
	if openJournals.paths == nil {
		openJournals.paths = make(map[string]bool)
	}
	openJournals.paths[abs] = true
	openJournals.Unlock()
	unclaim := func() {
		openJournals.Lock()
		delete(openJournals.paths, abs)
		openJournals.Unlock()
	}

	lock := flock.New(j.path+lockSuffix, flock.SetPermissions(j.opt.FileMode))
	ok, err := lock.TryLock()
	if err != nil {
		unclaim()
		return fmt.Errorf("idem: opening journal %s: locking %s: %w", j.path, lock.Path(), err)
	}
	if !ok {
		unclaim()
		return fmt.Errorf("idem: opening journal %s: %w (by another process)", j.path, ErrLocked)
	}
	j.lock, j.unclaim = lock, unclaim
	return nil
}

// release gives up what acquire claimed. Called with mu held or during
// open.
func (j *Journal) release() {
	if j.lock != nil {
		if err := j.lock.Unlock(); err != nil {
			j.log.Warn("idem: unlocking journal", "path", j.path, "err", err)
		}
		j.lock = nil
	}
	if j.unclaim != nil {
		j.unclaim()
		j.unclaim = nil
	}
}
