package idem_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// goBlock matches a fenced Go code block of the README.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestREADMECompiles builds every Go block of README.md as a program
// of its own, placed by a build overlay in a package directory that does
// not exist on disk, so the README cannot drift from the API.
func TestREADMECompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d Go blocks in README.md, want at least 4", len(blocks))
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	for i, b := range blocks {
		src := filepath.Join(tmp, fmt.Sprintf("block%d.go", i))
		if err := os.WriteFile(src, b[1], 0o644); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("internal/readmeblocks/block%d", i)
		overlay["Replace"][filepath.Join(root, dir, "main.go")] = src
		pkgs = append(pkgs, "./"+dir)
	}
	spec, _ := json.Marshal(overlay)
	specPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "bin") + string(filepath.Separator)
	cmd := exec.Command("go", append([]string{"build", "-overlay", specPath, "-o", bin}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README Go blocks do not compile (block N is the N+1th ```go block):\n%s", out)
	}
}

// The quickstart in README.md is examples/quickstart/main.go, so that the
// commands beside it run exactly what the reader sees.
func TestREADMEQuickstartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 || string(blocks[0][1]) != string(example) {
		t.Fatal("README.md's first Go block is not examples/quickstart/main.go")
	}
}
