package fileengine

// Locking: one writer per journal file (J4).
//
// The rule is about the file, not the name that reaches it. A second writer
// that reached the same file by another name would append the same
// operation under a second key, so the name is first resolved: every
// symlink in it is followed (resolvePath), and everything the journal does
// on disk (the lock below, recovery, appends, compaction) uses the real
// file's path. Compaction then renames its new file over the real file, in
// the real file's directory, and a symlink keeps pointing at the live
// journal. A hard link cannot be resolved: two names of one file are
// equals. So a journal file with more than one link is refused
// (ErrHardLinked); the error says how to fix it. (Where os.FileInfo carries
// no link count, on Windows, links are not counted.)
//
// The lock is taken on a sidecar file, real path+".lock", not on the journal:
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
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/gofrs/flock"
	"github.com/idemkit/idem/internal/fsutil"
)

// lockSuffix names the sidecar lock file.
const lockSuffix = ".lock"

// openJournals holds the absolute paths of journals open for writing in this
// process.
var openJournals struct {
	sync.Mutex
	paths map[string]bool
}

// maxSymlinks bounds the symlinks followed in resolving a journal's path,
// as the kernel bounds them (Linux's MAXSYMLINKS is 40).
const maxSymlinks = 40

// resolvePath returns the absolute path of the file that path names, every
// symlink followed, whether or not that file exists yet (a dangling symlink
// resolves to the file it would create). The directory it ends in must
// exist. The path is never cleaned before its symlinks are followed: as
// the kernel reads it, "link/.." is the parent of the link's target, not
// the directory holding the link, and a relative path starts from the real
// working directory, not from $PWD.
func resolvePath(path string) (string, error) {
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err == nil {
			wd, err = filepath.EvalSymlinks(wd)
		}
		if err != nil {
			return "", err
		}
		path = wd + string(filepath.Separator) + path
	}
	for range maxSymlinks {
		dir, base := filepath.Split(path)
		if base == "" || base == "." || base == ".." {
			return "", errors.New("the path names a directory")
		}
		dir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", err
		}
		path = filepath.Join(dir, base)
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return path, nil
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink == 0:
			return path, nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = dir + string(filepath.Separator) + target
		}
		path = target
	}
	return "", fmt.Errorf("more than %d symlinks", maxSymlinks)
}

// checkLinks refuses a journal file that other names share (J4).
func (j *Journal) checkLinks(fi os.FileInfo) error {
	if n, ok := fsutil.LinkCount(fi); ok && n > 1 {
		return fmt.Errorf("filejournal: opening journal %s: %w: %s has %d names, and a second writer "+
			"through another one would send operations under new keys; remove the other names "+
			"(find / -xdev -samefile %s) and open the journal by one name, or through symlinks",
			j.path, ErrHardLinked, j.file, n, j.file)
	}
	return nil
}

// acquire claims the journal file for this Journal, in this process and
// then across processes, or returns an error matching ErrLocked.
func (j *Journal) acquire() error {
	abs := j.file
	openJournals.Lock()
	if openJournals.paths[abs] {
		openJournals.Unlock()
		return fmt.Errorf("filejournal: opening journal %s: %w (by this process)", j.path, ErrLocked)
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

	lock := flock.New(j.file+lockSuffix, flock.SetPermissions(j.opt.FileMode))
	ok, err := lock.TryLock()
	if err != nil {
		unclaim()
		return fmt.Errorf("filejournal: opening journal %s: locking %s: %w", j.path, lock.Path(), err)
	}
	if !ok {
		unclaim()
		return fmt.Errorf("filejournal: opening journal %s: %w (by %s)", j.path, ErrLocked, lockHolder(lock.Path()))
	}
	j.lock, j.unclaim = lock, unclaim
	writeHolder(lock.Path())
	return nil
}

// writeHolder writes this process's ID into the lock file it holds, so
// that a second writer's ErrLocked can name the holder. It is a courtesy:
// where it fails (a platform whose lock forbids the write), nothing else
// does.
func writeHolder(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Truncate(0) == nil {
		fmt.Fprintf(f, "%d\n", os.Getpid())
	}
}

// lockHolder names the process that holds the lock file at path, by the ID
// it wrote there, or says it is another process when the file names none.
func lockHolder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "another process"
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return "another process"
	}
	return fmt.Sprintf("process %d", pid)
}

// release gives up what acquire claimed. Called with mu held or during
// open.
func (j *Journal) release() {
	if j.lock != nil {
		if err := j.lock.Unlock(); err != nil {
			j.log.Warn("filejournal: unlocking journal", "path", j.path, "err", err)
		}
		j.lock = nil
	}
	if j.unclaim != nil {
		j.unclaim()
		j.unclaim = nil
	}
}
