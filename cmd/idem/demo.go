package main

// idem demo: a batch of card charges through a network that fails a
// quarter of the requests, by a job that is killed halfway and started
// again, once with idem and once with careful retries without it, and what
// the server's database says about each.

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
	summary: "charge a batch through faults and a crash, with idem and with careful retries, and compare",
	run:     runDemo,
}

// Files in the demo's folder.
const (
	demoIdemDB      = "idem.db"      // the server's database for the idem client
	demoJournalFile = "idem.journal" // the idem client's journal
	demoCarefulDB   = "careful.db"   // the server's database for the careful job
	demoDoneFile    = "careful.done" // the careful job's record of finished rows
	demoCarefulLog  = "careful.log"  // the careful job's report, as the demo read it
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

The batch runs twice, each time in a process of its own that is killed with
SIGKILL about halfway through (after the same number of rows is done, with
the same seed for the proxy's faults) and then started again.

First with idem: one Idempotency-Key per operation, written to a journal
before the first byte is sent. The second process resends the operations
the journal holds pending under their journaled keys.

Then with careful retries, as a careful user writes the job without idem:
go-retryablehttp, one Idempotency-Key per charge (a UUIDv4, as stripe-go
mints one) kept in memory and reused by every retry of that charge, 409
retried too, and each row recorded in a done file, fsync'd, once its answer
is in. The second process skips the rows the done file holds and charges
the others under new keys: the old ones died with the first process.

Last, a table of what the server's database and its /stats say: attempts,
faults survived, replays, charges, duplicate charges, invoices never
charged, and the payment gateway's captures. The careful job's duplicates
are split by where their invoice stood at the kill, as the job reported it:
in flight (sent, no answer yet), answered but not yet recorded, or neither
(faults alone, retried under one key).

The exit code is 0 when idem charged every invoice exactly once, and 1
otherwise: the demo is a test too.
`

func runDemo(ctx context.Context, e env, args []string) int {
	switch os.Getenv(demoBatchEnv) {
	case demoBatchIdem:
		return runDemoBatch(ctx, e, args)
	case demoBatchCareful:
		return runCarefulJob(ctx, e, args)
	}
	const cmd = "idem demo"
	fs := newFlagSet(cmd)
	var o demoOptions
	fs.IntVar(&o.ops, "ops", 500, "number of invoices to charge")
	fs.Float64Var(&o.faults, "faults", 0.25, "`fraction` of requests the proxy breaks, in [0, 1)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the proxy's fault choices and of the moment of the kill")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary folder (databases, journal, done file) and print its path")
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
			scr.say("\nkept the demo's files in %s: %s and %s (the server's databases), %s (idem's journal), %s and %s (the careful job's done file and report)",
				dir, demoIdemDB, demoCarefulDB, demoJournalFile, demoDoneFile, demoCarefulLog)
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

	carefulStage, err := startStage(filepath.Join(dir, demoCarefulDB), o.faults, o.seed)
	if err != nil {
		return err
	}
	defer carefulStage.stop()
	scr.say("\n2. careful retries without idem: go-retryablehttp, one Idempotency-Key per charge kept in memory,")
	scr.say("  each row recorded in a done file (fsync'd) once answered; killed at the same point")
	jobLog, err := os.Create(filepath.Join(dir, demoCarefulLog))
	if err != nil {
		return fmt.Errorf("creating the careful job's log: %w", err)
	}
	defer jobLog.Close()
	job := carefulBatch{
		exe:    exe,
		url:    carefulStage.URL(),
		done:   filepath.Join(dir, demoDoneFile),
		ops:    o.ops,
		killAt: batch.killAt,
		log:    jobLog,
		screen: scr,
	}
	carefulRun, err := job.run(ctx)
	if err != nil {
		return err
	}
	scr.say("  %s recorded done in %s and %s, %s", plural(carefulRun.Recorded, "row"), plural(carefulRun.Rounds, "round"), plural(carefulRun.Processes, "process"), carefulRun.Elapsed.Round(100*time.Millisecond))
	carefulReport, err := carefulStage.finish(ctx, charges)
	if err != nil {
		return err
	}

	idemCol := demoColumn{idemReport, idemRun.Rounds, idemRun.Processes, idemRun.Kill}
	carefulCol := demoColumn{carefulReport, carefulRun.Rounds, carefulRun.Processes, carefulRun.Kill}
	scr.say("")
	writeDemoTable(e.stdout, o.ops, idemCol, carefulCol)
	writeDemoNotes(e.stdout, o.ops, carefulCol, chargedUnderBothKeys(carefulReport.keys, carefulRun.Keys))
	scr.say("")
	return verdict(scr, o.ops, idemRun, idemReport.ledger, carefulReport.ledger, carefulCol.duplicates())
}

// verdict says what the table shows, and returns errDemoFailed unless idem
// charged every invoice exactly once.
func verdict(scr *screen, ops int, run idemRun, withIdem, careful ledger, dup dupSplit) error {
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
	scr.say("careful retries: %s (%s overcharged), %d of them from the kill; %s never charged.",
		plural(int(careful.Duplicates), "duplicate charge"), dollars(careful.Overcharged),
		dup.inFlight+dup.unrecorded, plural(int(careful.Lost), "invoice"))
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
