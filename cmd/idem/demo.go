package main

// idem demo: a batch of card charges through a network that fails a
// quarter of the requests, once with idem and once with plain retries, and
// what the server's database says about each.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var demoCommand = command{
	name:    "demo",
	summary: "charge a batch through injected faults, with idem and with plain retries, and compare",
	run:     runDemo,
}

// Files in the demo's folder.
const (
	demoIdemDB      = "idem.db"      // the server's database for the idem client
	demoPlainDB     = "plain.db"     // the server's database for plain retries
	demoJournalFile = "idem.journal" // the idem client's journal
)

// demoOptions are the flags of idem demo.
type demoOptions struct {
	ops        int
	faults     float64
	seed       int64
	keep       bool
	noProgress bool
}

const demoHelp = `
Charges a batch of invoices through a proxy that breaks the given fraction
of requests, in every way a network breaks them: connections reset, answers
dropped or replaced by 502 after the server committed, stalls, bodies cut in
half, 429 and 503. Everything runs here: the reference server on SQLite
files in a temporary folder, the proxy in front of it, the client.

First with idem: one Idempotency-Key per operation, written to a journal
before the first byte is sent. The batch runs in a process of its own,
which is killed with SIGKILL about halfway through and started again on
the same journal: it resumes every operation under its key.

Then with plain retries (go-retryablehttp) and a fresh Idempotency-Key on
every attempt: the server requires a key, so a key per attempt is what a
client without idempotency looks like to it.

Last, a table of what the server's database and its /stats say: attempts,
faults survived, replays, charges, duplicate charges, invoices never
charged, and the payment gateway's captures.

The exit code is 0 when idem charged every invoice exactly once, and 1
otherwise: the demo is a test too.
`

func runDemo(ctx context.Context, e env, args []string) int {
	if isDemoBatchProcess() {
		return runDemoBatch(ctx, e, args)
	}
	const cmd = "idem demo"
	fs := newFlagSet(cmd)
	var o demoOptions
	fs.IntVar(&o.ops, "ops", 500, "number of invoices to charge")
	fs.Float64Var(&o.faults, "faults", 0.25, "`fraction` of requests the proxy breaks, in [0, 1)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the proxy's fault choices and of the moment of the kill")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary folder (databases and journal) and print its path")
	fs.BoolVar(&o.noProgress, "no-progress", false, "draw no progress bar (none is drawn when stderr is not a terminal)")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [--ops N] [--faults FRACTION] [--seed N] [--keep] [--no-progress]\n", cmd)
		fmt.Fprint(w, demoHelp)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 0:
		return usageError(e, cmd, "unexpected arguments %q", pos)
	case o.ops < 1:
		return usageError(e, cmd, "--ops must be at least 1, not %d", o.ops)
	case !(o.faults >= 0 && o.faults < 1): // also refuses NaN
		return usageError(e, cmd, "--faults must be at least 0 and below 1, not %v", o.faults)
	}
	if err := demo(ctx, e, o); err != nil {
		switch {
		case errors.Is(err, errDemoFailed): // the table said how
		case ctx.Err() != nil:
			fmt.Fprintf(e.stderr, "%s: interrupted\n", cmd)
		default:
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		}
		return exitFailure
	}
	return exitOK
}

// errDemoFailed reports that idem did not charge every invoice exactly
// once; the table says how.
var errDemoFailed = errors.New("idem did not charge every invoice exactly once")

// demo runs the demo with o.
func demo(ctx context.Context, e env, o demoOptions) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the executable to run the batch process: %w", err)
	}
	dir, err := os.MkdirTemp("", "idem-demo-")
	if err != nil {
		return fmt.Errorf("creating the demo's folder: %w", err)
	}
	scr := newScreen(e, !o.noProgress)
	defer func() {
		if o.keep {
			scr.say("\nkept the demo's files in %s: %s and %s (the server's databases), %s (the journal)", dir, demoIdemDB, demoPlainDB, demoJournalFile)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the demo's folder: %w", rerr))
		}
	}()

	charges := demoCharges(o.ops)
	scr.say("idem demo: %s through a proxy that breaks %s of requests (seed %d)", plural(o.ops, "card charge"), percent(o.faults), o.seed)

	idemStage, err := startStage(filepath.Join(dir, demoIdemDB), o.faults, o.seed)
	if err != nil {
		return err
	}
	defer idemStage.stop()
	scr.say("\n1. idem: one Idempotency-Key per operation, journaled before the first byte is sent")
	batch := idemBatch{
		exe:     exe,
		url:     idemStage.URL(),
		journal: filepath.Join(dir, demoJournalFile),
		ops:     o.ops,
		killAt:  demoKillPoint(o.ops, o.seed),
		screen:  scr,
	}
	idemRun, err := batch.run(ctx)
	if err != nil {
		return err
	}
	scr.say("  %s finished in %s and %s, %s", plural(idemRun.Done+idemRun.Rejected, "operation"), plural(idemRun.Rounds, "round"), plural(idemRun.Processes, "process"), idemRun.Elapsed.Round(100*time.Millisecond))
	idemReport, err := idemStage.finish(ctx, charges)
	if err != nil {
		return err
	}

	plainStage, err := startStage(filepath.Join(dir, demoPlainDB), o.faults, o.seed)
	if err != nil {
		return err
	}
	defer plainStage.stop()
	scr.say("\n2. plain retries: go-retryablehttp, a fresh Idempotency-Key on every attempt")
	scr.say("  (the server requires a key: a new key per attempt is what no idempotency looks like)")
	plainRun, err := runPlainBatch(ctx, plainStage.URL(), charges, scr)
	if err != nil {
		return err
	}
	scr.say("  %d of %s succeeded in %s, %s", plainRun.Succeeded, plural(o.ops, "invoice"), plural(plainRun.Rounds, "round"), plainRun.Elapsed.Round(100*time.Millisecond))
	plainReport, err := plainStage.finish(ctx, charges)
	if err != nil {
		return err
	}

	scr.say("")
	writeDemoTable(e.stdout, o.ops, demoColumn{idemReport, idemRun.Rounds, idemRun.Processes}, demoColumn{plainReport, plainRun.Rounds, 1})
	scr.say("")
	return verdict(scr, o.ops, idemRun, idemReport.ledger, plainReport.ledger)
}

// verdict says what the table shows, and returns errDemoFailed unless idem
// charged every invoice exactly once.
func verdict(scr *screen, ops int, run idemRun, withIdem, plain ledger) error {
	ok := withIdem.Duplicates == 0 && withIdem.Lost == 0 && withIdem.Foreign == 0 &&
		withIdem.Charges == int64(ops) && withIdem.Captures == withIdem.Charges && run.Done == ops
	if ok {
		scr.say("idem: every invoice charged exactly once: 0 duplicates, 0 lost, %s for %s.",
			plural(int(withIdem.Captures), "gateway capture"), plural(int(withIdem.Charges), "charge"))
	} else {
		scr.say("idem: FAILED: %s, %s never charged, %s for %s, %d of %d operations done.",
			plural(int(withIdem.Duplicates), "duplicate charge"), plural(int(withIdem.Lost), "invoice"),
			plural(int(withIdem.Captures), "gateway capture"), plural(int(withIdem.Charges), "charge"), run.Done, ops)
	}
	scr.say("plain retries: %s (%s overcharged), %s never charged.",
		plural(int(plain.Duplicates), "duplicate charge"), dollars(plain.Overcharged), plural(int(plain.Lost), "invoice"))
	if !ok {
		return errDemoFailed
	}
	return nil
}

// demoKillPoint returns after how many done operations the demo kills the
// first batch process: about half, give or take a tenth, drawn from seed.
// It returns 0 (no kill) for a batch too small to be killed halfway.
func demoKillPoint(ops int, seed int64) int {
	if ops < 2 {
		return 0
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6b696c6c)) // "kill"
	spread := ops / 10
	k := ops/2 - spread + rng.IntN(2*spread+1)
	return min(max(k, 1), ops-1)
}

// plural returns n and the noun, in the plural unless n is 1:
// "1 round", "2 rounds", "3 processes".
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "s"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// percent formats a fraction as a percentage: 0.25 as "25%".
func percent(f float64) string {
	return fmt.Sprintf("%.4g%%", f*100)
}
