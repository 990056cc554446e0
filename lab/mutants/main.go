// Command mutants checks that the tests the Guarantees table
// (docs/guarantees.md) names catch what they claim to: it breaks each promise on purpose, one at a
// time, in a copy of the module, and runs the tests named for it, which
// must fail. Run it before a release, and whenever the journal, the retry
// rule or the fault suite moves:
//
//	go run ./lab/mutants              # every mutant; prints a table
//	go run ./lab/mutants -run KeyTTL  # the mutants whose name matches
//	go run ./lab/mutants -write       # and records it in MUTANTS.md beside this tool
//
// The list is mutants.go. Before the mutants, each test is run once on the
// unbroken copy: a test that fails there would catch every mutant and
// prove nothing, so the check stops. A mutant that does not build is a
// mistake in the list, reported as such. The sizes of the fault suite are
// its defaults unless the environment sets them.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

func main() {
	run := flag.String("run", "", "only the mutants whose name matches this `regexp`")
	write := flag.Bool("write", false, "write the results to MUTANTS.md beside this tool")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on each test run")
	flag.Parse()
	if err := check(*run, *write, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

// result is what became of one mutant.
type result struct {
	m       mutant
	verdict string // "caught", "SURVIVED" or "does not build"
	took    time.Duration
	note    string // the first failing test's line, or why it survived
}

func check(pattern string, write bool, timeout time.Duration) error {
	sel, err := regexp.Compile(pattern)
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	copyDir, err := os.MkdirTemp("", "idem-mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(copyDir)
	state := treeState(root) // what is copied: the report names it, not what HEAD is by its end
	if err := copyModule(root, copyDir); err != nil {
		return err
	}
	var chosen []mutant
	for _, m := range mutants {
		if sel.MatchString(m.Name) {
			chosen = append(chosen, m)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("no mutant matches %q", pattern)
	}

	// The tests must pass on the unbroken code first.
	baseline := map[string]bool{}
	for _, m := range chosen {
		key := m.Pkg + " " + strings.Join(m.Tests, "|")
		if baseline[key] {
			continue
		}
		baseline[key] = true
		fmt.Printf("baseline: %s %s ... ", m.Pkg, strings.Join(m.Tests, " "))
		out, err := goTest(copyDir, m, timeout)
		if err != nil {
			return fmt.Errorf("the tests fail without a mutant, so they prove nothing:\n%s", tail(out, 30))
		}
		fmt.Println("pass")
	}

	var results []result
	for _, m := range chosen {
		fmt.Printf("%s ... ", m.Name)
		r, err := try(copyDir, m, timeout)
		if err != nil {
			return err
		}
		fmt.Printf("%s (%s) %s\n", r.verdict, r.took.Round(time.Second), r.note)
		results = append(results, r)
	}
	table := render(results)
	fmt.Print("\n" + table)
	if write {
		if err := writeReport(root, state, table); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.verdict != "caught" {
			return fmt.Errorf("%d of %d mutants were not caught", countNot(results), len(results))
		}
	}
	return nil
}

// try applies m in the copy, runs its tests, and puts the files back.
func try(dir string, m mutant, timeout time.Duration) (result, error) {
	originals := map[string][]byte{}
	defer func() {
		for path, b := range originals {
			os.WriteFile(path, b, 0o644)
		}
	}()
	for _, e := range m.Edits {
		path := filepath.Join(dir, e.File)
		cur, err := os.ReadFile(path)
		if err != nil {
			return result{}, err
		}
		if _, ok := originals[path]; !ok {
			originals[path] = cur
		}
		if n := bytes.Count(cur, []byte(e.Old)); n != 1 {
			return result{}, fmt.Errorf("mutant %q: %s holds its text %d times, want once", m.Name, e.File, n)
		}
		if err := os.WriteFile(path, bytes.Replace(cur, []byte(e.Old), []byte(e.New), 1), 0o644); err != nil {
			return result{}, err
		}
	}
	start := time.Now()
	out, err := goTest(dir, m, timeout)
	r := result{m: m, took: time.Since(start)}
	var passed []string
	for _, name := range m.Tests {
		if !strings.Contains(out, "--- FAIL: "+name+" ") {
			passed = append(passed, name)
		}
	}
	switch {
	case err != nil && !strings.Contains(out, "--- FAIL") && (strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]")):
		r.verdict, r.note = "does not build", firstLine(out, "")
	case len(passed) > 0:
		r.verdict, r.note = "SURVIVED", "passed: "+strings.Join(passed, ", ")
	default:
		r.verdict, r.note = "caught", firstLine(out, "--- FAIL")
	}
	return r, nil
}

// goTest runs m's tests in dir and returns their output; the error is the
// go command's exit status.
func goTest(dir string, m mutant, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	run := "^(" + strings.Join(m.Tests, "|") + ")$"
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", timeout.String(), "-run", run, m.Pkg)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// moduleRoot returns the repository's root, the directory of go.work,
// which ties its modules together (the mutants edit several).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", err
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		return "", errors.New("not inside the repository's workspace (go.work): run it from the repository")
	}
	return filepath.Dir(gowork), nil
}

// copyModule copies the files git knows of (tracked, or untracked and not
// ignored) from root to dst.
func copyModule(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-co", "--exclude-standard", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the module's files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := copyFile(src, filepath.Join(dst, name), fi.Mode()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// render returns the results as a Markdown table.
func render(results []result) string {
	var b strings.Builder
	b.WriteString("| mutant | rules | tests that must fail | result | time |\n|---|---|---|---|---|\n")
	for _, r := range results {
		tests := "`" + strings.Join(r.m.Tests, "`, `") + "`"
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.m.Name, r.m.Rules, tests, r.verdict, r.took.Round(time.Second))
	}
	return b.String()
}

// treeState names the tree at root: its commit, and whether it has
// uncommitted changes.
func treeState(root string) string {
	rev, _ := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	dirty, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	state := strings.TrimSpace(string(rev))
	if len(bytes.TrimSpace(dirty)) > 0 {
		state += " with uncommitted changes"
	}
	return state
}

// writeReport writes MUTANTS.md: how to run the check, when it last ran
// (the tree state names, copied when the run began), and table, followed
// by every section the file had below its table as it was, the notes on
// hand mutants and gremlins.sh's figures alike.
func writeReport(root, state, table string) error {
	var b strings.Builder
	b.WriteString("# Mutants\n\n")
	b.WriteString("Each row breaks one promise of the Guarantees table\n")
	b.WriteString("([docs/guarantees.md](../../docs/guarantees.md)) on purpose, in a copy of the\n")
	b.WriteString("module, and runs the tests named for it: every one must fail. The\n")
	b.WriteString("breakages are listed in `lab/mutants/mutants.go`. Run the check\n")
	b.WriteString("before a release, and whenever the journal, the retry rule or the fault\n")
	b.WriteString("suite moves:\n\n```sh\ngo run ./lab/mutants -write\n```\n\n")
	fmt.Fprintf(&b, "Last run: %s, on %s (%s, %s/%s, %d CPUs).\n\n", time.Now().UTC().Format("2006-01-02"), state,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	b.WriteString(table)
	path := filepath.Join(root, filepath.FromSlash(reportFile))
	if old, err := os.ReadFile(path); err == nil {
		if i := bytes.Index(old, []byte("\n## ")); i >= 0 {
			b.WriteString("\n")
			b.Write(old[i+1:])
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// reportFile is where writeReport writes, relative to the repository's
// root: beside this tool's source.
const reportFile = "lab/mutants/MUTANTS.md"

func countNot(results []result) int {
	n := 0
	for _, r := range results {
		if r.verdict != "caught" {
			n++
		}
	}
	return n
}

// firstLine returns the first line of out that contains sub.
func firstLine(out, sub string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, sub) && strings.TrimSpace(l) != "" {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
