package main

// The batch process of idem demo: the job the demo kills and restarts. It
// charges the demo's invoices with the idem client and a journal, pass
// after pass, until none is left pending, reporting on stdout as it goes
// (see demo_protocol.go).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver"
)

// demoBatchEnv, set in the environment of "idem demo", makes the process
// one of the demo's jobs instead of the demo: demoBatchIdem the idem batch
// process, demoBatchCareful the careful job. The demo re-runs its own
// executable that way, so that it has a process to kill that nothing else
// depends on. It is not meant to be set by hand.
const demoBatchEnv = "IDEM_DEMO_BATCH_PROCESS"

// demoBatchIdem, as the value of demoBatchEnv, makes the process the
// demo's idem batch process.
const demoBatchIdem = "1"

// demoBatchArgs returns the arguments that start the batch process on the
// journal at path, charging n invoices through url.
func demoBatchArgs(url, path string, n int) []string {
	return []string{"demo", "-url", url, "-journal", path, "-ops", fmt.Sprint(n)}
}

// runDemoBatch is the batch process: it runs the batch until every
// operation is done or rejected, and exits 0, or exits 1 after
// demoMaxRounds passes, when an operation cannot be sent, or when ctx ends.
func runDemoBatch(ctx context.Context, e env, args []string) int {
	const cmd = "idem demo (batch process)"
	fs := newFlagSet(cmd)
	url := fs.String("url", "", "base URL of the server")
	path := fs.String("journal", "", "journal path")
	n := fs.Int("ops", 0, "number of invoices")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s=1 idem demo -url URL -journal PATH -ops N\n\nThe batch process of idem demo, which starts it.\n", demoBatchEnv)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 0 || *url == "" || *path == "" || *n < 1 {
		return usageError(e, cmd, "want -url, -journal and a positive -ops, and no arguments")
	}

	j, err := filejournal.Open(*path, filejournal.Options{Logger: warnLogger(e.stderr)})
	if err != nil {
		return reportJournalError(e, cmd, *path, err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			fmt.Fprintf(e.stderr, "%s: closing the journal: %v\n", cmd, err)
		}
	}()
	if err := reportJournal(e.stdout, j); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}

	tr := newTransport()
	defer tr.CloseIdleConnections()
	c, err := idem.New(idem.Config{
		Journal:        j,
		HTTPClient:     &http.Client{Transport: tr},
		AttemptTimeout: demoAttemptTimeout,
		MaxAttempts:    demoMaxAttempts,
		InitialWait:    demoInitialWait,
		MaxWait:        demoMaxWait,
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	return runDemoRounds(ctx, e, cmd, c, demoBatchOps(*url, demoCharges(*n)))
}

// reportJournal writes the journal line: what the journal held when this
// process opened it.
func reportJournal(w io.Writer, j *filejournal.Journal) error {
	var done, rejected, pending int
	ops, err := j.List(context.Background(), journal.ListAll)
	if err != nil {
		return err
	}
	for _, op := range ops {
		switch op.State {
		case journal.StateDone:
			done++
		case journal.StateRejected:
			rejected++
		default:
			pending++
		}
	}
	return writeJournalEvent(w, done, rejected, pending, j.Stats().Truncated)
}

// runDemoRounds runs the batch again and again until no operation is left
// pending. An operation ends unknown when retrying stops before a final
// answer (the client's retry budget runs dry at the demo's fault rates); it
// stays pending in the journal under its key, and the next pass resumes
// it: what rerunning a batch job does.
func runDemoRounds(ctx context.Context, e env, cmd string, c *idem.Client, ops []idem.BatchOp) int {
	var writeErr error
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		if r.Outcome == idem.OutcomeRejected || r.Outcome == 0 {
			fmt.Fprintf(e.stderr, "%s: %s: %v\n", cmd, r.ID, r.Err)
		}
		if err := writeOpEvent(e.stdout, r); err != nil && writeErr == nil {
			writeErr = err
		}
	}
	for round := 1; ; round++ {
		s, err := c.RunBatch(ctx, ops, idem.BatchOptions{Concurrency: demoConcurrency, Progress: progress})
		if err == nil {
			err = writeRoundEvent(e.stdout, s)
		}
		if err == nil {
			err = writeErr
		}
		switch {
		case err != nil:
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return exitFailure
		case s.Failed+s.Expired+s.Skipped > 0:
			fmt.Fprintf(e.stderr, "%s: %d operations could not be sent\n", cmd, s.Failed+s.Expired+s.Skipped)
			return exitFailure
		case s.Unknown == 0:
			return exitOK
		case round == demoMaxRounds:
			fmt.Fprintf(e.stderr, "%s: %d operations still pending after %d rounds; they stay in the journal\n", cmd, s.Unknown, round)
			return exitFailure
		}
	}
}

// demoBatchOps returns the batch operations that charge the invoices
// through the server at url.
func demoBatchOps(url string, charges []demoCharge) []idem.BatchOp {
	ops := make([]idem.BatchOp, len(charges))
	for i, ch := range charges {
		ops[i] = idem.BatchOp{
			ID: ch.ID,
			Request: func(ctx context.Context) (*http.Request, error) {
				return newChargeRequest(ctx, url, ch.Body)
			},
		}
	}
	return ops
}

// newChargeRequest returns a POST /charges request with body, from the
// demo's client.
func newChargeRequest(ctx context.Context, url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(testserver.HeaderClientID, demoClientID)
	return req, nil
}
