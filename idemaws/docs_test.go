package idemaws_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	// What the page's programs import and the tests do not, kept in go.mod.
	_ "github.com/aws/aws-sdk-go-v2/config"
)

// TestVendorSDKsPageCompiles builds every Go block of docs/vendor-sdks.md
// as a program of its own, placed by a build overlay in a package
// directory that does not exist on disk, so the page cannot drift from
// the API.
func TestVendorSDKsPageCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	page, err := os.ReadFile("../docs/vendor-sdks.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(page, -1)
	if len(blocks) == 0 {
		t.Fatal("found no Go block in docs/vendor-sdks.md")
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
		dir := fmt.Sprintf("internal/docblocks/block%d", i)
		overlay["Replace"][filepath.Join(root, dir, "main.go")] = src
		pkgs = append(pkgs, "./"+dir)
	}
	spec, _ := json.Marshal(overlay)
	specPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", specPath, "-o", filepath.Join(tmp, "bin") + string(filepath.Separator)}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/vendor-sdks.md's Go blocks do not compile (block N is the N+1th ```go block):\n%s", out)
	}
}
