package loadbench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgserver"
)

// Report is what a run measured.
type Report struct {
	Machine  Machine       `json:"machine"`
	Settings Settings      `json:"settings"`
	Started  time.Time     `json:"started"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Rows     []Row         `json:"rows"`
	Checks   []Check       `json:"targets"`
}

// Settings are the Config a report was measured with.
type Settings struct {
	Duration    time.Duration `json:"duration_ns"`
	Warmup      time.Duration `json:"warmup_ns"`
	Runs        int           `json:"runs"`
	Concurrency []int         `json:"concurrency"`
	Targets     []Target      `json:"targets"`
	Clients     []Client      `json:"clients"`
}

// Row is one cell's measurements over the runs.
type Row struct {
	Target      Target `json:"target"`
	Concurrency int    `json:"concurrency"`
	Client      Client `json:"client"`
	// Median holds the median of each field over Runs; Errors is their
	// sum.
	Median Sample `json:"median"`
	// Ratio is the row's throughput over plain net/http's on the same
	// target at the same concurrency: the median, over the runs, of the
	// ratio within each run. Zero when net/http was not measured.
	Ratio float64  `json:"ratio_to_net_http"`
	Runs  []Sample `json:"runs"`
}

// Run measures cfg's grid and returns the report. It stops at the first
// cell that cannot be set up (a target or journal that fails to start) and
// when ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	if cfg.usesPostgres() && cfg.PostgresDSN == "" {
		pg, err := pgserver.Start(ctx)
		if err != nil {
			return nil, fmt.Errorf("loadbench: starting PostgreSQL for %s or the server-pg targets (or give a DSN): %w", ClientIdemPostgres, err)
		}
		defer pg.Close()
		cfg.PostgresDSN = pg.DSN()
	}
	r := &Report{
		Started: time.Now(),
		Settings: Settings{
			Duration: cfg.Duration, Warmup: cfg.Warmup, Runs: cfg.Runs,
			Concurrency: cfg.Concurrency, Targets: cfg.Targets, Clients: cfg.Clients,
		},
	}
	r.Machine = describeMachine()
	var fsyncs []time.Duration

	type key struct {
		t Target
		n int
		c Client
	}
	samples := map[key][]Sample{}
	total := cfg.Runs * len(cfg.cells(1))
	done, seq := 0, 0
	for run := 1; run <= cfg.Runs; run++ {
		lat, err := fsyncSamples(cfg.Dir, cfg.FsyncSamples)
		if err != nil {
			return nil, err
		}
		fsyncs = append(fsyncs, lat...)
		for _, c := range cfg.cells(run) {
			if cfg.Progress != nil {
				cfg.Progress(done, total, c)
			}
			seq++
			s, err := runCell(ctx, cfg, c, seq)
			if err != nil {
				return nil, err
			}
			k := key{c.Target, c.Concurrency, c.Client}
			samples[k] = append(samples[k], s)
			done++
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(done, total, Cell{})
	}
	r.Machine.Fsync = summarizeFsync(cfg.Dir, fsyncs)

	for _, t := range cfg.Targets {
		for _, n := range cfg.Concurrency {
			plain := samples[key{t, n, ClientNetHTTP}]
			for _, c := range cfg.clientsFor(t) {
				runs := samples[key{t, n, c}]
				r.Rows = append(r.Rows, Row{Target: t, Concurrency: n, Client: c,
					Median: medianSample(runs), Ratio: pairedRatio(runs, plain), Runs: runs})
			}
		}
	}
	r.Elapsed = time.Since(r.Started)
	r.Checks = checks(r)
	return r, nil
}

// pairedRatio is the median over runs of a[i]'s throughput over b[i]'s; 0
// when they cannot be paired.
func pairedRatio(a, b []Sample) float64 {
	if len(a) == 0 || len(a) != len(b) {
		return 0
	}
	ratios := make([]float64, len(a))
	for i := range a {
		if b[i].RequestsPerSec == 0 {
			return 0
		}
		ratios[i] = a[i].RequestsPerSec / b[i].RequestsPerSec
	}
	return median(ratios)
}

// median returns the median of xs (the mean of the middle two for an even
// count); 0 for none.
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianSample takes the median of each field of runs separately; errors
// are summed, and the first error kept.
func medianSample(runs []Sample) Sample {
	field := func(f func(Sample) float64) float64 {
		xs := make([]float64, len(runs))
		for i, s := range runs {
			xs[i] = f(s)
		}
		return median(xs)
	}
	dur := func(f func(Sample) time.Duration) time.Duration {
		xs := make([]time.Duration, len(runs))
		for i, s := range runs {
			xs[i] = f(s)
		}
		return median(xs)
	}
	var m Sample
	m.Ops = int64(field(func(s Sample) float64 { return float64(s.Ops) }))
	m.Elapsed = dur(func(s Sample) time.Duration { return s.Elapsed })
	m.RequestsPerSec = field(func(s Sample) float64 { return s.RequestsPerSec })
	m.P50 = dur(func(s Sample) time.Duration { return s.P50 })
	m.P99 = dur(func(s Sample) time.Duration { return s.P99 })
	m.AllocsPerOp = field(func(s Sample) float64 { return s.AllocsPerOp })
	m.BytesPerOp = field(func(s Sample) float64 { return s.BytesPerOp })
	m.CPUPerOp = dur(func(s Sample) time.Duration { return s.CPUPerOp })
	m.FsyncsPerOp = field(func(s Sample) float64 { return s.FsyncsPerOp })
	m.GCShare = field(func(s Sample) float64 { return s.GCShare })
	m.LiveHeapBytes = uint64(field(func(s Sample) float64 { return float64(s.LiveHeapBytes) }))
	var recs []Recovery
	for _, s := range runs {
		m.Errors += s.Errors
		if m.FirstError == "" {
			m.FirstError = s.FirstError
		}
		if s.Recovery != nil {
			recs = append(recs, *s.Recovery)
		}
	}
	if len(recs) > 0 {
		rf := func(f func(Recovery) float64) float64 {
			xs := make([]float64, len(recs))
			for i, r := range recs {
				xs[i] = f(r)
			}
			return median(xs)
		}
		m.Recovery = &Recovery{
			Records:        int64(rf(func(r Recovery) float64 { return float64(r.Records) })),
			Operations:     int(rf(func(r Recovery) float64 { return float64(r.Operations) })),
			Elapsed:        time.Duration(rf(func(r Recovery) float64 { return float64(r.Elapsed) })),
			RecordsPerSec:  rf(func(r Recovery) float64 { return r.RecordsPerSec }),
			HeapBytesPerOp: rf(func(r Recovery) float64 { return r.HeapBytesPerOp }),
		}
	}
	return m
}
