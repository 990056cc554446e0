package docs_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/lab/testkit/doccheck"
)

// TestMain runs the tests from the repository's root, where the pages
// are: the paths below are the repository's.
func TestMain(m *testing.M) {
	if err := os.Chdir(filepath.Join("..", "..")); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// compiledElsewhere lists the docs pages whose Go blocks need the
// dependencies of another module, and so are compiled by a test of that
// module.
var compiledElsewhere = map[string]string{
	"docs/vendor-sdks.md": "idemaws's TestVendorSDKsPageCompiles",
	"docs/frameworks.md":  "examples/stacks's TestFrameworksPageCompiles",
}

// docPages returns README.md and every docs/*.md page, in that order.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		pages[i] = filepath.ToSlash(p)
	}
	return append([]string{"README.md"}, pages...)
}

// goBlocks returns a page's Go blocks with the line each starts on.
func goBlocks(t *testing.T, page string) ([][]byte, []int) { return doccheck.GoBlocks(t, page) }

// TestDocsCompile builds every Go block of README.md and of the docs
// pages as a program of its own, placed by a build overlay in a package
// directory that does not exist on disk, so the docs cannot drift from
// the API. A compile error is reported at its page and line.
func TestDocsCompile(t *testing.T) {
	doccheck.PinsText(t)
	var pages []string
	for _, page := range docPages(t) {
		if _, ok := compiledElsewhere[page]; !ok {
			pages = append(pages, page)
		}
	}
	if blocks, _ := goBlocks(t, "README.md"); len(blocks) == 0 {
		t.Fatal("found no Go block in README.md: its quickstart is one")
	}
	doccheck.Compile(t, pages...)
}

// The quickstart in README.md is examples/quickstart/main.go, so that the
// commands beside it run exactly what the reader sees.
func TestREADMEQuickstartIsTheExample(t *testing.T) {
	doccheck.PinsText(t)
	blocks, _ := goBlocks(t, "README.md")
	example, err := os.ReadFile(filepath.Join("examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 || string(blocks[0]) != string(example) {
		t.Fatal("README.md's first Go block is not examples/quickstart/main.go")
	}
}

// The README states the test command that .ci/run runs, and so does
// CONTRIBUTING.md: a reader runs what CI runs.
func TestREADMETestCommandIsCI(t *testing.T) {
	doccheck.PinsText(t)
	ci, err := os.ReadFile(filepath.Join(".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for _, line := range strings.Split(string(ci), "\n") {
		if strings.HasPrefix(line, "go test ") {
			command = line
		}
	}
	if command == "" {
		t.Fatal(".ci/run runs no go test command")
	}
	for _, page := range []string{"README.md", "CONTRIBUTING.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(text, []byte(command)) {
			t.Errorf("%s does not give .ci/run's test command %q", page, command)
		}
		// The README's is a line of its own, nothing after it, so that it
		// can be copied as it stands.
		if page == "README.md" && !slices.Contains(strings.Split(string(text), "\n"), command) {
			t.Errorf("README.md does not give .ci/run's test command %q on a line of its own", command)
		}
	}
}

// promiseCells returns the first cell of each row of the table under
// "| Promise |" in text.
func promiseCells(t *testing.T, text []byte) []string {
	t.Helper()
	start := bytes.Index(text, []byte("| Promise |"))
	if start < 0 {
		t.Fatal("docs/guarantees.md has no Guarantees table")
	}
	var cells []string
	for _, line := range strings.Split(string(text[start:]), "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells = append(cells, strings.TrimSpace(strings.Split(strings.Trim(line, "|"), "|")[0]))
	}
	return cells
}

// The README lists the promises of docs/guarantees.md's table, in its
// order and in its words: the short list cannot promise what the table
// does not test.
func TestREADMEGuaranteesAreTheTable(t *testing.T) {
	doccheck.PinsText(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(filepath.Join("docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := promiseCells(t, full)
	if len(want) == 0 {
		t.Fatal("docs/guarantees.md's table has no rows")
	}
	section := readme[bytes.Index(readme, []byte("\n## Guarantees\n"))+1:]
	if end := bytes.Index(section[1:], []byte("\n## ")); end >= 0 {
		section = section[:end+1]
	}
	var got []string
	for _, line := range strings.Split(string(section), "\n") {
		if p, ok := strings.CutPrefix(line, "- "); ok {
			got = append(got, p)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README.md's Guarantees list is not docs/guarantees.md's promises:\nREADME:\n%s\n\ntable:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// mdLink matches a Markdown link's target; autolinks and images are
// links too.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors returns the GitHub anchors of a Markdown page's headings.
func anchors(text []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Every link between the repository's Markdown pages reaches a file that
// exists and, when it names one, a heading of that page; and the README
// links every docs page.
func TestDocsLinksResolve(t *testing.T) {
	doccheck.PinsText(t)
	pages := docPages(t)
	top, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range top {
		if p != "README.md" {
			pages = append(pages, p)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(page, "docs/") && !bytes.Contains(readme, []byte("]("+page+")")) {
			t.Errorf("README.md does not link %s", page)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
			}
			target2, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links %s: %v", page, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(target2)[anchor] {
				t.Errorf("%s links %s: %s has no heading with that anchor", page, target, path)
			}
		}
	}
}

// TestREADMEIsAFirstScreenAndAContents keeps the README what a newcomer
// reads in five minutes: at most 300 lines, the install line in its first
// screen; the rest belongs in docs/.
func TestREADMEIsAFirstScreenAndAContents(t *testing.T) {
	doccheck.PinsText(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(readme), "\n")
	if len(lines) > 301 {
		t.Errorf("README.md has %d lines, want at most 300: move a subject to docs/", len(lines)-1)
	}
	first := strings.Join(lines[:min(len(lines), 40)], "\n")
	if !strings.Contains(first, "go get github.com/idemkit/idem") {
		t.Error("README.md's first 40 lines do not say how to install: go get github.com/idemkit/idem")
	}
}

// The root package's godoc stays what a user reads through: every rule
// stated once, the rest pointing to it. Config, the first thing a user
// looks up, fits on two screens.
func TestGodocFitsItsLength(t *testing.T) {
	doccheck.PinsText(t)
	for _, tc := range []struct {
		args []string
		max  int
	}{
		{[]string{"doc", "-all", "."}, 600},
		{[]string{"doc", ".", "Config"}, 100},
	} {
		out, err := exec.Command("go", tc.args...).Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(tc.args, " "), err)
		}
		if n := bytes.Count(out, []byte("\n")); n > tc.max {
			t.Errorf("go %s prints %d lines, more than %d: state a rule once, where it is enforced, and point to it", strings.Join(tc.args, " "), n, tc.max)
		}
	}
}

// A package's godoc speaks to its users: the rule IDs (C7.2, J4) and the
// source file names that DESIGN.md and the tests use stay out of it.
func TestGodocCitesNoRuleIDsOrFiles(t *testing.T) {
	doccheck.PinsText(t)
	ruleID := regexp.MustCompile(`\b[CJFDSLVM][0-9]{1,2}(\.[0-9]+)?\b|\b[a-z_]+\.go\b`)
	for _, pkg := range []string{
		".", "./journal", "./filejournal", "./journaltest", "./pgjournal",
		"./idemserver", "./idemserver/postgres", "./idemserver/mysql", "./idemserver/sqlite",
		"./idemotel", "./idemaws", "./idemgin", "./idemecho", "./testserver",
	} {
		out, err := exec.Command("go", "doc", "-all", pkg).Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", pkg, err)
		}
		for i, line := range strings.Split(string(out), "\n") {
			if m := ruleID.FindString(line); m != "" {
				t.Errorf("go doc -all %s, line %d, cites %q: %s", pkg, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// The root package exports what a caller uses and no more: at most
// maxRootNames top-level names (each constant, variable, function and
// type; not methods or fields). What a journal author needs is in
// package journal.
func TestRootExportsFewNames(t *testing.T) {
	doccheck.PinsText(t)
	const maxRootNames = 70
	names := rootExportedNames(t)
	t.Logf("the root exports %d top-level names", len(names))
	if len(names) > maxRootNames {
		t.Errorf("the root exports %d top-level names, more than %d: %s", len(names), maxRootNames, strings.Join(names, " "))
	}
}

// rootExportedNames returns the root package's exported top-level names,
// sorted.
func rootExportedNames(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}
