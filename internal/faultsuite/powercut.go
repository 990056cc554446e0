package faultsuite

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fsutil"
)

// Power cuts. A SIGKILL cannot test fsync ordering: the page cache outlives
// the killed process, so every byte it wrote is still there. A power cut
// keeps only what an fsync made durable. To stage one, the killed process
// journals through SyncLog's file seam, which notes after every fsync that
// returned how long the file was when the fsync began: the bytes the disk
// is then sure to hold. After the kill, CutPower cuts the journal back to
// that length and, as a disk may, leaves part of what followed, torn or
// garbled. The journal must then open (its torn tail cut, J2), and no
// operation the process had sent may be lost from it (C2).
//
// Files are told apart by inode, since compaction renames a new file over
// the journal. A rename is taken as durable once done: the seam does not
// see the journal's directory fsyncs.

// SyncLog is a journal's file seam that logs every successful fsync to a
// file: one line per fsync, "inode size". It is safe for concurrent use.
type SyncLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenSyncLog opens (or creates) the log at path for appending.
func OpenSyncLog(path string) (*SyncLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("faultsuite: opening the sync log: %w", err)
	}
	return &SyncLog{f: f}, nil
}

// Wrap is the WrapFile function.
func (l *SyncLog) Wrap(f filejournal.File) filejournal.File { return &loggedFile{File: f, log: l} }

// Close closes the log.
func (l *SyncLog) Close() error { return l.f.Close() }

type loggedFile struct {
	filejournal.File
	log *SyncLog
}

// Sync notes the file's length before the fsync once it has returned, and
// before the journal learns that it did.
func (f *loggedFile) Sync() error {
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	ino, ok := fsutil.Inode(fi)
	if !ok {
		return errors.New("faultsuite: the sync log needs inode numbers")
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	_, err = fmt.Fprintf(f.log.f, "%d %d\n", ino, fi.Size())
	return err
}

// PowerCut is what CutPower did to a journal.
type PowerCut struct {
	Durable int64  // bytes an fsync had covered, kept
	Lost    int64  // bytes past them the cut took away or garbled: a garbled tail's, all of which the next open must cut
	How     string // "cut", "torn" (a prefix of the rest kept) or "garbled" (random bytes or zeros past a prefix)
}

// CutPower applies a power cut to the journal at path, by the sync log at
// logPath, drawing from rng how the unsynced tail fares: cut away, torn
// (a random prefix kept), or garbled (a random prefix kept, then random
// bytes or zeros to the old end). With garble set, the tail is always
// garbled, and where nothing was unsynced the remains of a write in flight
// are appended. A journal that does not exist yet is left alone.
func CutPower(path, logPath string, rng *rand.Rand, garble bool) (PowerCut, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return PowerCut{}, nil
	}
	if err != nil {
		return PowerCut{}, err
	}
	ino, ok := fsutil.Inode(fi)
	if !ok {
		return PowerCut{}, errors.New("faultsuite: power cuts need inode numbers")
	}
	durable, found, err := lastSynced(logPath, ino)
	if err != nil {
		return PowerCut{}, err
	}
	if !found {
		// A journal is renamed into place only after its fsync, which
		// the log notes first: this one was never made durable.
		return PowerCut{Lost: fi.Size(), How: "cut"}, os.Remove(path)
	}
	size := fi.Size()
	if durable > size {
		return PowerCut{}, fmt.Errorf("faultsuite: %s is %d bytes, but %d were synced", path, size, durable)
	}
	pc := PowerCut{Durable: durable, Lost: size - durable, How: "cut"}
	if pc.Lost == 0 {
		if !garble {
			return pc, nil
		}
		// Nothing was unsynced: leave the remains of a write that was in
		// flight when the power went, as a torn tail.
		junk := make([]byte, 1+rng.IntN(600))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return PowerCut{}, err
		}
		_, err = f.Write(junk)
		return PowerCut{Durable: durable, Lost: int64(len(junk)), How: "garbled"}, errors.Join(err, f.Close())
	}
	mode := rng.IntN(3)
	if garble {
		mode = 2
	}
	keep := durable + rng.Int64N(pc.Lost) // a strict prefix of the tail survives
	switch mode {
	case 0:
		return pc, os.Truncate(path, durable)
	case 1:
		pc.How, pc.Lost = "torn", size-keep
		return pc, os.Truncate(path, keep)
	}
	pc.How, pc.Lost = "garbled", size-keep
	junk := make([]byte, size-keep)
	if rng.IntN(2) == 0 {
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return PowerCut{}, err
	}
	_, err = f.WriteAt(junk, keep)
	return pc, errors.Join(err, f.Close())
}

// lastSynced returns the length the last logged fsync of inode ino covered.
// The last line wins: an inode number freed by compaction may be reused,
// and the file now holding it was synced before it was renamed into place.
func lastSynced(logPath string, ino uint64) (int64, bool, error) {
	f, err := os.Open(logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var size int64
	found := false
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF {
			return size, found, nil // a line cut short by the kill is no fsync
		}
		if err != nil {
			return 0, false, err
		}
		a, b, _ := strings.Cut(strings.TrimSpace(line), " ")
		i, err1 := strconv.ParseUint(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false, fmt.Errorf("faultsuite: bad sync log line %q", line)
		}
		if i == ino {
			size, found = n, true
		}
	}
}
