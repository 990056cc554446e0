package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestDemoRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--ops", "0"}, "--ops must be at least 1, not 0"},
		{[]string{"--ops", "-5"}, "--ops must be at least 1, not -5"},
		{[]string{"--ops", "many"}, `invalid value "many" for flag -ops: parse error`},
		{[]string{"--faults", "1"}, "--faults must be at least 0 and below 1, not 1"},
		{[]string{"--faults", "1.5"}, "--faults must be at least 0 and below 1, not 1.5"},
		{[]string{"--faults", "-0.1"}, "--faults must be at least 0 and below 1, not -0.1"},
		{[]string{"--faults", "NaN"}, "--faults must be at least 0 and below 1, not NaN"},
		{[]string{"--seed", "x"}, `invalid value "x" for flag -seed: parse error`},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	} {
		r := runCLI(t, append([]string{"demo"}, tc.args...)...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("idem demo %q: exit code %d, stdout %q; want %d and nothing", tc.args, r.code, r.stdout, exitUsage)
		}
		if want := "idem demo: " + tc.want + "\nRun 'idem demo -h' for usage.\n"; r.stderr != want {
			t.Errorf("idem demo %q: stderr %q, want %q", tc.args, r.stderr, want)
		}
	}
}

func TestDemoHelp(t *testing.T) {
	r := runCLI(t, "demo", "-h")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	for _, w := range []string{"Usage: idem demo", "-ops", "-faults", "-seed", "-keep", "-no-progress", "SIGKILL", "go-retryablehttp"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("help lacks %q:\n%s", w, r.stdout)
		}
	}
}

// The demo end to end, as a user runs it, at a small size: the batch
// process is really killed and restarted, and every number the table
// shows from the server's database is read again here from the kept files.
func TestDemoEndToEnd(t *testing.T) {
	bin := buildIdem(t)
	const ops, seed = 60, 7

	t.Run("kept", func(t *testing.T) {
		tmp := t.TempDir()
		out := runDemoBinary(t, bin, tmp, "demo", "--ops", fmt.Sprint(ops), "--faults", "0.3", "--seed", fmt.Sprint(seed), "--no-progress", "--keep")

		if want := fmt.Sprintf("  round 1: killed the batch process (SIGKILL) at %d/%d done — resuming from the journal\n", demoKillPoint(ops, seed), ops); !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
		m := regexp.MustCompile(`kept the demo's files in (\S+):`).FindStringSubmatch(out)
		if m == nil || filepath.Dir(m[1]) != tmp {
			t.Fatalf("the output does not say where the files were kept, in %s:\n%s", tmp, out)
		}
		dir := m[1]
		table := parseDemoTable(t, out)
		idemCol, plainCol := table.column(0), table.column(1)

		// What the batch did.
		for label, want := range map[string]string{rowOperations: "60", rowProcesses: "2"} {
			if idemCol[label] != want {
				t.Errorf("idem %s: %s, want %s", label, idemCol[label], want)
			}
		}
		if plainCol[rowOperations] != "60" || plainCol[rowProcesses] != "1" {
			t.Errorf("plain: operations %s, processes %s; want 60 and 1", plainCol[rowOperations], plainCol[rowProcesses])
		}
		idemSection, plainSection, _ := strings.Cut(out, "\n2. plain retries")
		if got, want := strings.Count(idemSection, "\n  round "), idemCol[rowRounds]; strconv.Itoa(got) != want {
			t.Errorf("the idem story tells %d rounds, the table %s", got, want)
		}
		if got, want := strings.Count(plainSection, "\n  round "), plainCol[rowRounds]; strconv.Itoa(got) != want {
			t.Errorf("the plain story tells %d rounds, the table %s", got, want)
		}

		// The server's databases, read again.
		idemDB := readDemoDB(t, filepath.Join(dir, demoIdemDB))
		plainDB := readDemoDB(t, filepath.Join(dir, demoPlainDB))
		for _, c := range []struct {
			name  string
			col   map[string]string
			db    demoDB
			dupes int64
		}{
			{"idem", idemCol, idemDB, 0},
			{"plain retries", plainCol, plainDB, plainDB.charges - ops},
		} {
			for label, want := range map[string]string{
				rowKeys:        fmt.Sprint(c.db.keys),
				rowCharges:     fmt.Sprint(c.db.charges),
				rowDuplicates:  fmt.Sprint(c.db.charges - c.db.references),
				rowLost:        fmt.Sprint(ops - c.db.references),
				rowCaptures:    fmt.Sprint(c.db.captures),
				rowOvercharged: dollars(c.db.overcharged),
			} {
				if c.col[label] != want {
					t.Errorf("%s, %s: the table says %s, the database %s", c.name, label, c.col[label], want)
				}
			}
			if c.db.references != ops || c.db.charges-c.db.references != c.dupes || c.db.captures != c.db.charges {
				t.Errorf("%s: %d charges for %d of %d invoices, %d captures; want every invoice charged, %d duplicates, a capture per charge",
					c.name, c.db.charges, c.db.references, ops, c.db.captures, c.dupes)
			}
		}
		if idemDB.charges != ops || idemDB.keys != ops {
			t.Errorf("idem: %d charges under %d keys, want %d and %d", idemDB.charges, idemDB.keys, ops, ops)
		}
		// At 30% faults, most of them after the server committed, plain
		// retries charge some invoice twice: the chance that none of 60
		// invoices meets one of those faults is below 1e-4.
		if plainDB.charges <= ops {
			t.Errorf("plain retries: %d charges for %d invoices, want duplicates", plainDB.charges, ops)
		}

		// The idem client sent one key per invoice, across the kill: the
		// keys the server stored are exactly the journal's.
		jkeys := journalKeys(t, filepath.Join(dir, demoJournalFile), ops)
		if !slices.Equal(jkeys, idemDB.keyList) {
			t.Errorf("the journal's keys differ from the server's:\njournal %q\nserver  %q", jkeys, idemDB.keyList)
		}

		for _, w := range []string{
			"idem: every invoice charged exactly once: 0 duplicates, 0 lost, 60 gateway captures for 60 charges.\n",
			fmt.Sprintf("plain retries: %d duplicate charges (%s overcharged), 0 invoices never charged.\n", plainDB.charges-ops, dollars(plainDB.overcharged)),
		} {
			if !strings.Contains(out, w) {
				t.Errorf("no %q in the output:\n%s", w, out)
			}
		}
	})

	t.Run("removes its files", func(t *testing.T) {
		tmp := t.TempDir()
		out := runDemoBinary(t, bin, tmp, "demo", "--ops", "10", "--faults", "0.2", "--no-progress")
		if strings.Contains(out, "kept the demo's files") {
			t.Errorf("without --keep the demo says it kept its files:\n%s", out)
		}
		if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
			t.Errorf("the demo left %v in its temporary folder (%v)", left, err)
		}
	})
}

// runDemoBinary runs the built binary with TMPDIR set to tmp, requires
// exit code 0 and an empty stderr (no progress bar), and returns stdout.
func runDemoBinary(t *testing.T, bin, tmp string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("idem %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("idem %q wrote to stderr:\n%s", args, stderr.String())
	}
	return stdout.String()
}

// demoTable is the demo's closing table: label to the values of its two
// columns.
type demoTable map[string][2]string

func (tb demoTable) column(i int) map[string]string {
	col := map[string]string{}
	for label, v := range tb {
		col[label] = v[i]
	}
	return col
}

// parseDemoTable finds the rows of the closing table in out; it fails
// the test if one is missing.
func parseDemoTable(t *testing.T, out string) demoTable {
	t.Helper()
	tb := demoTable{}
	for _, label := range []string{
		rowOperations, rowRounds, rowProcesses, rowAttempts, rowConflicts, rowCutOff, rowReplays,
		rowKeys, rowCharges, rowDuplicates, rowLost, rowCaptures, rowOvercharged,
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + ` +(\S+) +(\S+)$`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no row %q in the table:\n%s", label, out)
		}
		tb[label] = [2]string{m[1], m[2]}
	}
	return tb
}

// demoDB is what a test reads from one of the demo's server databases.
type demoDB struct {
	keys, charges, references, captures, overcharged int64
	keyList                                          []string // the stored keys, sorted
}

func readDemoDB(t *testing.T, path string) demoDB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var d demoDB
	ctx := context.Background()
	for _, q := range []struct {
		query string
		dst   []any
	}{
		{`SELECT COUNT(*) FROM idempotency_keys`, []any{&d.keys}},
		{`SELECT COUNT(*), COUNT(DISTINCT reference) FROM charges`, []any{&d.charges, &d.references}},
		{`SELECT COUNT(*) FROM gateway_captures`, []any{&d.captures}},
		// Every charge of an invoice has the invoice's amount.
		{`SELECT (SELECT COALESCE(SUM(amount), 0) FROM charges) -
		         (SELECT COALESCE(SUM(amount), 0) FROM (SELECT DISTINCT reference, amount FROM charges))`, []any{&d.overcharged}},
	} {
		if err := db.QueryRowContext(ctx, q.query).Scan(q.dst...); err != nil {
			t.Fatalf("%s: %v", q.query, err)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		d.keyList = append(d.keyList, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// journalKeys returns the sorted keys of the journal at path, which must
// hold n operations, all done with 201.
func journalKeys(t *testing.T, path string, n int) []string {
	t.Helper()
	j, err := idem.OpenJournalWithOptions(path, idem.JournalOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ops := list(j, idem.ListAll)
	if len(ops) != n {
		t.Errorf("the journal holds %d operations, want %d", len(ops), n)
	}
	var keys []string
	for _, op := range ops {
		if op.State != idem.Done || op.Status != 201 {
			t.Errorf("journal: %s is %s with status %d, want done with 201", op.ID, op.State, op.Status)
		}
		keys = append(keys, op.Key)
	}
	slices.Sort(keys)
	return keys
}

func TestDemoKillPoint(t *testing.T) {
	for _, ops := range []int{0, 1} {
		if k := demoKillPoint(ops, 1); k != 0 {
			t.Errorf("demoKillPoint(%d) = %d, want 0: too small to kill halfway", ops, k)
		}
	}
	for _, ops := range []int{2, 3, 10, 60, 500, 1001} {
		lo, hi := max(ops/2-ops/10, 1), min(ops/2+ops/10, ops-1)
		seen := map[int]bool{}
		for seed := range int64(50) {
			k := demoKillPoint(ops, seed)
			if k < lo || k > hi {
				t.Errorf("demoKillPoint(%d, %d) = %d, want within [%d, %d]", ops, seed, k, lo, hi)
			}
			if again := demoKillPoint(ops, seed); again != k {
				t.Errorf("demoKillPoint(%d, %d) = %d, then %d", ops, seed, k, again)
			}
			seen[k] = true
		}
		if ops >= 60 && len(seen) < 2 {
			t.Errorf("demoKillPoint(%d, ·) is %v for 50 seeds: the seed picks nothing", ops, seen)
		}
	}
}

func TestBatchEventLines(t *testing.T) {
	var buf bytes.Buffer
	writeJournalEvent(&buf, 3, 1, 2, 40)
	writeOpEvent(&buf, idem.BatchResult{ID: "invoice-0001", Outcome: idem.OutcomeDone})
	writeOpEvent(&buf, idem.BatchResult{ID: "invoice-0002", Outcome: idem.OutcomeUnknown})
	writeOpEvent(&buf, idem.BatchResult{ID: "invoice-0003"})
	writeRoundEvent(&buf, idem.BatchSummary{Done: 5, Rejected: 1, Unknown: 2, Failed: 1, Expired: 1, Skipped: 1})
	want := []batchEvent{
		{kind: "journal", done: 3, rejected: 1, pending: 2, truncated: 40},
		{kind: "op", id: "invoice-0001", outcome: opDone},
		{kind: "op", id: "invoice-0002", outcome: opUnknown},
		{kind: "op", id: "invoice-0003", outcome: opFailed},
		{kind: "round", done: 5, rejected: 1, pending: 2, failed: 3},
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %q", len(lines), len(want), lines)
	}
	for i, line := range lines {
		ev, err := parseBatchEvent(line)
		if err != nil || ev != want[i] {
			t.Errorf("parseBatchEvent(%q) = %+v, %v; want %+v", line, ev, err, want[i])
		}
	}
	for _, line := range []string{"", "op", "op a", "op a b c", "round 1 2 3", "round 1 2 3 x", "round 1 2 -3 4", "journal 1 2 3 4 5", "hello 1 2 3 4"} {
		if ev, err := parseBatchEvent(line); err == nil {
			t.Errorf("parseBatchEvent(%q) = %+v, want an error", line, ev)
		}
	}
}

func TestDemoVerdict(t *testing.T) {
	good := ledger{Keys: 10, Charges: 10, Charged: 10, Captures: 10}
	plain := ledger{Charges: 13, Charged: 10, Duplicates: 3, Overcharged: 1234, Captures: 13}
	for _, tc := range []struct {
		name   string
		run    idemRun
		l      ledger
		failed bool
	}{
		{"exactly once", idemRun{Done: 10}, good, false},
		{"a duplicate", idemRun{Done: 10}, ledger{Charges: 11, Charged: 10, Duplicates: 1, Captures: 11}, true},
		{"a lost invoice", idemRun{Done: 10}, ledger{Charges: 9, Charged: 9, Lost: 1, Captures: 9}, true},
		{"a capture without its charge", idemRun{Done: 10}, ledger{Charges: 10, Charged: 10, Captures: 11}, true},
		{"a charge of another batch", idemRun{Done: 10}, ledger{Charges: 10, Charged: 10, Foreign: 1, Captures: 10}, true},
		{"an operation not done", idemRun{Done: 9, Rejected: 1}, good, true},
	} {
		var out bytes.Buffer
		err := verdict(&screen{out: &out}, 10, tc.run, tc.l, plain)
		if (err != nil) != tc.failed || strings.Contains(out.String(), "idem: FAILED") != tc.failed {
			t.Errorf("%s: error %v, output %q; want failed %v", tc.name, err, out.String(), tc.failed)
		}
		if !strings.Contains(out.String(), "plain retries: 3 duplicate charges ($12.34 overcharged), 0 invoices never charged.\n") {
			t.Errorf("%s: output %q does not report plain retries", tc.name, out.String())
		}
	}
}

func TestDollarsAndPlurals(t *testing.T) {
	for cents, want := range map[int64]string{0: "$0.00", 5: "$0.05", 100: "$1.00", 123456: "$1,234.56", 100000000: "$1,000,000.00", -250: "-$2.50"} {
		if got := dollars(cents); got != want {
			t.Errorf("dollars(%d) = %q, want %q", cents, got, want)
		}
	}
	for _, tc := range []struct {
		n          int
		noun, want string
	}{{1, "round", "1 round"}, {0, "round", "0 rounds"}, {2, "process", "2 processes"}, {1, "process", "1 process"}} {
		if got := plural(tc.n, tc.noun); got != tc.want {
			t.Errorf("plural(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
	if got := percent(0.25); got != "25%" {
		t.Errorf("percent(0.25) = %q", got)
	}
}
