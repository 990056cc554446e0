//go:build unix

package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/lab/testkit/pgtest"
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

// SIGTERM during an attempt through a shared journal hands the
// operation's lease back before the command exits (F11.4): the row's
// lease is released, or the liveness it was taken under is gone from the
// database, so another machine resumes it at once, not after LeaseTTL.
func TestSendInterruptedHandsTheSharedLeaseBack(t *testing.T) {
	bin := buildIdem(t)
	srv := newBlockingServer(t)
	dsn := pgtest.NewDatabase(t)
	cmd := exec.Command(bin, "send", "--journal", dsn, "--op", "t-1", "-d", "{}", srv.URL+"/charges")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	startAndAwait(t, cmd, srv.arrived)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitUnknown {
		t.Fatalf("exit code %d, stderr %q; want %d", code, stderr.String(), exitUnknown)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var (
		key  string
		free bool
	)
	err = conn.QueryRow(ctx, `SELECT op_key, lease_until IS NULL
		OR NOT EXISTS (SELECT 1 FROM idem_lives AS l WHERE l.id = lease_life AND NOT l.dead)
		FROM idem_operations WHERE op_id = 't-1' AND state = 1`).Scan(&key, &free)
	if err != nil {
		t.Fatal(err)
	}
	if !free || key != srv.seenKeys()[0] {
		t.Fatalf("after SIGTERM the operation is pending under %s (the key sent: %s), its lease free: %v; want it free", key, srv.seenKeys()[0], free)
	}
}
