package idem_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTheRootPullsNoVendorSDK checks that a program importing the root
// package compiles no vendor SDK, and that the root module does not even
// require one: the AWS integration is a module of its own (idemaws).
func TestTheRootPullsNoVendorSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, vendor := range []string{"github.com/aws/", "github.com/stripe/"} {
		if strings.Contains(string(out), vendor) || strings.Contains(string(mod), vendor) {
			t.Errorf("the root package or go.mod names %s", vendor)
		}
	}
}

// TestIdemserverLinksOnlyTheDatabaseItUses checks that the server library
// links no database driver, and that each database package links its own
// driver and not the others': a service on PostgreSQL through pgx compiles
// no SQLite and no MySQL driver, one on SQLite no pgx, one on MySQL neither.
func TestIdemserverLinksOnlyTheDatabaseItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	for _, c := range []struct {
		pkg          string
		want, refuse []string
	}{
		{"./idemserver", nil, []string{"modernc.org/", "github.com/jackc/pgx", "github.com/go-sql-driver/"}},
		{"./idemserver/postgres", []string{"github.com/jackc/pgx/v5/pgxpool"}, []string{"modernc.org/", "github.com/go-sql-driver/"}},
		{"./idemserver/sqlite", []string{"modernc.org/sqlite"}, []string{"github.com/jackc/pgx", "github.com/go-sql-driver/"}},
		{"./idemserver/mysql", []string{"github.com/go-sql-driver/mysql"}, []string{"modernc.org/", "github.com/jackc/pgx"}},
	} {
		out, err := exec.Command("go", "list", "-deps", c.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := strings.Fields(string(out))
		for _, w := range c.want {
			if !slices.Contains(deps, w) {
				t.Errorf("%s does not link %s", c.pkg, w)
			}
		}
		for _, d := range deps {
			for _, r := range c.refuse {
				if strings.HasPrefix(d, r) {
					t.Errorf("%s links %s", c.pkg, d)
				}
			}
		}
	}
}

// testHelpers are the packages that exist for the tests, and the only
// ones that may link the testing package.
var testHelpers = map[string]bool{
	"github.com/idemkit/idem/journaltest":           true,
	"github.com/idemkit/idem/internal/journalhelp":  true,
	"github.com/idemkit/idem/internal/leakcheck":    true,
	"github.com/idemkit/idem/lab/testkit/doccheck":  true,
	"github.com/idemkit/idem/lab/testkit/pgtest":    true,
	"github.com/idemkit/idem/lab/testkit/mysqltest": true,
}

// TestNoBinaryLinksTesting checks that no command of the repository links
// the testing package, and no package a program may import either, since
// it would link testing into that program: only the test helpers may.
func TestNoBinaryLinksTesting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	const format = "{{.ImportPath}}\t{{.DepOnly}}\t{{.Name}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}"
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", format}, modulePatterns(t)...)...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		path          string
		matched, main bool
		deps          []string
	}
	var pkgs []pkg
	importsTesting := map[string]bool{} // the packages that import testing themselves
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 5 {
			t.Fatalf("go list: line %q has %d fields, want 5", line, len(f))
		}
		if slices.Contains(strings.Fields(f[3]), "testing") {
			importsTesting[f[0]] = true
		}
		pkgs = append(pkgs, pkg{path: f[0], matched: f[1] == "false", main: f[2] == "main", deps: strings.Fields(f[4])})
	}
	commands := map[string]bool{}
	for _, p := range pkgs {
		if !p.matched || testHelpers[p.path] {
			continue
		}
		if p.main {
			commands[p.path] = true
		}
		if !slices.Contains(p.deps, "testing") {
			continue
		}
		var via []string
		for _, d := range append(p.deps, p.path) {
			if importsTesting[d] {
				via = append(via, d)
			}
		}
		t.Errorf("%s links testing (imported by %s)", p.path, strings.Join(via, ", "))
	}
	// The check must reach the commands that ship.
	for _, c := range []string{"cmd/idem", "cmd/idem-bench", "testserver/cmd/idem-testserver"} {
		if !commands["github.com/idemkit/idem/"+c] {
			t.Errorf("go list did not report the command %s", c)
		}
	}
}

// layers are the repository's packages from the bottom up, as DESIGN.md
// draws them: a package imports only packages of lower layers, except that
// the proof machinery and the commands and examples may import their own
// layer. A path ending in "/" names every package under it.
var layers = []layer{
	{"shared leaves", []string{"internal/journalkit", "internal/fsutil", "internal/sqlkit"}, false},
	{"file journal engine, SQL drivers, secrets rule", []string{"internal/fileengine", "idemserver/internal/pgkit", "idemserver/internal/sqlitekit", "idemserver/internal/mysqlkit", "internal/redact"}, false},
	{"journal contract", []string{"journal"}, false},
	{"client and server library", []string{"", "idemserver"}, false},
	{"journals, server databases", []string{"filejournal", "pgjournal", "idemserver/postgres", "idemserver/sqlite", "idemserver/mysql"}, false},
	{"adapters and reference server", []string{"idemotel", "idemaws", "idemgin", "idemecho", "testserver", "testserver/chaos"}, false},
	{"proof machinery", []string{"journaltest", "internal/journalhelp", "internal/leakcheck", "internal/filefaults", "lab/",
		"cmd/internal/loadbench", "cmd/idem-bench"}, true},
	{"commands and examples", []string{"cmd/idem", "testserver/cmd/idem-testserver", "examples/", "idemaws/internal/gentokens"}, true}, // an example may import its own packages
}

// layer is one layer of the import graph.
type layer struct {
	name  string
	pkgs  []string
	peers bool // its packages may import one another
}

// modulePatterns returns a pattern for the packages of each module of
// the workspace (go.work), "./..." for the root's: the checks below span
// every module, so that one added to go.work is never left out.
func modulePatterns(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("module directory %s is outside the repository", dir)
		}
		patterns = append(patterns, "./"+filepath.ToSlash(filepath.Join(rel, "...")))
	}
	if len(patterns) < 2 {
		t.Fatalf("go list -m reported %d modules: run it in the repository's workspace (go.work)", len(patterns))
	}
	return patterns
}

// layerOf returns the index in layers of the package at path, or -1.
func layerOf(path string) int {
	rel, ok := strings.CutPrefix(path, "github.com/idemkit/idem")
	if !ok {
		return -1
	}
	rel = strings.TrimPrefix(rel, "/")
	for i, l := range layers {
		for _, p := range l.pkgs {
			if rel == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)) {
				return i
			}
		}
	}
	return -1
}

// TestImportsRunDownTheLayers checks the direction of every import between
// the repository's packages: the engine below the client, the journal
// contract below the client, the journals above it and beside each other
// (neither imports the other, and neither links the client), the proof
// machinery above the product, and no package of the product (every layer
// but the proof machinery) linking any package of the proof machinery.
// Tests may import what they like; only the packages' own imports count.
func TestImportsRunDownTheLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	const format = "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}"
	out, err := exec.Command("go", append([]string{"list", "-f", format}, modulePatterns(t)...)...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	proof := slices.IndexFunc(layers, func(l layer) bool { return l.name == "proof machinery" })
	seen := map[string]bool{}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			t.Fatalf("go list: line %q has %d fields, want 3", line, len(f))
		}
		from := layerOf(f[0])
		if from < 0 {
			t.Errorf("%s is in no layer: add it to layers and to DESIGN.md's drawing", f[0])
			continue
		}
		seen[f[0]] = true
		for _, imp := range strings.Fields(f[1]) {
			to := layerOf(imp)
			switch {
			case to < 0:
				continue // not the repository's
			case to > from:
				t.Errorf("%s (%s) imports %s, a layer above it (%s)", f[0], layers[from].name, imp, layers[to].name)
			case to == from && !layers[from].peers:
				t.Errorf("%s imports %s, beside it in the layer %s", f[0], imp, layers[from].name)
			}
		}
		if rel := strings.TrimPrefix(f[0], "github.com/idemkit/idem/"); rel == "filejournal" || rel == "pgjournal" || rel == "journal" {
			if slices.Contains(strings.Fields(f[2]), "github.com/idemkit/idem") {
				t.Errorf("%s links the client (package idem): a journal needs only package journal", f[0])
			}
		}
		if from == proof {
			continue
		}
		for _, dep := range strings.Fields(f[2]) {
			if layerOf(dep) == proof {
				t.Errorf("%s, a package of the product, links %s, proof machinery", f[0], dep)
			}
		}
	}
	// The check must reach a package of every layer.
	for _, want := range []string{"internal/journalkit", "internal/fileengine", "internal/redact", "journal", "", "filejournal", "pgjournal", "idemaws", "internal/filefaults", "lab/faultsuite", "cmd/idem"} {
		if !seen[strings.TrimSuffix("github.com/idemkit/idem/"+want, "/")] {
			t.Errorf("go list did not report %q", want)
		}
	}
}
