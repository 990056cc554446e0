package loadbench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0ns",
		850:                     "850ns",
		96_240:                  "96.2µs",
		231_000:                 "231µs",
		1_214_000:               "1.21ms",
		15_560_000:              "15.6ms",
		2 * time.Second:         "2.00s",
		-30 * time.Microsecond:  "-30.0µs",
		100 * time.Microsecond:  "100µs",
		9_999 * time.Nanosecond: "10.00µs",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%d) = %q, want %q", int64(d), got, want)
		}
	}
}

func TestSignedDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "+0ns", 3600: "+3.60µs", -440: "-440ns", -6_640: "-6.64µs"} {
		if got := signedDuration(d); got != want {
			t.Errorf("signedDuration(%d) = %q, want %q", int64(d), got, want)
		}
	}
}

func TestFormatCount(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 7: "7", 999.5: "1,000", 12345: "12,345", 1234567.4: "1,234,567", -4321: "-4,321"} {
		if got := formatCount(x); got != want {
			t.Errorf("formatCount(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestCellsMeasureTheUnkeyedServerBesideTheServer(t *testing.T) {
	cfg, err := Config{Concurrency: []int{1, 16}, Targets: []Target{TargetServerUnkeyed, TargetServer},
		Clients: []Client{ClientNetHTTP, ClientIdem}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cfg.cells(1) {
		got = append(got, c.String())
	}
	want := "run 1: server c=1 net/http|run 1: server c=1 idem|run 1: server-unkeyed c=1 net/http|" +
		"run 1: server c=16 net/http|run 1: server c=16 idem|run 1: server-unkeyed c=16 net/http"
	if strings.Join(got, "|") != want {
		t.Errorf("cells\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
}

func TestCellsRotateTheClientsFromRunToRun(t *testing.T) {
	cfg, err := Config{Concurrency: []int{1}, Targets: []Target{TargetTrivial, TargetServerUnkeyed},
		Clients: []Client{ClientNetHTTP, ClientIdem, ClientIdemJournal}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for run, want := range map[int]string{
		1: "run 1: trivial c=1 net/http|run 1: trivial c=1 idem|run 1: trivial c=1 idem+journal|run 1: server-unkeyed c=1 net/http",
		2: "run 2: trivial c=1 idem|run 2: trivial c=1 idem+journal|run 2: trivial c=1 net/http|run 2: server-unkeyed c=1 net/http",
	} {
		var got []string
		for _, c := range cfg.cells(run) {
			got = append(got, c.String())
		}
		if strings.Join(got, "|") != want {
			t.Errorf("run %d: cells\n%s\nwant\n%s", run, strings.Join(got, "|"), want)
		}
	}
}

// sample is a measurement with the fields the table and the targets read.
func sample(rps float64, p50 time.Duration, allocs float64) Sample {
	return Sample{Ops: int64(rps), Elapsed: time.Second, RequestsPerSec: rps, P50: p50, P99: 4 * p50,
		CPUPerOp: time.Duration(1.5e9 / rps), AllocsPerOp: allocs, BytesPerOp: 100 * allocs}
}

// fixedReport is a report of two runs whose figures are chosen so that
// every target but two is met.
func fixedReport() *Report {
	r := &Report{
		Machine: Machine{GOOS: "linux", GOARCH: "amd64", GoVersion: "go1.26.8", NumCPU: 2, GOMAXPROCS: 2,
			Fsync: FsyncLatency{Dir: "/tmp/b", Samples: 200, WriteSize: 128, P50: 300 * time.Microsecond, P99: 2 * time.Millisecond}},
		Settings: Settings{Duration: 2 * time.Second, Warmup: 300 * time.Millisecond, Runs: 2, Concurrency: []int{1, 16},
			Targets: AllTargets, Clients: []Client{ClientNetHTTP, ClientNetHTTPFsync, ClientIdem, ClientIdemJournal}},
	}
	journal := func(s Sample, fsyncs float64, recPerSec float64) Sample {
		s.FsyncsPerOp = fsyncs
		s.Recovery = &Recovery{Records: int64(2 * s.Ops), Operations: int(s.Ops), Elapsed: time.Duration(float64(2*s.Ops) / recPerSec * 1e9),
			RecordsPerSec: recPerSec, HeapBytesPerOp: 600}
		return s
	}
	add := func(t Target, n int, c Client, runs ...Sample) {
		r.Rows = append(r.Rows, Row{Target: t, Concurrency: n, Client: c, Runs: runs, Median: medianSample(runs)})
	}
	add(TargetTrivial, 1, ClientNetHTTP, sample(20000, 40*time.Microsecond, 90), sample(22000, 44*time.Microsecond, 92))
	add(TargetTrivial, 1, ClientNetHTTPFsync, sample(3500, 280*time.Microsecond, 92), sample(3600, 290*time.Microsecond, 92))
	add(TargetTrivial, 1, ClientIdem, sample(19000, 45*time.Microsecond, 110), sample(21000, 47*time.Microsecond, 112))
	add(TargetTrivial, 1, ClientIdemJournal, journal(sample(2800, 350*time.Microsecond, 111), 1, 2e6), journal(sample(2900, 340*time.Microsecond, 111), 1, 2.2e6))
	add(TargetTrivial, 16, ClientNetHTTP, sample(30000, 500*time.Microsecond, 90), sample(30000, 500*time.Microsecond, 90))
	add(TargetTrivial, 16, ClientIdem, sample(29000, 520*time.Microsecond, 110), sample(28000, 530*time.Microsecond, 110))
	add(TargetTrivial, 16, ClientIdemJournal, journal(sample(22000, 700*time.Microsecond, 111), 0.0625, 2.4e6), journal(sample(21000, 720*time.Microsecond, 111), 0.0625, 2.5e6))
	add(TargetServer, 16, ClientNetHTTP, sample(1500, 10*time.Millisecond, 280), sample(1600, 10*time.Millisecond, 280))
	add(TargetServerUnkeyed, 16, ClientNetHTTP, sample(2000, 8*time.Millisecond, 180), sample(2000, 8*time.Millisecond, 180))
	for i := range r.Rows {
		row := &r.Rows[i]
		for _, p := range r.Rows {
			if p.Target == row.Target && p.Concurrency == row.Concurrency && p.Client == ClientNetHTTP {
				row.Ratio = pairedRatio(row.Runs, p.Runs)
			}
		}
	}
	r.Rows[3].Runs[1].Errors, r.Rows[3].Runs[1].FirstError = 2, "status 500 Internal Server Error"
	r.Rows[3].Median = medianSample(r.Rows[3].Runs)
	r.Checks = checks(r)
	return r
}

func TestChecksHoldTheRowsAgainstTheTargets(t *testing.T) {
	want := []Check{
		{"idem without a journal vs net/http, trivial handler, c=16", "≥ 0.95×", "0.95× (CPU per request 52.6µs vs 50.0µs)", true},
		{"idem with the journal vs idem without, trivial handler, c=16", "≥ 0.70×", "0.75× (0.062 fsyncs/op)", true},
		{"idem with the journal, p50 latency over net/http after one fsync, trivial handler, c=1", "≤ 1.10×", "1.21× (345µs vs 285µs; fsync p50 300µs)", false},
		{"journal recovery: reopening the largest journal a cell wrote", "≥ 1,000,000 records/s", "2,450,000 records/s (43,000 records in 17.6ms; 600 B of heap per operation)", true},
		{"reference server, idempotency layer on vs off, net/http, c=16", "≥ 0.80×", "0.78× (1,550 vs 2,000 req/s)", false},
	}
	got := fixedReport().Checks
	if len(got) != len(want) {
		t.Fatalf("%d checks, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("check %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// With go-retryablehttp measured, idem is held against it, the library it
// wraps: requests per second (the median of the runs' ratios) and
// allocations per request (the medians' difference).
func TestChecksHoldIdemAgainstRetryablehttp(t *testing.T) {
	for _, c := range []struct {
		name     string
		rps      [2]float64
		allocs   float64
		measured string
		met      bool
	}{
		{"met", [2]float64{9600, 9400}, 109, "0.95×, +15 allocations (CPU per request 158µs vs 150µs)", true},
		{"slower", [2]float64{9000, 9400}, 100, "0.92×, +6 allocations (CPU per request 163µs vs 150µs)", false},
		{"more allocations", [2]float64{10000, 10000}, 110, "1.00×, +16 allocations (CPU per request 150µs vs 150µs)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{Settings: Settings{Concurrency: []int{64}}}
			add := func(cl Client, runs ...Sample) {
				r.Rows = append(r.Rows, Row{Target: TargetTrivial, Concurrency: 64, Client: cl, Runs: runs, Median: medianSample(runs)})
			}
			add(ClientRetryable, sample(10000, time.Millisecond, 94), sample(10000, time.Millisecond, 94))
			add(ClientIdem, sample(c.rps[0], time.Millisecond, c.allocs), sample(c.rps[1], time.Millisecond, c.allocs))
			want := Check{"idem without a journal vs go-retryablehttp, trivial handler, c=64", "≥ 0.95×, ≤ +15 allocations per request", c.measured, c.met}
			if got := checks(r); len(got) != 1 || got[0] != want {
				t.Fatalf("checks = %+v\nwant [%+v]", got, want)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `machine: go1.26.8 linux/amd64, NumCPU 2, GOMAXPROCS 2
disk:    fsync p50 300µs, p99 2.00ms (200 fsyncs, each after a 128-byte append, in /tmp/b, before each run)
cells:   300ms warm-up, 2.00s measured, 2 runs; medians over the runs; ×net/http is the median of each run's ratio

  target          conc  client           req/s  ×net/http     p50     p99            cpu/op  allocs/op    B/op  fsyncs/op  errors
  trivial            1  net/http        21,000       1.00  42.0µs   168µs            71.6µs         91   9,100          -       0
  trivial            1  net/http+fsync   3,550       0.17   285µs  1.14ms    423µs (+351µs)    92 (+1)   9,200          -       0
  trivial            1  idem            20,000       0.95  46.0µs   184µs  75.2µs (+3.60µs)  111 (+20)  11,100          -       0
  trivial            1  idem+journal     2,850       0.14   345µs  1.38ms    526µs (+455µs)  111 (+20)  11,100      1.000       2
  trivial           16  net/http        30,000       1.00   500µs  2.00ms            50.0µs         90   9,000          -       0
  trivial           16  idem            28,500       0.95   525µs  2.10ms  52.6µs (+2.65µs)  110 (+20)  11,000          -       0
  trivial           16  idem+journal    21,500       0.72   710µs  2.84ms  69.8µs (+19.8µs)  111 (+21)  11,100      0.062       0
  server            16  net/http         1,550       1.00  10.0ms  40.0ms             969µs        280  28,000          -       0
  server-unkeyed    16  net/http         2,000       1.00  8.00ms  32.0ms             750µs        180  18,000          -       0

failed requests:
  trivial c=1 idem+journal: 2 failed; first: status 500 Internal Server Error

journal reopened after each idem+journal cell (medians):
  target          conc  records    open  records/s  heap B/op
  trivial            1    5,700  2.72ms  2,100,000        600
  trivial           16   43,000  17.6ms  2,450,000        600

targets:
  met     idem without a journal vs net/http, trivial handler, c=16
          want ≥ 0.95×, measured 0.95× (CPU per request 52.6µs vs 50.0µs)
  met     idem with the journal vs idem without, trivial handler, c=16
          want ≥ 0.70×, measured 0.75× (0.062 fsyncs/op)
  MISSED  idem with the journal, p50 latency over net/http after one fsync, trivial handler, c=1
          want ≤ 1.10×, measured 1.21× (345µs vs 285µs; fsync p50 300µs)
  met     journal recovery: reopening the largest journal a cell wrote
          want ≥ 1,000,000 records/s, measured 2,450,000 records/s (43,000 records in 17.6ms; 600 B of heap per operation)
  MISSED  reference server, idempotency layer on vs off, net/http, c=16
          want ≥ 0.80×, measured 0.78× (1,550 vs 2,000 req/s)
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteJSONNamesUnits(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine struct {
			Fsync struct {
				P50 int64 `json:"p50_ns"`
			} `json:"fsync"`
		} `json:"machine"`
		Rows []struct {
			Target string  `json:"target"`
			Client string  `json:"client"`
			Ratio  float64 `json:"ratio_to_net_http"`
			Median struct {
				RPS      float64 `json:"requests_per_sec"`
				P50      int64   `json:"p50_ns"`
				Recovery *struct {
					RecordsPerSec float64 `json:"records_per_sec"`
				} `json:"recovery"`
			} `json:"median"`
		} `json:"rows"`
		Targets []struct {
			Met bool `json:"met"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Machine.Fsync.P50 != 300_000 || len(doc.Rows) != 9 || len(doc.Targets) != 5 {
		t.Fatalf("decoded %+v: want fsync p50 300000ns, 9 rows, 5 targets", doc)
	}
	r := doc.Rows[3]
	if r.Target != "trivial" || r.Client != "idem+journal" || r.Median.RPS != 2850 || r.Median.P50 != 345_000 ||
		r.Median.Recovery == nil || r.Median.Recovery.RecordsPerSec != 2.1e6 {
		t.Errorf("row 3 %+v: want trivial idem+journal, 2850 req/s, p50 345000ns, recovery 2.1e6 records/s", r)
	}
}
