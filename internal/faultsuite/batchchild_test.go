package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// batchChildEnv names the environment variable that makes the test binary
// run as the batch client (runBatchChild) instead of running tests. Its
// value is a batchChildConfig in JSON.
const batchChildEnv = "IDEM_FAULTSUITE_BATCH_CHILD"

// batchChildConfig is what the parent tells a batch child.
type batchChildConfig struct {
	Journal      string // the journal file, kept across runs
	URL          string // the server's base URL
	ClientID     string
	Ops          int
	Concurrency  int
	CompactEvery int    // compact the journal after every this many outcomes; 0 never
	Rounds       int    // RunBatch calls before giving up on unknown outcomes
	SyncLog      string // when set, the journal's fsyncs are logged there for power cuts (see SyncLog)
}

// Exit statuses of the batch child.
const (
	childFinished     = 0 // every operation is done
	childJournalError = 3 // the journal did not open
	childUnfinished   = 4 // operations remain after every round, or ended otherwise than done or unknown
	childBadConfig    = 5
)

// runBatchChild is the batch client: a process that opens the journal,
// reports the operations it finds pending (a run before it was killed),
// and runs the workload with Client.RunBatch, again and again until every
// operation is done. It reports every attempt, failure and outcome on
// stdout as events (see EventWriter); its parent kills it with SIGKILL at
// moments of its choosing.
func runBatchChild(cfgJSON string) int {
	var cfg batchChildConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "batch child: bad config:", err)
		return childBadConfig
	}
	ev := NewEventWriter(os.Stdout)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := idem.JournalOptions{Logger: log}
	if cfg.SyncLog != "" {
		sl, err := OpenSyncLog(cfg.SyncLog)
		if err != nil {
			fmt.Fprintln(os.Stderr, "batch child:", err)
			return childBadConfig
		}
		defer sl.Close()
		opts.WrapFile = sl.Wrap
	}
	j, err := idem.OpenJournalWithOptions(cfg.Journal, opts)
	if err != nil {
		ev.Line("journal-error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return childJournalError
	}
	defer j.Close()
	pending := list(j, idem.ListPending)
	for _, op := range pending {
		ev.Resumed(op.ID)
	}
	ev.Line("opened operations=%d pending=%d truncated=%d", len(list(j, idem.ListAll)), len(pending), j.Stats().Truncated)

	tr := NewTransport()
	defer tr.CloseIdleConnections()
	ccfg := clientConfig(j, &http.Client{Transport: tr})
	ccfg.Logger = log
	Instrument(&ccfg, ev)
	c, err := idem.New(ccfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batch child:", err)
		return childBadConfig
	}
	w := Workload{BaseURL: cfg.URL, ClientID: cfg.ClientID, Ops: cfg.Ops}
	ops := make([]idem.BatchOp, w.Ops)
	for i := range ops {
		ops[i] = idem.BatchOp{ID: OperationID(i), Request: func(ctx context.Context) (*http.Request, error) {
			return w.Request(ctx, i)
		}}
	}
	outcomes := 0
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		if r.Recorded {
			// Done in an earlier run, whose report of it the kill may
			// have cut off. A line of its own, so that the parent does
			// not count it as progress.
			ev.Line("recorded %s %s", r.ID, batchResult(r))
			return
		}
		ev.Outcome(r.ID, batchResult(r))
		outcomes++
		if cfg.CompactEvery > 0 && outcomes%cfg.CompactEvery == 0 {
			if err := j.Compact(); err != nil {
				ev.Line("compact-error %s", err)
			}
		}
	}
	for round := range cfg.Rounds {
		sum, err := c.RunBatch(context.Background(), ops, idem.BatchOptions{Concurrency: cfg.Concurrency, Progress: progress})
		if err != nil {
			fmt.Fprintln(os.Stderr, "batch child:", err)
			return childBadConfig
		}
		if sum.Done == len(ops) {
			ev.Line("finished rounds=%d", round+1)
			if err := j.Close(); err != nil {
				ev.Line("journal-error closing: %s", err)
				return childJournalError
			}
			return childFinished
		}
		if sum.Unknown == 0 {
			ev.Line("unfinished %+v", sum)
			return childUnfinished
		}
		time.Sleep(time.Duration(min(round+1, 25)) * 10 * time.Millisecond) // a caller's pause before re-running
	}
	ev.Line("unfinished after %d rounds", cfg.Rounds)
	return childUnfinished
}

// batchResult is the Result of one operation of a batch.
func batchResult(r idem.BatchResult) Result {
	switch r.Outcome {
	case idem.OutcomeDone:
		return ResultDone
	case idem.OutcomeRejected:
		return ResultRejected
	case idem.OutcomeUnknown:
		return ResultUnknown
	}
	return ResultRefused
}
