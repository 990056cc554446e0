package main

// Tests that run the idem binary as a child process: a crash at any
// instant, and a lock held by another process.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/filejournal"
)

// buildIdem builds the command into a temporary directory and returns the
// binary's path. The tests that call it run the command as a child
// process, to kill or interrupt it: -short skips them.
func buildIdem(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the command as a child process; -short skips the tests that do")
	}
	// go test puts the go command that runs it first on PATH.
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("finding the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "idem")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	out, err := exec.Command(gotool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building idem: %v\n%s", err, out)
	}
	return bin
}

// blockingServer holds the first request until the client goes away (or
// the test ends) and answers every later one with 201.
type blockingServer struct {
	*httptest.Server
	arrived chan struct{} // closed when the first request has arrived in full
	mu      sync.Mutex
	keys    []string
}

func newBlockingServer(t *testing.T) *blockingServer {
	s := &blockingServer{arrived: make(chan struct{})}
	done := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get(keyHeader))
		first := len(s.keys) == 1
		s.mu.Unlock()
		if first {
			close(s.arrived)
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	t.Cleanup(func() {
		close(done)
		s.Close()
	})
	return s
}

func (s *blockingServer) seenKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// startAndAwait starts cmd and returns once the server has the request.
func startAndAwait(t *testing.T, cmd *exec.Cmd, arrived <-chan struct{}) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the request did not arrive within a minute; stderr: %s", cmd.Stderr)
	}
}

func TestSendResumesAfterKill(t *testing.T) {
	bin := buildIdem(t)
	srv := newBlockingServer(t)
	path := filepath.Join(t.TempDir(), "cron.journal")
	args := []string{"send", "--journal", path, "--op", "nightly-2030-01-02", "-d", `{"amount":700}`, srv.URL + "/charges"}

	var stderr bytes.Buffer
	first := exec.Command(bin, args...)
	first.Stderr = &stderr
	startAndAwait(t, first, srv.arrived)
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err == nil || first.ProcessState.Success() {
		t.Fatalf("the first run was not killed: exit code %d, stderr %q", first.ProcessState.ExitCode(), stderr.String())
	}

	// The intent survived the kill, pending under the key that was sent.
	r := runCLI(t, "journal", "pending", "--json", path)
	var ops []operationJSON
	if err := json.Unmarshal([]byte(r.stdout), &ops); err != nil || len(ops) != 1 {
		t.Fatalf("journal pending after the kill: %q (%v)", r.stdout, err)
	}
	if sent := srv.seenKeys(); ops[0].Key != sent[0] {
		t.Fatalf("journal holds key %s, the server got %s", ops[0].Key, sent[0])
	}

	second := exec.Command(bin, args...)
	var stdout bytes.Buffer
	stderr.Reset()
	second.Stdout, second.Stderr = &stdout, &stderr
	if err := second.Run(); err != nil {
		t.Fatalf("second run: %v, stderr %q", err, stderr.String())
	}
	if stdout.String() != "charged" {
		t.Errorf("second run printed %q, want %q", stdout.String(), "charged")
	}
	keys := srv.seenKeys()
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] != ops[0].Key {
		t.Errorf("the server saw keys %q, want the journaled key %s twice", keys, ops[0].Key)
	}
}

func TestLockHeldByAnotherProcess(t *testing.T) {
	bin := buildIdem(t)
	path := filepath.Join(t.TempDir(), "held.journal")
	j, err := filejournal.Open(path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, args := range [][]string{
		{"journal", "compact", path},
		{"send", "--journal", path, "--op", "x", "http://127.0.0.1:1/"},
	} {
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitJournal || !strings.Contains(stderr.String(), "journal "+path+" is locked") {
			t.Errorf("%q: exit code %d, stderr %q; want %d and a lock message", args, code, stderr.String(), exitJournal)
		}
	}
}
