//go:build !windows

package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSyncDirSyncsAnExistingDirectory(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatalf("SyncDir: %v", err)
	}
}

func TestSyncDirReportsAMissingDirectory(t *testing.T) {
	err := SyncDir(filepath.Join(t.TempDir(), "missing"))
	if !os.IsNotExist(err) {
		t.Fatalf("SyncDir(missing) = %v, want a not-exist error", err)
	}
}
