package loadbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
)

// ErrUsage is returned by Command for bad command-line arguments; the
// problem has already been printed to its stderr.
var ErrUsage = errors.New("loadbench: usage")

// options are the parsed command line.
type options struct {
	cfg        Config
	json       bool
	save       string
	progress   bool
	cpuProfile string
	memProfile string
	trace      string
	fleet      FleetConfig // measured instead of the grid when it has sizes
}

// Command runs the load benchmark as a command-line program: it parses args
// (without the program name), measures, and prints the table to stdout, or
// the JSON report with -json. A progress bar goes to stderr when stderr is
// a terminal. It returns an error wrapping ErrUsage for bad arguments (after
// printing the problem), wrapping flag.ErrHelp for -h, and ctx's error if
// ctx ends first.
//
// The idem-bench binary is this function.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if w := os.Getenv(fleetWorkerEnv); w != "" {
		return runFleetWorker(ctx, w, stdout)
	}
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	if len(o.fleet.Sizes) > 0 {
		r, err := RunFleet(ctx, o.fleet)
		if err != nil {
			return err
		}
		if o.json {
			return r.WriteJSON(stdout)
		}
		return r.WriteTable(stdout)
	}
	for _, r := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{
		{o.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{o.trace, trace.Start, trace.Stop},
	} {
		if r.path == "" {
			continue
		}
		f, err := os.Create(r.path)
		if err != nil {
			return fmt.Errorf("loadbench: %w", err)
		}
		defer f.Close()
		if err := r.start(f); err != nil {
			return fmt.Errorf("loadbench: %w", err)
		}
		defer r.stop()
	}
	if o.progress && isTerminal(stderr) {
		p := newProgress(stderr)
		defer p.finish()
		o.cfg.Progress = p.update
	}
	r, err := Run(ctx, o.cfg)
	if err != nil {
		return err
	}
	if o.memProfile != "" {
		if err := writeAllocsProfile(o.memProfile); err != nil {
			return err
		}
	}
	if o.save != "" {
		if err := saveJSON(r, o.save); err != nil {
			return err
		}
	}
	if o.json {
		return r.WriteJSON(stdout)
	}
	return r.WriteTable(stdout)
}

// saveJSON writes r as JSON to the file at path.
func saveJSON(r *Report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadbench: %w", err)
	}
	err = r.WriteJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("loadbench: saving the report: %w", err)
	}
	return nil
}

// writeAllocsProfile writes the allocations made so far, as go test
// -memprofile does.
func writeAllocsProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadbench: %w", err)
	}
	runtime.GC()
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("loadbench: writing the memory profile: %w", err)
	}
	return nil
}

// parseArgs parses the command line into options.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("idem-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: idem-bench [flags]

Measures what idem costs per request: the same workload through plain
net/http, net/http after an fsync, go-retryablehttp, idem without a journal
and idem with a journal file, against a trivial in-process handler and the
reference server on a SQLite file (or, with the server-pg targets, on
PostgreSQL, one replica or three), at each concurrency, side by side in one
run. Prints requests/s, p50 and p99 latency, allocations per operation and each row's ratio to
net/http, the machine (with the disk's fsync latency) and the targets.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.cfg.Duration, "duration", DefaultDuration, "how long each cell is measured")
	fs.DurationVar(&o.cfg.Warmup, "warmup", DefaultWarmup, "how long each cell runs before it is measured")
	fs.IntVar(&o.cfg.Runs, "runs", DefaultRuns, "how many times the grid is measured (the table gives medians)")
	conc := fs.String("concurrency", joinInts(DefaultConcurrency), "comma-separated numbers of concurrent callers")
	targets := fs.String("targets", joinNames(AllTargets), "comma-separated targets: trivial, server, server-unkeyed, and on PostgreSQL server-pg, server-pg-3 (three replicas), server-pg-unkeyed")
	clients := fs.String("clients", joinNames(AllClients), "comma-separated clients: net/http, net/http+fsync, retryablehttp, idem, idem+journal, idem+postgres")
	pgDSN := fs.String("pg", "", "PostgreSQL `DSN` for the idem+postgres client's journal and the server-pg targets, which create a database per cell in it (default: start a server from /usr/lib/postgresql/15/bin)")
	fs.StringVar(&o.cfg.Dir, "dir", "", "directory for the journals, databases and fsync probe (default: a new temporary directory)")
	fs.IntVar(&o.cfg.FsyncSamples, "fsyncs", DefaultFsyncSamples, "fsyncs the disk's fsync latency is measured over")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.StringVar(&o.save, "save", "", "also write the JSON report to `file`")
	fs.BoolVar(&o.progress, "progress", true, "show a progress bar on stderr when it is a terminal")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `file`")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the run to `file`")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of the run to `file`, for go tool trace: where callers wait (fsync, locks, the network)")
	fleet := fs.String("fleet", "", "comma-separated numbers of processes that share one batch against the reference server with a PostgreSQL journal (e.g. 1,2,3): measure that instead of the grid")
	fs.IntVar(&o.fleet.Ops, "fleet-ops", DefaultFleetOps, "operations of the -fleet batch")
	fs.IntVar(&o.fleet.Concurrency, "fleet-concurrency", DefaultFleetConcurrency, "RunBatch concurrency of each -fleet process")
	fs.DurationVar(&o.fleet.Latency, "fleet-latency", DefaultFleetLatency, "how long the reference server takes over each request of the -fleet batch")
	fs.DurationVar(&o.fleet.KillAfter, "fleet-kill", 0, "also measure each -fleet size with its first process SIGKILLed this long after the start and restarted at once (0: not)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	usage := func(format string, a ...any) (options, error) {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintln(stderr, "idem-bench:", msg)
		return o, fmt.Errorf("%w: %s", ErrUsage, msg)
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.cfg.Concurrency, err = parseInts(*conc); err != nil {
		return usage("-concurrency: %v", err)
	}
	o.cfg.Targets = parseNames[Target](*targets)
	o.cfg.Clients = parseNames[Client](*clients)
	o.cfg.PostgresDSN = *pgDSN
	if *fleet != "" {
		if o.fleet.Sizes, err = parseInts(*fleet); err != nil {
			return usage("-fleet: %v", err)
		}
		o.fleet.Runs, o.fleet.PostgresDSN, o.fleet.Dir = o.cfg.Runs, *pgDSN, o.cfg.Dir
		if o.fleet.Ops < 1 || o.fleet.Concurrency < 1 || o.fleet.Latency < 0 || o.fleet.KillAfter < 0 {
			return usage("-fleet-ops and -fleet-concurrency must be at least 1, -fleet-latency and -fleet-kill not negative")
		}
	}
	if o.cfg.Duration <= 0 || o.cfg.Warmup < 0 || o.cfg.Runs < 1 || o.cfg.FsyncSamples < 1 {
		return usage("-duration must be positive, -warmup not negative, -runs and -fsyncs at least 1")
	}
	if _, err := o.cfg.withDefaults(); err != nil {
		return usage("%v", strings.TrimPrefix(err.Error(), "loadbench: "))
	}
	return o, nil
}

// parseInts parses "1,16,64".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseNames[T ~string](s string) []T {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, T(f))
		}
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func joinNames[T ~string](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ",")
}
