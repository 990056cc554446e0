package loadbench

import (
	"fmt"
	"slices"
	"time"
)

// Target names what the requests are sent to.
type Target string

// The targets.
const (
	// TargetTrivial is an in-process httptest server whose handler reads
	// the body and answers 201 with a fixed JSON body: what is measured is
	// the clients' own cost.
	TargetTrivial Target = "trivial"
	// TargetServer is the reference server (testserver) on a SQLite file,
	// in process, serving POST /reservations with its idempotency layer.
	TargetServer Target = "server"
	// TargetServerUnkeyed is the reference server with its idempotency
	// layer switched off (testserver.Config.DisableIdempotency), measured
	// with plain net/http sending no key: the baseline of what the layer
	// costs the server.
	TargetServerUnkeyed Target = "server-unkeyed"
	// TargetServerPostgres is the reference server in process on a
	// PostgreSQL database of its own (Config.PostgresDSN, or a server the
	// run starts), serving POST /reservations with its idempotency layer:
	// TargetServer on the other store. Not in AllTargets.
	TargetServerPostgres Target = "server-pg"
	// TargetServerPostgres3 is three replicas of the reference server, in
	// process, on one PostgreSQL database, behind an in-process handler
	// that hands the requests to them in turn: each replica has its own
	// connection pool, locks and sweeper, and they meet in the database
	// only. Not in AllTargets.
	TargetServerPostgres3 Target = "server-pg-3"
	// TargetServerPostgresUnkeyed is TargetServerPostgres with the
	// idempotency layer switched off, measured as TargetServerUnkeyed is:
	// what the layer costs on PostgreSQL. Not in AllTargets.
	TargetServerPostgresUnkeyed Target = "server-pg-unkeyed"
)

// postgresReplicas is the number of replicas of TargetServerPostgres3.
const postgresReplicas = 3

// Client names how the requests are sent.
type Client string

// The clients.
const (
	// ClientNetHTTP is a plain *http.Client; each request carries a new
	// random Idempotency-Key, as a careful caller would set by hand.
	ClientNetHTTP Client = "net/http"
	// ClientNetHTTPFsync is ClientNetHTTP that first appends a small
	// record to a file in Config.Dir and fsyncs it, each caller on its own
	// (no group commit): the floor for any client that makes its intent
	// durable before sending, and, at concurrency 1, the latency a journal
	// cannot go below on this machine.
	ClientNetHTTPFsync Client = "net/http+fsync"
	// ClientRetryable is go-retryablehttp with its defaults, sending the
	// same requests and keys as ClientNetHTTP.
	ClientRetryable Client = "retryablehttp"
	// ClientIdem is idem.Client.Do without a journal: keys live in memory.
	ClientIdem Client = "idem"
	// ClientIdemJournal is idem.Client.Do with a journal file in Config.Dir:
	// every operation's intent is fsync'd (group commit) before it is sent.
	ClientIdemJournal Client = "idem+journal"
	// ClientIdemPostgres is idem.Client.Do with the shared PostgreSQL
	// journal (pgjournal), each cell in a namespace of its own: every
	// operation takes a lease, commits its intent, then records its
	// outcome, each a PostgreSQL commit. Not in AllClients: it needs a
	// PostgreSQL server (Config.PostgresDSN, or one the run starts).
	ClientIdemPostgres Client = "idem+postgres"
)

// AllTargets and AllClients are the defaults of Config, in report order.
var (
	AllTargets = []Target{TargetTrivial, TargetServer, TargetServerUnkeyed}
	AllClients = []Client{ClientNetHTTP, ClientNetHTTPFsync, ClientRetryable, ClientIdem, ClientIdemJournal}

	// KnownClients are the clients Config.Clients may name.
	KnownClients = append(slices.Clone(AllClients), ClientIdemPostgres)

	// PostgresTargets are the targets on PostgreSQL, which Config.Targets
	// may name besides AllTargets. Like TargetServerUnkeyed, each is
	// measured with ClientNetHTTP only: what they compare is the server.
	PostgresTargets = []Target{TargetServerPostgres, TargetServerPostgres3, TargetServerPostgresUnkeyed}

	// KnownTargets are the targets Config.Targets may name.
	KnownTargets = append(slices.Clone(AllTargets), PostgresTargets...)
)

// Defaults of Config.
const (
	DefaultDuration     = 2 * time.Second
	DefaultWarmup       = 300 * time.Millisecond
	DefaultRuns         = 3
	DefaultFsyncSamples = 200
)

// DefaultConcurrency is the default Config.Concurrency.
var DefaultConcurrency = []int{1, 16, 64}

// Config says what to measure. The zero value measures everything with the
// defaults stated beside each field.
type Config struct {
	// Duration is how long each cell is measured, after its warm-up.
	// Default DefaultDuration (2s).
	Duration time.Duration

	// Warmup is how long each cell runs before it is measured: connections
	// are opened, caches filled. Default DefaultWarmup (300ms).
	Warmup time.Duration

	// Runs is how many times the whole grid is measured; the report gives
	// medians. Default DefaultRuns (3).
	Runs int

	// Concurrency lists the numbers of concurrent callers. Default
	// DefaultConcurrency (1, 16, 64).
	Concurrency []int

	// Targets lists what to send to, in report order. Default AllTargets.
	Targets []Target

	// Clients lists how to send, in report order. Default AllClients.
	// TargetServerUnkeyed and the PostgresTargets are only ever measured
	// with ClientNetHTTP; they need ClientNetHTTP in the list.
	Clients []Client

	// Dir holds the journals, the databases and the fsync probe file.
	// Default "": a new temporary directory, removed at the end.
	Dir string

	// FsyncSamples is how many fsyncs of a small write the disk's fsync
	// latency is measured over before each run. Default
	// DefaultFsyncSamples (200).
	FsyncSamples int

	// PostgresDSN is the database of ClientIdemPostgres's journal, and the
	// server in which each cell of the PostgresTargets creates a database
	// of its own (dropped after the cell), so its role must be allowed to
	// create databases. Default "": a PostgreSQL server the run starts
	// from the binaries at /usr/lib/postgresql/15/bin (IDEM_PG_BIN
	// overrides) and stops at the end.
	PostgresDSN string

	// Progress, when set, is called before each cell is measured, with the
	// number of cells done and the total. Default nil.
	Progress func(done, total int, c Cell)
}

// Cell is one measurement: a client sending to a target at a concurrency,
// in one of the runs (Run counts from 1).
type Cell struct {
	Target      Target
	Concurrency int
	Client      Client
	Run         int
}

// String names the cell for progress displays.
func (c Cell) String() string {
	return fmt.Sprintf("run %d: %s c=%d %s", c.Run, c.Target, c.Concurrency, c.Client)
}

// withDefaults returns c with zero fields set to their defaults, or an
// error for a field that cannot work.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Duration < 0, c.Warmup < 0, c.Runs < 0, c.FsyncSamples < 0:
		return c, fmt.Errorf("loadbench: negative duration, warm-up, runs or fsync samples")
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Runs == 0 {
		c.Runs = DefaultRuns
	}
	if c.FsyncSamples == 0 {
		c.FsyncSamples = DefaultFsyncSamples
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = slices.Clone(DefaultConcurrency)
	}
	if len(c.Targets) == 0 {
		c.Targets = slices.Clone(AllTargets)
	}
	if len(c.Clients) == 0 {
		c.Clients = slices.Clone(AllClients)
	}
	for _, n := range c.Concurrency {
		if n < 1 {
			return c, fmt.Errorf("loadbench: concurrency %d: must be at least 1", n)
		}
	}
	for _, t := range c.Targets {
		if !slices.Contains(KnownTargets, t) {
			return c, fmt.Errorf("loadbench: unknown target %q (want one of %v)", t, KnownTargets)
		}
	}
	for _, cl := range c.Clients {
		if !slices.Contains(KnownClients, cl) {
			return c, fmt.Errorf("loadbench: unknown client %q (want one of %v)", cl, KnownClients)
		}
	}
	for _, t := range c.Targets {
		if plainOnly(t) && !slices.Contains(c.Clients, ClientNetHTTP) {
			return c, fmt.Errorf("loadbench: target %s is measured with client %s, which is not selected", t, ClientNetHTTP)
		}
	}
	return c, nil
}

// plainOnly reports whether t is measured with ClientNetHTTP alone.
func plainOnly(t Target) bool {
	return t == TargetServerUnkeyed || slices.Contains(PostgresTargets, t)
}

// clientsFor returns the clients measured against t.
func (c Config) clientsFor(t Target) []Client {
	if plainOnly(t) {
		return []Client{ClientNetHTTP}
	}
	return c.Clients
}

// usesPostgres reports whether c needs a PostgreSQL server.
func (c Config) usesPostgres() bool {
	if slices.Contains(c.Clients, ClientIdemPostgres) {
		return true
	}
	for _, t := range c.Targets {
		if slices.Contains(PostgresTargets, t) {
			return true
		}
	}
	return false
}

// companions are the server targets measured right after TargetServer's
// cells at the same concurrency, in this order, when TargetServer is
// measured too: compared with it, they are compared at the same moment.
var companions = []Target{TargetServerUnkeyed, TargetServerPostgres, TargetServerPostgres3, TargetServerPostgresUnkeyed}

// cells returns the cells of one run, in the order they are measured: by
// target and concurrency, the clients of each in an order that rotates with
// the run, so no client always follows the same one. The reference
// server's other forms (unkeyed, on PostgreSQL, replicated; the
// companions) are measured right after the server's cells at the same
// concurrency, so that they are compared at the same moment.
func (c Config) cells(run int) []Cell {
	withServer := slices.Contains(c.Targets, TargetServer)
	var out []Cell
	for _, t := range c.Targets {
		if withServer && slices.Contains(companions, t) {
			continue
		}
		clients := c.clientsFor(t)
		for _, n := range c.Concurrency {
			for i := range clients {
				cl := clients[(i+run-1)%len(clients)]
				out = append(out, Cell{Target: t, Concurrency: n, Client: cl, Run: run})
			}
			if t == TargetServer {
				for _, comp := range companions {
					if slices.Contains(c.Targets, comp) {
						out = append(out, Cell{Target: comp, Concurrency: n, Client: ClientNetHTTP, Run: run})
					}
				}
			}
		}
	}
	return out
}
