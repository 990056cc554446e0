package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem/lab/testkit/doccheck"
)

// Every mutant still applies to the code as it is, and names tests that
// exist: a list that drifted from the code would check nothing.
func TestMutantsApply(t *testing.T) {
	doccheck.PinsText(t)
	root := filepath.Join("..", "..")
	names := map[string]bool{}
	for _, m := range mutants {
		if names[m.Name] {
			t.Errorf("two mutants are named %q", m.Name)
		}
		names[m.Name] = true
		if len(m.Edits) == 0 || len(m.Tests) == 0 || m.Rules == "" {
			t.Errorf("mutant %q lacks edits, tests or rules", m.Name)
		}
		applied := map[string][]byte{}
		for _, e := range m.Edits {
			src, ok := applied[e.File]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Fatalf("mutant %q: %v", m.Name, err)
				}
				src = b
			}
			if n := bytes.Count(src, []byte(e.Old)); n != 1 || e.Old == e.New {
				t.Errorf("mutant %q: %s holds its text %d times, want once, and a change", m.Name, e.File, n)
				continue
			}
			applied[e.File] = bytes.Replace(src, []byte(e.Old), []byte(e.New), 1)
		}
		tests := testsIn(t, filepath.Join(root, m.Pkg))
		for _, name := range m.Tests {
			if !tests[name] {
				t.Errorf("mutant %q: no test %s in %s", m.Name, name, m.Pkg)
			}
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)

// testsIn returns the names of the test functions in dir.
func testsIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
	}
	return names
}

// Every test the Guarantees table (docs/guarantees.md) names for a
// promise is one a mutant proves: the table claims nothing the check does
// not show.
func TestGuaranteesNameProvenTests(t *testing.T) {
	doccheck.PinsText(t)
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	proven := map[string]bool{}
	for _, m := range mutants {
		for _, name := range m.Tests {
			proven[name] = true
		}
	}
	start := bytes.Index(page, []byte("| Promise |"))
	if start < 0 {
		t.Fatal("docs/guarantees.md has no Guarantees table")
	}
	rows := 0
	for _, line := range strings.Split(string(page[start:]), "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows++
		cells := strings.Split(strings.Trim(line, "|"), "|")
		last := cells[len(cells)-1]
		named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(last, -1)
		if len(named) == 0 {
			t.Errorf("row %q names no test", cells[0])
		}
		ok := false
		for _, n := range named {
			ok = ok || proven[n[1]]
		}
		if !ok {
			t.Errorf("row %q: none of its tests is one a mutant proves", strings.TrimSpace(cells[0]))
		}
	}
	if rows == 0 {
		t.Fatal("the Guarantees table has no rows")
	}
}

// The report keeps what was written below its table: the notes on hand
// mutants and the generated mutants' figures, whatever their headings.
func TestWriteReportKeepsEverySectionBelowTheTable(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, filepath.FromSlash(reportFile))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	below := "## The liveness's hand mutants (F11)\n\nnotes\n\n## Generated mutants\n\nfigures\n"
	if err := os.WriteFile(path, []byte("# Mutants\n\nLast run: then.\n\n| mutant |\n|---|\n| old row |\n\n"+below), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(root, "abc1234", "| mutant |\n|---|\n| new row |\n"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), "| new row |\n\n"+below) || strings.Contains(string(got), "old row") || !strings.Contains(string(got), "on abc1234 (") {
		t.Errorf("the report is\n%s\nwant the new table, then every section below the old one as it was", got)
	}
}
