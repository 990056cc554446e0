package loadbench

// The fleet benchmark: one batch shared by several processes (F7).

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/lab/testkit/pgserver"
	"github.com/idemkit/idem/pgjournal"
	"github.com/idemkit/idem/testserver"
)

// Defaults of FleetConfig.
const (
	DefaultFleetOps         = 120
	DefaultFleetConcurrency = 4
	DefaultFleetLatency     = 300 * time.Millisecond
)

// fleetWorkerEnv names the environment variable that makes idem-bench run
// as one process of a fleet (runFleetWorker) rather than measure; its
// value is a fleetWorker in JSON.
const fleetWorkerEnv = "IDEM_BENCH_FLEET_WORKER"

// FleetConfig is a run of the fleet benchmark: for each size, that many
// processes run one batch of Ops operations at once, each with
// Client.RunBatch at Concurrency, sharing a PostgreSQL journal, against
// the reference server on a SQLite file delaying every request by Latency.
type FleetConfig struct {
	Sizes       []int // numbers of processes, e.g. 1, 2, 3
	Ops         int
	Concurrency int
	Latency     time.Duration
	Runs        int    // each size is measured this many times; the report gives medians
	PostgresDSN string // the journal's database; empty: a server started for the run
	Dir         string // the reference server's database; empty: a temporary directory

	// KillAfter, when set, adds a row for each size in which the fleet's
	// first process is SIGKILLed that long after the start and started
	// again at once, as a new process: how long a restart takes to
	// resume what the killed process held.
	KillAfter time.Duration
}

// FleetRow is the measure of one fleet size.
type FleetRow struct {
	Processes int             `json:"processes"`
	Killed    bool            `json:"killed"`     // the first process SIGKILLed after KillAfter and restarted
	Elapsed   []time.Duration `json:"elapsed_ns"` // per run: from the common start to the last process's end
	OpsPerSec float64         `json:"ops_per_sec"`
	Median    time.Duration   `json:"median_ns"`
	// Sent is, for the run of median time, how many operations each
	// process sent itself (the rest it counted as Recorded: finished by
	// another).
	Sent []int `json:"sent"`
	// Applied is, per run, how many operations the reference server
	// applied: the batch's size, unless one was applied twice or not at
	// all.
	Applied []int `json:"applied"`
}

// FleetReport is the fleet benchmark's result.
type FleetReport struct {
	Started time.Time   `json:"started"`
	Config  FleetConfig `json:"config"`
	Machine Machine     `json:"machine"`
	Rows    []FleetRow  `json:"rows"`
}

// fleetWorker is what the benchmark tells one process of a fleet.
type fleetWorker struct {
	DSN, Namespace, URL, StartFile string
	Ops, Concurrency               int
}

// fleetResult is what a process of a fleet reports on its last line.
type fleetResult struct {
	Elapsed time.Duration
	Summary idem.BatchSummary
}

// RunFleet measures cfg.
func RunFleet(ctx context.Context, cfg FleetConfig) (*FleetReport, error) {
	if len(cfg.Sizes) == 0 || cfg.Ops < 1 || cfg.Concurrency < 1 || cfg.Latency < 0 || cfg.Runs < 1 {
		return nil, errors.New("loadbench: a fleet needs sizes, operations, concurrency and runs, and a latency not negative")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("loadbench: finding idem-bench's binary for the fleet's processes: %w", err)
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "idem-bench-fleet-")
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	dsn := cfg.PostgresDSN
	if dsn == "" {
		pg, err := pgserver.Start(ctx)
		if err != nil {
			return nil, fmt.Errorf("loadbench: starting PostgreSQL for the fleet's journal (or give a DSN): %w", err)
		}
		defer pg.Close()
		dsn = pg.DSN()
	}
	s, err := testserver.New(testserver.Config{Path: filepath.Join(cfg.Dir, "server.db"),
		Faults: testserver.Faults{DelayRate: 1, Delay: cfg.Latency}})
	if err != nil {
		return nil, fmt.Errorf("loadbench: starting the reference server: %w", err)
	}
	srv := httptest.NewServer(s)
	defer func() { srv.Close(); s.Close() }()
	if err := stock(ctx, srv); err != nil {
		return nil, err
	}

	r := &FleetReport{Started: time.Now(), Config: cfg, Machine: describeMachine()}
	r.Config.PostgresDSN = "" // may hold a password
	sent := map[int][][]int{}
	for _, n := range cfg.Sizes {
		r.Rows = append(r.Rows, FleetRow{Processes: n})
		if cfg.KillAfter > 0 {
			r.Rows = append(r.Rows, FleetRow{Processes: n, Killed: true})
		}
	}
	for run := 1; run <= cfg.Runs; run++ {
		for i := range r.Rows {
			row := &r.Rows[i]
			w := fleetWorker{DSN: dsn, Namespace: fmt.Sprintf("fleet-%d-%d", run, row.Processes),
				URL: srv.URL + "/reservations", Ops: cfg.Ops, Concurrency: cfg.Concurrency,
				StartFile: filepath.Join(cfg.Dir, fmt.Sprintf("start-%d-%d", run, row.Processes))}
			var kill time.Duration
			if row.Killed {
				kill = cfg.KillAfter
				w.Namespace += "-killed"
				w.StartFile += "-killed"
			}
			before, err := available(ctx, srv)
			if err != nil {
				return nil, err
			}
			elapsed, perProcess, err := runFleetOnce(ctx, self, w, row.Processes, kill)
			if err != nil {
				return nil, fmt.Errorf("loadbench: run %d, %d processes: %w", run, row.Processes, err)
			}
			after, err := available(ctx, srv)
			if err != nil {
				return nil, err
			}
			row.Elapsed = append(row.Elapsed, elapsed)
			row.Applied = append(row.Applied, before-after)
			sent[i] = append(sent[i], perProcess)
		}
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		order := make([]int, len(row.Elapsed))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(row.Elapsed[a], row.Elapsed[b]) })
		mid := order[len(order)/2]
		row.Median, row.Sent = row.Elapsed[mid], sent[i][mid]
		row.OpsPerSec = float64(cfg.Ops) / row.Median.Seconds()
	}
	return r, nil
}

// available returns what the reference server holds of the batch's item.
func available(ctx context.Context, srv *httptest.Server) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/inventory/sku-1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, fmt.Errorf("loadbench: reading the reference server's stock: %w", err)
	}
	defer resp.Body.Close()
	var item struct {
		Available int `json:"available"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&item); err != nil {
		return 0, fmt.Errorf("loadbench: reading the reference server's stock: %w", err)
	}
	return item.Available, nil
}

// runFleetOnce runs one batch on n processes of binary at once and returns
// the time from their common start to the last one's end, and how many
// operations each sent itself. With kill, the first process is SIGKILLed
// that long after the start and started again at once; the time then runs
// to the restarted process's end, as this process measures it.
func runFleetOnce(ctx context.Context, binary string, w fleetWorker, n int, kill time.Duration) (time.Duration, []int, error) {
	js, err := json.Marshal(w)
	if err != nil {
		return 0, nil, err
	}
	type proc struct {
		cmd    *exec.Cmd
		lines  chan string
		stderr strings.Builder
	}
	procs := make([]*proc, n)
	defer func() {
		for _, p := range procs {
			if p != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	spawn := func() (*proc, error) {
		p := &proc{cmd: exec.CommandContext(ctx, binary), lines: make(chan string, 4)}
		p.cmd.Env = append(os.Environ(), fleetWorkerEnv+"="+string(js))
		p.cmd.Stderr = &p.stderr
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := p.cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
		}()
		return p, nil
	}
	for i := range procs {
		if procs[i], err = spawn(); err != nil {
			return 0, nil, err
		}
	}
	for i, p := range procs {
		if line := <-p.lines; line != "ready" {
			p.cmd.Wait()
			return 0, nil, fmt.Errorf("process %d did not open its journal: %q %s", i, line, p.stderr.String())
		}
	}
	if err := os.WriteFile(w.StartFile, nil, 0o600); err != nil {
		return 0, nil, err
	}
	start := time.Now()
	if kill > 0 {
		select {
		case <-time.After(kill):
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
		p := procs[0]
		if err := p.cmd.Process.Kill(); err != nil {
			return 0, nil, fmt.Errorf("killing process 0: %w", err)
		}
		for range p.lines {
		}
		p.cmd.Wait()
		if procs[0], err = spawn(); err != nil { // the start file is there: it starts at once
			return 0, nil, err
		}
		if line := <-procs[0].lines; line != "ready" {
			procs[0].cmd.Wait()
			return 0, nil, fmt.Errorf("process 0, restarted, did not open its journal: %q %s", line, procs[0].stderr.String())
		}
	}
	var elapsed time.Duration
	sent := make([]int, n)
	for i, p := range procs {
		var last string
		for line := range p.lines {
			last = line
		}
		if err := p.cmd.Wait(); err != nil {
			return 0, nil, fmt.Errorf("process %d: %w: %s", i, err, p.stderr.String())
		}
		var res fleetResult
		if err := json.Unmarshal([]byte(last), &res); err != nil {
			return 0, nil, fmt.Errorf("process %d's result %q: %w", i, last, err)
		}
		if s := res.Summary; s.Done != w.Ops {
			return 0, nil, fmt.Errorf("process %d ended with %+v, want all %d done", i, s, w.Ops)
		}
		elapsed = max(elapsed, res.Elapsed)
		if kill > 0 {
			elapsed = max(elapsed, time.Since(start))
		}
		sent[i] = res.Summary.Done - res.Summary.Recorded
	}
	return elapsed, sent, nil
}

// runFleetWorker is one process of a fleet: it opens the journal, says
// "ready", waits for the start file, runs the batch and prints its
// fleetResult as JSON.
func runFleetWorker(ctx context.Context, config string, stdout io.Writer) error {
	var w fleetWorker
	if err := json.Unmarshal([]byte(config), &w); err != nil {
		return fmt.Errorf("loadbench: fleet process: %w", err)
	}
	j, err := pgjournal.Open(ctx, w.DSN, pgjournal.Options{Namespace: w.Namespace})
	if err != nil {
		return fmt.Errorf("loadbench: fleet process: %w", err)
	}
	defer j.Close()
	tr := newTransport(w.Concurrency)
	defer tr.CloseIdleConnections()
	c, err := idem.New(idem.Config{Journal: j, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return err
	}
	ops := make([]idem.BatchOp, w.Ops)
	for i := range ops {
		ops[i] = idem.BatchOp{ID: fmt.Sprint("op-", i), Request: func(ctx context.Context) (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, strings.NewReader(string(requestBody)))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
			}
			return req, err
		}}
	}
	fmt.Fprintln(stdout, "ready")
	for {
		if _, err := os.Stat(w.StartFile); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	sum, err := c.RunBatch(ctx, ops, idem.BatchOptions{Concurrency: w.Concurrency})
	if err != nil {
		return err
	}
	js, err := json.Marshal(fleetResult{Elapsed: time.Since(start), Summary: sum})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", js)
	return err
}

// WriteTable prints the report as a table: ops/s and time per fleet size,
// each size's speed over one process's, and what each process sent.
func (r *FleetReport) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "One batch of %d operations shared by a fleet: reference server (SQLite) with %s per request, PostgreSQL journal, concurrency %d per process, median of %d runs\n\n",
		c.Ops, c.Latency, c.Concurrency, c.Runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if c.KillAfter > 0 {
		fmt.Fprintf(tw, "(killed: the first process SIGKILLed %s after the start and restarted at once)\n", c.KillAfter)
	}
	fmt.Fprintln(tw, "processes\tops/s\ttime\tvs 1\tsent by each\tapplied\truns\t")
	var base float64
	for _, row := range r.Rows {
		if !row.Killed && (row.Processes == 1 || base == 0) {
			base = row.OpsPerSec / float64(row.Processes) // a size-1 row if there is one, else per process
		}
		procs := fmt.Sprint(row.Processes)
		if row.Killed {
			procs += " killed"
		}
		runs := make([]string, len(row.Elapsed))
		for i, d := range row.Elapsed {
			runs[i] = formatDuration(d)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.2fx\t%s\t%s\t%s\t\n", procs, row.OpsPerSec, formatDuration(row.Median),
			row.OpsPerSec/base, strings.Trim(fmt.Sprint(row.Sent), "[]"), strings.Trim(fmt.Sprint(row.Applied), "[]"), strings.Join(runs, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m := r.Machine
	_, err := fmt.Fprintf(w, "\n%s/%s, %d CPUs (GOMAXPROCS %d), %s\n", m.GOOS, m.GOARCH, m.NumCPU, m.GOMAXPROCS, m.GoVersion)
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *FleetReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
