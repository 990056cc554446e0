package faultsuite

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// ServerPackage is the import path of the reference server's binary.
const ServerPackage = "github.com/idemkit/idem/testserver/cmd/idem-testserver"

// BuildServer builds the reference server's binary into dir with the go
// command, with the race detector when race is set, and returns its path.
//
// Building it the way the test binary was built lets the go command reuse
// the packages it compiled for the tests (SQLite above all, which takes
// minutes to compile from a cold cache), so that only the link is left.
func BuildServer(dir string, race bool) (string, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("faultsuite: building the server needs the go command: %w", err)
	}
	out := filepath.Join(dir, "idem-testserver")
	// No version control stamp: the server needs none, and it would run
	// git on every build.
	args := []string{"build", "-buildvcs=false", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command(gocmd, append(args, ServerPackage)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("faultsuite: go build %s: %w\n%s", ServerPackage, err, b)
	}
	return out, nil
}
