// Package doccheck compiles the Go blocks of Markdown pages, for the tests
// that keep the README and the docs pages from drifting from the API.
package doccheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// PinsText marks t as a check of text: a page's words or shape, its Go
// blocks against the API, the source snippets a list names. Under go test
// -short it skips t, so that a contributor's quick loop fails on behaviour
// only; CI runs the full command, and with it every text check.
func PinsText(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("checks text; -short skips the text checks, CI runs them")
	}
}

// goBlock matches a fenced Go code block of a Markdown page.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// GoBlocks returns a page's Go blocks with the line of the page each
// starts on (the first line after the fence). It fails t on a ```go fence
// it cannot read.
func GoBlocks(t testing.TB, page string) (blocks [][]byte, lines []int) {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range goBlock.FindAllSubmatchIndex(text, -1) {
		blocks = append(blocks, text[m[2]:m[3]])
		lines = append(lines, 1+bytes.Count(text[:m[2]], []byte("\n")))
	}
	if fences := bytes.Count(text, []byte("```go")); fences != len(blocks) {
		t.Fatalf("%s has %d ```go fences but %d Go blocks: a fence the test cannot read", page, fences, len(blocks))
	}
	return blocks, lines
}

// A compile error names a block by its source file and line, or by its
// package.
var (
	blockLine = regexp.MustCompile(`\S*docblock(\d+)\.go:(\d+)`)
	blockPkg  = regexp.MustCompile(`\S*internal/docblocks/b(\d+)\b`)
)

// Compile builds every Go block of the pages as a program of its own, in
// the module of the current directory, placed by a build overlay in a
// package directory that does not exist on disk. It fails t with each
// compile error reported at its page and line, and returns the number of
// blocks it built.
func Compile(t testing.TB, pages ...string) int {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs, of, where []string
	var starts []int
	for _, page := range pages {
		blocks, lines := GoBlocks(t, page)
		for i, b := range blocks {
			n := len(pkgs)
			src := filepath.Join(tmp, fmt.Sprintf("docblock%d.go", n))
			if err := os.WriteFile(src, b, 0o644); err != nil {
				t.Fatal(err)
			}
			dir := fmt.Sprintf("internal/docblocks/b%d", n)
			overlay["Replace"][filepath.Join(root, dir, "main.go")] = src
			pkgs = append(pkgs, "./"+dir)
			of = append(of, page)
			where = append(where, fmt.Sprintf("%s, Go block %d", page, i+1))
			starts = append(starts, lines[i])
		}
	}
	if len(pkgs) == 0 {
		return 0
	}
	spec, _ := json.Marshal(overlay)
	specPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "bin") + string(filepath.Separator)
	cmd := exec.Command("go", append([]string{"build", "-overlay", specPath, "-o", bin}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := blockLine.ReplaceAllStringFunc(filepath.ToSlash(string(out)), func(m string) string {
			sub := blockLine.FindStringSubmatch(m)
			n, _ := strconv.Atoi(sub[1])
			line, _ := strconv.Atoi(sub[2])
			return fmt.Sprintf("%s:%d", of[n], starts[n]+line-1)
		})
		msg = blockPkg.ReplaceAllStringFunc(msg, func(m string) string {
			n, _ := strconv.Atoi(blockPkg.FindStringSubmatch(m)[1])
			return where[n]
		})
		t.Fatalf("Go blocks of the docs do not compile (page:line; block N is the page's Nth ```go block):\n%s", msg)
	}
	return len(pkgs)
}
