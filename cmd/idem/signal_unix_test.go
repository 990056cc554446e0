//go:build unix

package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// SIGTERM during an attempt ends the operation unknown: it stays pending,
// and the command says how to resume it.
func TestSendInterruptedIsUnknown(t *testing.T) {
	bin := buildIdem(t)
	srv := newBlockingServer(t)
	path := filepath.Join(t.TempDir(), "term.journal")
	cmd := exec.Command(bin, "send", "--journal", path, "--op", "t-1", "-d", "{}", srv.URL+"/charges")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	startAndAwait(t, cmd, srv.arrived)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitUnknown || stdout.Len() != 0 {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want %d", code, stdout.String(), stderr.String(), exitUnknown)
	}
	if !strings.Contains(stderr.String(), "rerun the same command to resume it under the same key") {
		t.Errorf("stderr %q does not say how to resume", stderr.String())
	}
	if r := runCLI(t, "journal", "pending", path); !strings.Contains(r.stdout, srv.seenKeys()[0]) {
		t.Errorf("journal pending: %q, want the key sent", r.stdout)
	}
}
