package fileengine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// --- J4, locking ----------------------------------------------------------

// Clause: J4.1.
func TestJournalSecondOpenerIsLockedOut(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))

	if _, err := Open(path, quietOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open in this process: err = %v, want ErrLocked", err)
	}
	if err := lockHelper(t, path); !strings.Contains(err, "ErrLocked") {
		t.Fatalf("open from another process: %s, want ErrLocked", err)
	}
	if err := j.Compact(); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if _, err := Open(path, quietOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open after compaction: err = %v, want ErrLocked", err)
	}
	if err := lockHelper(t, path); !strings.Contains(err, "ErrLocked") {
		t.Fatalf("open from another process after compaction: %s, want ErrLocked", err)
	}
	mustClose(t, j)
	if err := lockHelper(t, path); err != "opened" {
		t.Fatalf("open from another process after Close: %s, want opened", err)
	}
	j2 := openTestJournal(t, path, quietOptions())
	if _, ok := lookup(t, j2, testIntent(1).ID); !ok {
		t.Fatal("reopened journal lost its operation")
	}
}

// J4: the second writer's ErrLocked names the process holding the journal,
// by the ID the holder wrote into the lock file.
func TestJournalLockErrorNamesTheHolder(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	defer mustClose(t, j)
	want := fmt.Sprintf("(by process %d)", os.Getpid())
	if err := lockHelper(t, path); !strings.Contains(err, "ErrLocked") || !strings.Contains(err, want) {
		t.Fatalf("open from another process: %s, want ErrLocked naming %s", err, want)
	}
}

// lockHelper opens the journal at path in a child process and returns what
// it reported: "opened", "ErrLocked" or an error text.
func lockHelper(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEM_JOURNAL_LOCK_HELPER="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lock helper process: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "lock-helper: "); ok {
			return v
		}
	}
	t.Fatalf("lock helper process said nothing:\n%s", out)
	return ""
}

// TestJournalLockHelperProcess is the child of lockHelper; it does nothing
// in a normal run.
func TestJournalLockHelperProcess(t *testing.T) {
	path := os.Getenv("IDEM_JOURNAL_LOCK_HELPER")
	if path == "" {
		t.Skip("runs only as the child of lockHelper")
	}
	j, err := Open(path, quietOptions())
	switch {
	case errors.Is(err, ErrLocked):
		fmt.Println("lock-helper: ErrLocked: " + err.Error())
	case err != nil:
		fmt.Println("lock-helper: " + err.Error())
	default:
		j.Close()
		fmt.Println("lock-helper: opened")
	}
}
