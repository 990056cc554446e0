package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
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
	for _, w := range []string{"Usage: idem demo", "-ops", "-faults", "-seed", "-keep", "-no-progress", "SIGKILL", "go-retryablehttp", "stripe-go", "done file", "new keys"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("help lacks %q:\n%s", w, r.stdout)
		}
	}
}

// The demo end to end, as a user runs it, at a small size: both jobs are
// really killed and restarted, every number the table shows from the
// server's database is read again here from the kept files, and where the
// careful job's rows stood at the kill is worked out again from its report
// and checked against the keys of the charges in the database.
func TestDemoEndToEnd(t *testing.T) {
	bin := buildIdem(t)
	const ops, seed = 60, 7

	t.Run("kept", func(t *testing.T) {
		tmp := t.TempDir()
		out := runDemoBinary(t, bin, tmp, "demo", "--ops", fmt.Sprint(ops), "--faults", "0.3", "--seed", fmt.Sprint(seed), "--no-progress", "--keep")

		killAt := demoKillPoint(ops, seed)
		for _, want := range []string{
			fmt.Sprintf("  round 1: killed the batch process (SIGKILL) at %d/%d done — resuming from the journal\n", killAt, ops),
			fmt.Sprintf("  round 1: killed the job (SIGKILL) at %d/%d recorded done — starting it again on its done file\n", killAt, ops),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in the output:\n%s", want, out)
			}
		}
		m := regexp.MustCompile(`kept the demo's files in (\S+):`).FindStringSubmatch(out)
		if m == nil || filepath.Dir(m[1]) != tmp {
			t.Fatalf("the output does not say where the files were kept, in %s:\n%s", tmp, out)
		}
		dir := m[1]
		table := parseDemoTable(t, out)
		idemCol, carefulCol := table.column(0), table.column(1)

		// What the batch did.
		for _, col := range []map[string]string{idemCol, carefulCol} {
			if col[rowOperations] != "60" || col[rowProcesses] != "2" {
				t.Errorf("operations %s, processes %s; want 60 and 2", col[rowOperations], col[rowProcesses])
			}
		}
		idemSection, carefulSection, _ := strings.Cut(out, "\n2. careful retries")
		if got, want := strings.Count(idemSection, "\n  round "), idemCol[rowRounds]; strconv.Itoa(got) != want {
			t.Errorf("the idem story tells %d rounds, the table %s", got, want)
		}
		if got, want := strings.Count(carefulSection, "\n  round "), carefulCol[rowRounds]; strconv.Itoa(got) != want {
			t.Errorf("the careful story tells %d rounds, the table %s", got, want)
		}

		// The server's databases, read again.
		idemDB := readDemoDB(t, filepath.Join(dir, demoIdemDB))
		carefulDB := readDemoDB(t, filepath.Join(dir, demoCarefulDB))
		for _, c := range []struct {
			name string
			col  map[string]string
			db   demoDB
		}{
			{"idem", idemCol, idemDB},
			{"careful retries", carefulCol, carefulDB},
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
			if c.db.references != ops || c.db.captures != c.db.charges {
				t.Errorf("%s: %d charges for %d of %d invoices, %d captures; want every invoice charged, a capture per charge",
					c.name, c.db.charges, c.db.references, ops, c.db.captures)
			}
			if c.col[rowDupOther] != "0" {
				t.Errorf("%s: %s duplicates of invoices the kill did not catch, want 0", c.name, c.col[rowDupOther])
			}
			// The kill comes once killAt rows are reported done; rows
			// recorded but not yet reported then count too.
			if n, err := strconv.Atoi(c.col[rowKilled]); err != nil || n < killAt || n > killAt+demoConcurrency {
				t.Errorf("%s: %s rows recorded done at the kill, want %d to %d", c.name, c.col[rowKilled], killAt, killAt+demoConcurrency)
			}
		}

		// idem: one key per invoice, across the kill; the keys the server
		// stored are exactly the journal's.
		if idemDB.charges != ops || idemDB.keys != ops {
			t.Errorf("idem: %d charges under %d keys, want %d and %d", idemDB.charges, idemDB.keys, ops, ops)
		}
		if idemCol[rowDupInFlight] != "0" || idemCol[rowUnrecorded] != notMeasured || idemCol[rowDupUnrecorded] != notMeasured {
			t.Errorf("idem: %s, %s, %s: want 0 duplicates and no answered-but-unrecorded split",
				idemCol[rowDupInFlight], idemCol[rowUnrecorded], idemCol[rowDupUnrecorded])
		}
		if want := fmt.Sprintf("\n  the journal holds %s done, %s pending", idemCol[rowKilled], idemCol[rowInFlight]); !strings.Contains(idemSection, want) {
			t.Errorf("idem: the table says %s done and %s in flight at the kill; the story has no %q:\n%s", idemCol[rowKilled], idemCol[rowInFlight], want, idemSection)
		}
		if n, err := strconv.Atoi(idemCol[rowInFlight]); err != nil || n > demoConcurrency {
			t.Errorf("idem: %s in flight at the kill, want at most %d", idemCol[rowInFlight], demoConcurrency)
		}
		jkeys := journalKeys(t, filepath.Join(dir, demoJournalFile), ops)
		if !slices.Equal(jkeys, idemDB.keyList) {
			t.Errorf("the journal's keys differ from the server's:\njournal %q\nserver  %q", jkeys, idemDB.keyList)
		}

		// The careful job: where its rows stood at the kill, from its own
		// report, and where its duplicates come from, from the database.
		rep := readCarefulLog(t, filepath.Join(dir, demoCarefulLog), filepath.Join(dir, demoDoneFile))
		if carefulCol[rowKilled] != strconv.Itoa(len(rep.recordedAtKill)) {
			t.Errorf("careful: the table says %s rows recorded done at the kill, the second process skipped %d", carefulCol[rowKilled], len(rep.recordedAtKill))
		}
		// The workers held the rows in flight but for those waiting for
		// the next round, and the rows answered but not yet recorded.
		if held := len(rep.inFlight) - len(rep.waiting) + len(rep.unrecorded); held > demoConcurrency {
			t.Errorf("careful: %d rows in flight (%d of them waiting for the next round) and %d answered at the kill: %d held, with %d workers",
				len(rep.inFlight), len(rep.waiting), len(rep.unrecorded), held, demoConcurrency)
		}
		var dupInFlight, dupUnrecorded int
		for ref, keys := range carefulDB.chargeKeys {
			k1, k2 := rep.keys[0][ref], rep.keys[1][ref]
			switch {
			case len(keys) == 1 && (keys[0] == k1 || keys[0] == k2):
			case len(keys) == 2 && k1 != "" && k2 != "" && k1 != k2 &&
				(keys[0] == k1 && keys[1] == k2 || keys[0] == k2 && keys[1] == k1):
				switch {
				case rep.inFlight[ref]:
					dupInFlight++
				case rep.unrecorded[ref]:
					dupUnrecorded++
				default:
					t.Errorf("careful: %s charged twice, though the kill did not catch it", ref)
				}
			default:
				t.Errorf("careful: %s charged under %q; its keys were %q in the first process and %q in the second", ref, keys, k1, k2)
			}
			if rep.recordedAtKill[ref] && k2 != "" {
				t.Errorf("careful: %s was recorded done at the kill, and sent again", ref)
			}
		}
		for label, want := range map[string]int{
			rowInFlight:      len(rep.inFlight),
			rowUnrecorded:    len(rep.unrecorded),
			rowDupInFlight:   dupInFlight,
			rowDupUnrecorded: dupUnrecorded,
			rowDuplicates:    dupInFlight + dupUnrecorded,
		} {
			if carefulCol[label] != strconv.Itoa(want) {
				t.Errorf("careful, %s: the table says %s, the report and the database %d", label, carefulCol[label], want)
			}
		}
		if int64(dupInFlight+dupUnrecorded) != carefulDB.charges-ops {
			t.Errorf("careful: %d + %d duplicates from the kill, %d in the database", dupInFlight, dupUnrecorded, carefulDB.charges-ops)
		}
		sentKeys := map[string]bool{}
		for _, keys := range rep.keys {
			for _, k := range keys {
				sentKeys[k] = true
			}
		}
		for _, k := range carefulDB.keyList {
			if !sentKeys[k] {
				t.Errorf("careful: the server stored key %s, which the job never reported sending", k)
			}
		}

		for _, w := range []string{
			"idem: every invoice charged exactly once: 0 duplicates, 0 lost, 60 gateway captures for 60 charges.\n",
			fmt.Sprintf("careful retries: %s (%s overcharged), %d of them from the kill; 0 invoices never charged.\n",
				plural(int(carefulDB.charges-ops), "duplicate charge"), dollars(carefulDB.overcharged), dupInFlight+dupUnrecorded),
			fmt.Sprintf("Under faults alone that is enough: 0 duplicates among the %d invoices the kill did not catch.", ops-len(rep.inFlight)-len(rep.unrecorded)),
		} {
			// The notes are wrapped: compare words, not line breaks.
			if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(w), " ")) {
				t.Errorf("no %q in the output:\n%s", w, out)
			}
		}
	})

	// Without the kill, the careful job's one key per charge is enough:
	// the same faults charge no invoice twice.
	t.Run("careful without a kill", func(t *testing.T) {
		dir := t.TempDir()
		charges := demoCharges(ops)
		stage, err := startStage(filepath.Join(dir, demoCarefulDB), 0.3, seed)
		if err != nil {
			t.Fatal(err)
		}
		defer stage.stop()
		job := carefulBatch{exe: bin, url: stage.URL(), done: filepath.Join(dir, demoDoneFile), ops: ops, screen: &screen{out: io.Discard}}
		run, err := job.run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rep, err := stage.finish(context.Background(), charges)
		if err != nil {
			t.Fatal(err)
		}
		l := rep.ledger
		if run.Processes != 1 || run.Recorded != ops || run.Kill.Killed {
			t.Errorf("%d processes, %d rows recorded, killed %v; want 1, %d, false", run.Processes, run.Recorded, run.Kill.Killed, ops)
		}
		if l.Charges != ops || l.Duplicates != 0 || l.Lost != 0 || l.Captures != ops || l.Keys != ops {
			t.Errorf("%+v; want %d charges under %d keys, no duplicate, none lost", l, ops, ops)
		}
		if faults := rep.proxy.Requests - ops; faults <= 0 {
			t.Errorf("%d attempts for %d invoices: no fault was retried", rep.proxy.Requests, ops)
		}
		for ref, keys := range rep.keys {
			if len(keys) != 1 || keys[0] != run.Keys[0][ref] {
				t.Errorf("%s charged under %q, sent under %q", ref, keys, run.Keys[0][ref])
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

// carefulLog is what a test works out from the careful job's report, as
// the demo logged it, and its done file.
type carefulLog struct {
	keys           [2]map[string]string // per process: the key each invoice was sent under
	recordedAtKill map[string]bool      // the rows the second process skipped
	inFlight       map[string]bool      // sent by the first process, no answer, not recorded
	unrecorded     map[string]bool      // answered in the first process, not recorded
	// waiting are the rows of inFlight whose retries had run out in the
	// first process (its last line of them is gaveup): sent, no answer,
	// waiting for the next round, which the kill came before. No worker
	// held them.
	waiting map[string]bool
}

// readCarefulLog reads the log of a careful job killed once. The rows the
// second process skipped are the first lines of the done file, as many as
// its start line says.
func readCarefulLog(t *testing.T, logPath, donePath string) carefulLog {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	l := carefulLog{keys: [2]map[string]string{{}, {}}, recordedAtKill: map[string]bool{}, inFlight: map[string]bool{}, unrecorded: map[string]bool{}, waiting: map[string]bool{}}
	answered := map[string]bool{}
	gaveUp := map[string]bool{} // in the first process, by its last line of the row
	proc, kills, skipped := 0, 0, -1
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		switch f := strings.Fields(line); {
		case line == carefulLogProcess+" 1" || line == carefulLogProcess+" 2":
			proc, _ = strconv.Atoi(f[2])
		case line == carefulLogKill:
			kills++
		case proc == 0:
			t.Fatalf("careful log: %q before the first process", line)
		case f[0] == carefulLineSent:
			if k := l.keys[proc-1][f[1]]; k != "" && k != f[2] {
				t.Errorf("careful log: process %d sent %s under %s and %s", proc, f[1], k, f[2])
			}
			l.keys[proc-1][f[1]] = f[2]
			if proc == 1 {
				gaveUp[f[1]] = false
			}
		case f[0] == carefulLineAnswer && proc == 1:
			answered[f[1]] = true
		case f[0] == carefulLineGaveUp && proc == 1:
			gaveUp[f[1]] = true
		case f[0] == carefulLineStart && proc == 2:
			skipped, _ = strconv.Atoi(f[1])
		}
	}
	if proc != 2 || kills != 1 || skipped < 0 {
		t.Fatalf("careful log: %d processes, %d kills, start line of the second %v; want 2, 1, present", proc, kills, skipped >= 0)
	}
	done, err := os.ReadFile(donePath)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSuffix(string(done), "\n"), "\n")
	if len(rows) < skipped {
		t.Fatalf("the done file holds %d rows, the second process skipped %d", len(rows), skipped)
	}
	for _, id := range rows[:skipped] {
		l.recordedAtKill[id] = true
	}
	for id := range l.keys[0] {
		switch {
		case l.recordedAtKill[id]:
		case answered[id]:
			l.unrecorded[id] = true
		default:
			l.inFlight[id] = true
			if gaveUp[id] {
				l.waiting[id] = true
			}
		}
	}
	return l
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
		rowOperations, rowRounds, rowProcesses, rowKilled, rowInFlight, rowUnrecorded,
		rowAttempts, rowConflicts, rowCutOff, rowReplays, rowKeys, rowCharges,
		rowDuplicates, rowDupInFlight, rowDupUnrecorded, rowDupOther,
		rowLost, rowCaptures, rowOvercharged,
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
	keyList                                          []string            // the stored keys, sorted
	chargeKeys                                       map[string][]string // reference: the keys of its charges, oldest first
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
	rows, err := db.QueryContext(ctx, `SELECT idem_key FROM idempotency_keys ORDER BY idem_key`)
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
	d.chargeKeys = map[string][]string{}
	crows, err := db.QueryContext(ctx, `SELECT reference, idempotency_key FROM charges ORDER BY created_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer crows.Close()
	for crows.Next() {
		var ref, k string
		if err := crows.Scan(&ref, &k); err != nil {
			t.Fatal(err)
		}
		d.chargeKeys[ref] = append(d.chargeKeys[ref], k)
	}
	if err := crows.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// journalKeys returns the sorted keys of the journal at path, which must
// hold n operations, all done with 201.
func journalKeys(t *testing.T, path string, n int) []string {
	t.Helper()
	j, err := filejournal.Open(path, filejournal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ops := list(j, journal.ListAll)
	if len(ops) != n {
		t.Errorf("the journal holds %d operations, want %d", len(ops), n)
	}
	var keys []string
	for _, op := range ops {
		if op.State != journal.StateDone || op.Status != 201 {
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
	careful := ledger{Charges: 13, Charged: 10, Duplicates: 3, Overcharged: 1234, Captures: 13}
	dup := dupSplit{inFlight: 2, unrecorded: 1}
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
		err := verdict(&screen{out: &out}, 10, tc.run, tc.l, careful, dup)
		if (err != nil) != tc.failed || strings.Contains(out.String(), "idem: FAILED") != tc.failed {
			t.Errorf("%s: error %v, output %q; want failed %v", tc.name, err, out.String(), tc.failed)
		}
		if !strings.Contains(out.String(), "careful retries: 3 duplicate charges ($12.34 overcharged), 3 of them from the kill; 0 invoices never charged.\n") {
			t.Errorf("%s: output %q does not report careful retries", tc.name, out.String())
		}
	}
}

// The table's split of duplicates follows the kill's split of rows, and
// the notes say only what the numbers say.
func TestDemoDuplicateSplit(t *testing.T) {
	col := demoColumn{
		report: stageReport{keys: chargeKeys{
			"invoice-1": {"a1", "b1"},       // in flight at the kill, charged twice
			"invoice-2": {"b2"},             // in flight at the kill, never reached the server
			"invoice-3": {"a3", "b3"},       // answered, not yet recorded
			"invoice-4": {"a4"},             // recorded before the kill
			"invoice-5": {"b5"},             // first sent after the kill
			"invoice-6": {"a6", "b6", "c6"}, // not caught by the kill
		}},
		kill: killSplit{
			Killed:     true,
			Recorded:   1,
			InFlight:   map[string]bool{"invoice-1": true, "invoice-2": true},
			Unrecorded: map[string]bool{"invoice-3": true},
		},
	}
	if got, want := col.duplicates(), (dupSplit{inFlight: 1, unrecorded: 1, other: 2}); got != want {
		t.Errorf("duplicates() = %+v, want %+v", got, want)
	}
	processKeys := []map[string]string{
		{"invoice-1": "a1", "invoice-2": "a2", "invoice-3": "a3", "invoice-4": "a4", "invoice-6": "a6"},
		{"invoice-1": "b1", "invoice-2": "b2", "invoice-3": "x3", "invoice-5": "b5", "invoice-6": "b6"},
	}
	if got := chargedUnderBothKeys(col.report.keys, processKeys); got != 1 {
		t.Errorf("chargedUnderBothKeys = %d, want 1 (invoice-3's second key is not the job's)", got)
	}
	var out bytes.Buffer
	writeDemoNotes(&out, 6, col, 1)
	text := strings.Join(strings.Fields(out.String()), " ")
	for _, w := range []string{
		"2 duplicates among the 3 invoices the kill did not catch",
		"The kill caught 2 in flight and 1 answered but not yet recorded",
		"2 of these 3 had already been charged; the server holds 1 of them under the killed process's key and under the new one.",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the notes lack %q:\n%s", w, out.String())
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if len(line) > 74 {
			t.Errorf("a line of %d bytes in the notes: %q", len(line), line)
		}
	}
}

func TestCarefulEventLines(t *testing.T) {
	var buf bytes.Buffer
	r := &carefulReport{w: &buf}
	r.start(3)
	r.sent("invoice-0001", "6f1c")
	r.answer("invoice-0001")
	r.recorded("invoice-0001")
	r.gaveUp("invoice-0002")
	r.round(4, 1)
	if err := r.err(); err != nil {
		t.Fatal(err)
	}
	want := []carefulEvent{
		{kind: carefulLineStart, recorded: 3},
		{kind: carefulLineSent, id: "invoice-0001", key: "6f1c"},
		{kind: carefulLineAnswer, id: "invoice-0001"},
		{kind: carefulLineRecorded, id: "invoice-0001"},
		{kind: carefulLineGaveUp, id: "invoice-0002"},
		{kind: carefulLineRound, recorded: 4, failed: 1},
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %q", len(lines), len(want), lines)
	}
	for i, line := range lines {
		ev, err := parseCarefulEvent(line)
		if err != nil || ev != want[i] {
			t.Errorf("parseCarefulEvent(%q) = %+v, %v; want %+v", line, ev, err, want[i])
		}
	}
	for _, line := range []string{"", "start", "start -1", "start x", "sent a", "sent a b c", "answer", "answer a b", "round 1", "round 1 -1", "hello a"} {
		if ev, err := parseCarefulEvent(line); err == nil {
			t.Errorf("parseCarefulEvent(%q) = %+v, want an error", line, ev)
		}
	}
}

// The done file holds whole lines only: a line the kill cut short holds no
// row, and is cut off before the next is appended.
func TestDoneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "done")
	d, rows, err := openDoneFile(path)
	if err != nil || len(rows) != 0 {
		t.Fatalf("openDoneFile on no file: %v, %v", rows, err)
	}
	for _, id := range []string{"invoice-1", "invoice-2"} {
		if err := d.record(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("invoice-3") // torn: no newline
	f.Close()
	if rows, err := readDoneFile(path); err != nil || len(rows) != 2 || !rows["invoice-1"] || !rows["invoice-2"] {
		t.Errorf("readDoneFile with a torn line = %v, %v; want invoice-1 and invoice-2", rows, err)
	}
	d, rows, err = openDoneFile(path)
	if err != nil || len(rows) != 2 {
		t.Fatalf("openDoneFile with a torn line = %v, %v", rows, err)
	}
	if err := d.record("invoice-4"); err != nil {
		t.Fatal(err)
	}
	d.close()
	if data, _ := os.ReadFile(path); string(data) != "invoice-1\ninvoice-2\ninvoice-4\n" {
		t.Errorf("the done file holds %q", data)
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
