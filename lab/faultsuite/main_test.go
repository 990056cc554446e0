package faultsuite

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"go.uber.org/goleak"
)

// binDir holds the binaries the tests build, for the life of the test
// binary.
var binDir string

// TestMain runs the batch client when the test binary is re-executed as a
// child (see batchChildEnv), and otherwise the tests, failing the package
// if any of them leaves a goroutine behind.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(batchChildEnv); cfg != "" {
		os.Exit(runBatchChild(cfg))
	}
	dir, err := os.MkdirTemp("", "faultsuite-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	goleak.VerifyTestMain(withPostgres{m}, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// withPostgres runs the tests with a PostgreSQL server to share
// (pgtest.NewDatabase), stopped once they are done.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

var server, plainServer struct {
	once sync.Once
	path string
	err  error
}

// serverBinary returns the reference server's binary, building it the
// first time.
func serverBinary(t *testing.T) string {
	t.Helper()
	skipScenario(t)
	server.once.Do(func() { server.path, server.err = BuildServer(binDir, raceEnabled) })
	if server.err != nil {
		t.Fatal(server.err)
	}
	return server.path
}

// plainServerBinary returns the reference server's binary built without
// the race detector, building it the first time: a server that stands for
// a remote API, whose latency, not its CPU, should bound a batch.
func plainServerBinary(t *testing.T) string {
	t.Helper()
	skipScenario(t)
	plainServer.once.Do(func() {
		dir := filepath.Join(binDir, "plain")
		if plainServer.err = os.MkdirAll(dir, 0o755); plainServer.err == nil {
			plainServer.path, plainServer.err = BuildServer(dir, false)
		}
	})
	if plainServer.err != nil {
		t.Fatal(plainServer.err)
	}
	return plainServer.path
}
