package loadbench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/testserver"
	"github.com/jackc/pgx/v5"
)

func TestCellsMeasureThePostgresTargetsBesideTheServer(t *testing.T) {
	cfg, err := Config{Concurrency: []int{16, 64},
		Targets: []Target{TargetServerPostgres3, TargetServer, TargetServerPostgresUnkeyed, TargetServerPostgres, TargetServerUnkeyed},
		Clients: []Client{ClientNetHTTP, ClientIdem}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cfg.cells(1) {
		got = append(got, c.String())
	}
	want := "run 1: server c=16 net/http|run 1: server c=16 idem|run 1: server-unkeyed c=16 net/http|" +
		"run 1: server-pg c=16 net/http|run 1: server-pg-3 c=16 net/http|run 1: server-pg-unkeyed c=16 net/http|" +
		"run 1: server c=64 net/http|run 1: server c=64 idem|run 1: server-unkeyed c=64 net/http|" +
		"run 1: server-pg c=64 net/http|run 1: server-pg-3 c=64 net/http|run 1: server-pg-unkeyed c=64 net/http"
	if strings.Join(got, "|") != want {
		t.Errorf("cells\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	if !cfg.usesPostgres() {
		t.Error("a grid with server-pg does not ask for PostgreSQL")
	}
}

func TestCellsOfThePostgresTargetsAlone(t *testing.T) {
	cfg, err := Config{Concurrency: []int{16}, Targets: []Target{TargetServerPostgres, TargetServerPostgres3},
		Clients: []Client{ClientNetHTTP, ClientIdem}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cfg.cells(2) {
		got = append(got, c.String())
	}
	if want := "run 2: server-pg c=16 net/http|run 2: server-pg-3 c=16 net/http"; strings.Join(got, "|") != want {
		t.Errorf("cells %s, want %s", strings.Join(got, "|"), want)
	}
}

func TestThePostgresTargetsNeedNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Targets: []Target{TargetServerPostgres3}, Clients: []Client{ClientIdem}},
			"loadbench: target server-pg-3 is measured with client net/http, which is not selected"},
		{Config{Targets: []Target{"server-pg-5"}},
			`loadbench: unknown target "server-pg-5" (want one of [trivial server server-unkeyed server-pg server-pg-3 server-pg-unkeyed])`},
	} {
		if _, err := tc.cfg.withDefaults(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: error %v, want %s", tc.cfg, err, tc.want)
		}
	}
	cfg, err := Config{Targets: AllTargets, Clients: AllClients}.withDefaults()
	if err != nil || cfg.usesPostgres() {
		t.Errorf("the default grid: %v, uses PostgreSQL %v; want no error and no PostgreSQL", err, cfg.usesPostgres())
	}
}

func TestWithDatabaseNamesTheCellsDatabase(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://bench@127.0.0.1:5432/postgres?sslmode=disable": "postgres://bench@127.0.0.1:5432/loadbench_server_7?sslmode=disable",
		"postgresql://127.0.0.1:5433":                              "postgresql://127.0.0.1:5433/loadbench_server_7",
		"host=127.0.0.1 port=5432 dbname=postgres":                 "host=127.0.0.1 port=5432 dbname=postgres dbname=loadbench_server_7",
	} {
		got, err := withDatabase(dsn, "loadbench_server_7")
		if err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
}

// TestInTurnHandsTheRequestsToEachServerInTurn: five writes to three
// servers are two, two and one, as each server's /stats counts them.
func TestInTurnHandsTheRequestsToEachServerInTurn(t *testing.T) {
	var servers []*testserver.Server
	for range 3 {
		s, err := testserver.New(testserver.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		servers = append(servers, s)
	}
	front := httptest.NewServer(&inTurn{servers: servers})
	defer front.Close()
	for i := range 5 {
		req, err := http.NewRequest(http.MethodPut, front.URL+"/inventory/sku-1", strings.NewReader(`{"available": 5}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(testserver.HeaderIdempotencyKey, "stock-"+string(rune('a'+i)))
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %d: %s", i, resp.Status)
		}
	}
	for i, want := range []int64{2, 2, 1} {
		rec := httptest.NewRecorder()
		servers[i].ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/stats", nil))
		var st testserver.Stats
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if st.Requests != want {
			t.Errorf("server %d counted %d requests, want %d", i, st.Requests, want)
		}
	}
}

// sampleRuns is a row's runs at the given throughputs.
func sampleRuns(rps ...float64) []Sample {
	var out []Sample
	for _, x := range rps {
		out = append(out, sample(x, time.Duration(1e9/x)*16, 100))
	}
	return out
}

func TestTheServerTableComparesTheStores(t *testing.T) {
	var rows []Row
	add := func(tg Target, n int, c Client, runs []Sample) {
		rows = append(rows, Row{Target: tg, Concurrency: n, Client: c, Runs: runs, Median: medianSample(runs)})
	}
	failing := func(runs []Sample, errs ...int64) []Sample {
		for i := range runs {
			runs[i].Errors = errs[i]
		}
		return runs
	}
	add(TargetServer, 16, ClientNetHTTP, sampleRuns(1000, 1200, 1100))
	add(TargetServer, 16, ClientIdem, sampleRuns(900, 1000, 950))
	add(TargetServerUnkeyed, 16, ClientNetHTTP, sampleRuns(1250, 1500, 1375))
	// 500 of 1000, 60 of 600 and 0 of 660 requests failed: 500, 540 and
	// 660 succeeded per second.
	add(TargetServerPostgres, 16, ClientNetHTTP, failing(sampleRuns(1000, 600, 660), 500, 60, 0))
	add(TargetServerPostgres3, 16, ClientNetHTTP, sampleRuns(450, 600, 550))
	add(TargetServerPostgresUnkeyed, 16, ClientNetHTTP, sampleRuns(1000, 1000, 1100))
	var b strings.Builder
	if err := writeServerTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `
reference server, POST /reservations, net/http, successful requests only (×sqlite: over server on SQLite; ×layer-off: over the same store without the idempotency layer; medians of each run's ratio):
  target             conc  ok req/s  ×sqlite  ×layer-off  failed     p50     p99
  server               16     1,100     1.00        0.80       0  14.5ms  58.2ms
  server-unkeyed       16     1,375     1.25           -       0  11.6ms  46.5ms
  server-pg            16       540     0.50        0.54   24.8%  24.2ms  97.0ms
  server-pg-3          16       550     0.50           -       0  29.1ms   116ms
  server-pg-unkeyed    16     1,000     1.00           -       0  16.0ms  64.0ms
`
	if got := b.String(); got != want {
		t.Errorf("table\n%s\nwant\n%s", got, want)
	}

	b.Reset()
	if err := writeServerTable(&b, rows[:3]); err != nil || b.Len() != 0 {
		t.Errorf("without PostgreSQL rows: %q, %v; want nothing", b.String(), err)
	}
}

// The PostgreSQL targets in miniature, on a server of the test's own: each
// cell serves its requests from a database of its own, dropped afterwards.
// Only the report's shape is checked: no figure is asserted.
func TestRunMeasuresThePostgresTargets(t *testing.T) {
	pg := pgtest.Own(t)
	targets := []Target{TargetServer, TargetServerPostgres, TargetServerPostgres3, TargetServerPostgresUnkeyed}
	r, err := Run(context.Background(), Config{
		Duration: 50 * time.Millisecond, Warmup: 10 * time.Millisecond, Runs: 1, Concurrency: []int{2},
		Targets: targets, Clients: []Client{ClientNetHTTP}, Dir: t.TempDir(), FsyncSamples: 1, PostgresDSN: pg.DSN(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != len(targets) {
		t.Fatalf("%d rows, want %d", len(r.Rows), len(targets))
	}
	for i, row := range r.Rows {
		if row.Target != targets[i] || row.Client != ClientNetHTTP || row.Median.Ops == 0 {
			t.Errorf("row %d: %s %s with %d operations, want %s net/http with some", i, row.Target, row.Client, row.Median.Ops, targets[i])
		}
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nreference server, POST /reservations, net/http, successful requests only (×sqlite") {
		t.Errorf("the table has no comparison of the stores:\n%s", b.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'loadbench_server_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d cell databases left behind, want none", left)
	}
}

func TestThePostgresTargetsNeedAURL(t *testing.T) {
	_, err := startPostgresServers(context.Background(), "host=127.0.0.1 dbname=postgres", 1, 1, false)
	if err == nil || !strings.Contains(err.Error(), "need the PostgreSQL DSN as a postgres:// URL") {
		t.Fatalf("error %v, want the DSN refused", err)
	}
}
