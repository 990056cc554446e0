package faultsuite

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// ServerPackage is the import path of the reference server's binary.
const ServerPackage = "github.com/idemkit/idem/testserver/cmd/idem-testserver"

// BuildServer builds the reference server's binary into dir with the go
// command and returns its path. It is built without the race detector
// whatever the test binary has: the server is what the client is tested
// against, not what is tested here (its own tests run under -race), and
// SQLite under the race detector would slow every scenario several times
// over.
func BuildServer(dir string) (string, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("faultsuite: building the server needs the go command: %w", err)
	}
	out := filepath.Join(dir, "idem-testserver")
	cmd := exec.Command(gocmd, "build", "-o", out, ServerPackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("faultsuite: go build %s: %w\n%s", ServerPackage, err, b)
	}
	return out, nil
}
