package faultsuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/filefaults"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/pgjournal"
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

	// PostgresDSN, when set, makes the journal the shared PostgreSQL
	// journal in that database (Journal is then unused), with leases of
	// LeaseTTL: the child is one machine of a fleet.
	PostgresDSN string
	LeaseTTL    time.Duration

	// Dialect names the client's built-in dialect (idem.DialectNamed);
	// empty for the zero Dialect.
	Dialect string
	// StartFile, when set, makes the child wait, once its journal is
	// open, until the file exists before its first round, so that the
	// machines of a fleet start together; the finished line then says how
	// long the rounds took (elapsed=).
	StartFile string
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
	opts := filejournal.Options{Logger: log}
	if cfg.SyncLog != "" {
		sl, err := OpenSyncLog(cfg.SyncLog)
		if err != nil {
			fmt.Fprintln(os.Stderr, "batch child:", err)
			return childBadConfig
		}
		defer sl.Close()
		opts = filefaults.WrapFiles(opts, sl.Wrap)
	}
	if cfg.PostgresDSN != "" {
		return runFleetChild(cfg, ev, log)
	}
	fj, err := filejournal.Open(cfg.Journal, opts)
	if err != nil {
		ev.Line("journal-error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return childJournalError
	}
	defer fj.Close()
	pending := list(fj, journal.ListPending)
	for _, op := range pending {
		ev.Resumed(op.ID)
	}
	ev.Line("opened operations=%d pending=%d truncated=%d", len(list(fj, journal.ListAll)), len(pending), fj.Stats().Truncated)
	return runBatchRounds(cfg, ev, log, fj, func() error { return fj.Compact() }, fj.Close)
}

// runBatchRounds runs the workload on j until every operation is done.
// compact, when set, compacts the journal; closeJournal makes it durable
// before the child reports it finished.
func runBatchRounds(cfg batchChildConfig, ev *EventWriter, log *slog.Logger, j journal.Journal, compact, closeJournal func() error) int {

	tr := NewTransport()
	defer tr.CloseIdleConnections()
	ccfg := clientConfig(j, &http.Client{Transport: tr})
	ccfg.Logger = log
	if cfg.Dialect != "" {
		d, ok := idem.DialectNamed(cfg.Dialect)
		if !ok {
			fmt.Fprintf(os.Stderr, "batch child: no dialect %q\n", cfg.Dialect)
			return childBadConfig
		}
		ccfg.Dialect = d
	}
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
	outcomes, unavailable := 0, 0
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		if errors.Is(r.Err, journal.ErrUnavailable) {
			// Refused before sending (F6): not an outcome.
			ev.Line("unavailable %s", r.ID)
			unavailable++
			return
		}
		if r.Recorded {
			// Done in an earlier run, whose report of it the kill may
			// have cut off. A line of its own, so that the parent does
			// not count it as progress.
			ev.Line("recorded %s %s", r.ID, batchResult(r))
			return
		}
		ev.Outcome(r.ID, batchResult(r))
		if r.Outcome == idem.OutcomeDone {
			ev.Final(r.ID, r.Status, appliedInBatch(ccfg.Dialect, r))
		}
		outcomes++
		if compact != nil && cfg.CompactEvery > 0 && outcomes%cfg.CompactEvery == 0 {
			if err := compact(); err != nil {
				ev.Line("compact-error %s", err)
			}
		}
	}
	if cfg.StartFile != "" {
		for {
			if _, err := os.Stat(cfg.StartFile); err == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	start := time.Now()
	for round := range cfg.Rounds {
		unavailable = 0
		sum, err := c.RunBatch(context.Background(), ops, idem.BatchOptions{Concurrency: cfg.Concurrency, Progress: progress})
		switch {
		case errors.Is(err, journal.ErrUnavailable):
			// A shared journal's database is down: wait for it.
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			fmt.Fprintln(os.Stderr, "batch child:", err)
			return childBadConfig
		}
		if sum.Done == len(ops) {
			ev.Line("finished rounds=%d elapsed=%s", round+1, time.Since(start))
			if err := closeJournal(); err != nil {
				ev.Line("journal-error closing: %s", err)
				return childJournalError
			}
			return childFinished
		}
		if sum.Unknown == 0 && unavailable == 0 {
			ev.Line("unfinished %+v", sum)
			return childUnfinished
		}
		time.Sleep(time.Duration(min(round+1, 25)) * 10 * time.Millisecond) // a caller's pause before re-running
	}
	ev.Line("unfinished after %d rounds", cfg.Rounds)
	return childUnfinished
}

// appliedInBatch tells whether a batch's done result is an already-applied
// answer. BatchResult does not carry the flag idem.AlreadyApplied reads,
// so a done answer other than 201 counts as applied when the dialect has
// an already-applied signal: the client makes no other non-2xx answer
// done.
func appliedInBatch(d idem.Dialect, r idem.BatchResult) bool {
	if r.Status == http.StatusCreated {
		return false
	}
	for _, s := range d.Signals {
		if s.Answer == idem.AnswerApplied {
			return true
		}
	}
	return false
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

// runFleetChild is the batch client as one machine of a fleet: its journal
// is the shared PostgreSQL journal, which it opens once the database
// answers (the parent restarts the database now and then).
func runFleetChild(cfg batchChildConfig, ev *EventWriter, log *slog.Logger) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		j   *pgjournal.Journal
		err error
	)
	for {
		j, err = pgjournal.Open(ctx, cfg.PostgresDSN, pgjournal.Options{LeaseTTL: cfg.LeaseTTL, Timeout: 2 * time.Second, Logger: log})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		ev.Line("journal-error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		return childJournalError
	}
	defer j.Close()
	pending, err := j.List(ctx, journal.ListPending)
	if err == nil {
		for _, op := range pending {
			ev.Resumed(op.ID)
		}
	}
	ev.Line("opened pending=%d", len(pending))
	return runBatchRounds(cfg, ev, log, j, nil, j.Close)
}
