package pgjournal_test

// F9: the deployments PostgreSQL runs in, each against the real thing.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// ledger is a server that records, per operation (the last element of
// the request's path), the keys its requests carried, and answers 201.
type ledger struct {
	*httptest.Server
	mu    sync.Mutex
	keys  map[string]map[string]int
	n     int
	at    int           // when n reaches it, reached is closed
	reach chan struct{} // see at
}

func newLedger(t *testing.T, at int) *ledger {
	l := &ledger{keys: map[string]map[string]int{}, at: at, reach: make(chan struct{})}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		l.mu.Lock()
		if l.keys[id] == nil {
			l.keys[id] = map[string]int{}
		}
		l.keys[id][r.Header.Get("Idempotency-Key")]++
		if l.n++; l.n == l.at {
			close(l.reach)
		}
		l.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(l.Close)
	return l
}

// do runs operation id on c, a POST to the ledger.
func (l *ledger) do(ctx context.Context, c *idem.Client, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.URL+"/charges/"+url.PathEscape(id), strings.NewReader(`{"amount":1}`))
	if err != nil {
		return err
	}
	resp, err := c.Do(id, req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// check fails t unless every one of ids was sent, each under one key
// only, and returns the key of each.
func (l *ledger) check(t *testing.T, ids []string) map[string]string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := map[string]string{}
	for _, id := range ids {
		switch ks := l.keys[id]; len(ks) {
		case 0:
			t.Errorf("operation %s was never sent", id)
		case 1:
			for k := range ks {
				keys[id] = k
			}
		default:
			t.Errorf("operation %s was sent under %d keys: a duplicate", id, len(ks))
		}
	}
	if len(l.keys) != len(ids) {
		t.Errorf("the ledger has %d operations, want %d", len(l.keys), len(ids))
	}
	return keys
}

// opIDs returns n operation IDs, prefix-0 and on.
func opIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(prefix, "-", i)
	}
	return ids
}

// runAll runs each of ids once on c, conc at a time, and returns the
// errors, one per failed operation.
func runAll(ctx context.Context, c *idem.Client, l *ledger, ids []string, conc int) []error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
				if err := l.do(ctx, c, ids[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// F9.1, F9.2: behind pgbouncer, in transaction mode (each transaction on
// any server connection, so a prepared statement does not outlive it) and
// in session mode, a Journal opened on the default DSN runs operations at
// concurrency 16 with no error, each sent once, and another Journal
// through the same pgbouncer reads them back as done under their keys.
// With pgx's prepared statements (cache_statement), transaction mode
// breaks: the mode Open picks is what makes it work.
func TestF9Pgbouncer(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	// In session mode a client connection holds a server connection
	// until it closes: pgbouncer's pool must have one for each connection
	// of both Journals (its default, 20, does), or the surplus waits.
	for mode, size := range map[string]int{"transaction": 4, "session": 2 * pgjournal.DefaultMaxConns} {
		t.Run(mode, func(t *testing.T) {
			via := pgtest.NewBouncer(t, dsn, mode, fmt.Sprint("default_pool_size = ", size)).DSN()
			o := pgjournal.Options{Namespace: mode}
			j := openJournal(t, via, o)
			l := newLedger(t, 0)
			ids := opIDs(mode, 120)
			if errs := runAll(ctx, client(t, j), l, ids, 16); len(errs) > 0 {
				t.Fatalf("%d of %d operations failed through pgbouncer in %s mode, the first: %v", len(errs), len(ids), mode, errs[0])
			}
			keys := l.check(t, ids)
			other := openJournal(t, via, o)
			for _, id := range ids {
				op, ok, err := other.Lookup(ctx, id)
				if err != nil || !ok || op.State != journal.StateDone || op.Key != keys[id] {
					t.Fatalf("Lookup(%s) through pgbouncer: %v %v %v %s, want done under %s", id, ok, err, op.State, op.Key, keys[id])
				}
			}
		})
	}
	t.Run("prepared statements in transaction mode", func(t *testing.T) {
		// Round robin over the server connections: the few transactions
		// a Journal's shared statements (F10) run at once would otherwise
		// land on the server connection used last, where their statements
		// happen to be prepared.
		via := pgtest.NewBouncer(t, dsn, "transaction", "default_pool_size = 4", "server_round_robin = 1").DSN()
		j := openJournal(t, via+"&default_query_exec_mode=cache_statement", pgjournal.Options{Namespace: "prepared"})
		l := newLedger(t, 0)
		// Ten pooled connections over four server connections: a
		// statement prepared on one is missing on the next.
		if errs := runAll(ctx, client(t, j), l, opIDs("prepared", 120), 16); len(errs) == 0 {
			t.Fatal("with cache_statement behind pgbouncer in transaction mode no operation failed: the test does not reach a transaction pooler")
		}
	})
}

// F9.3: a server that refuses new connections makes operations wait for
// one, never fail: three Journals of DefaultMaxConns connections each, at
// concurrency 16 each, on PostgreSQL with max_connections 5 (53300), and
// behind pgbouncer with max_client_conn 5. (Group commit, F10, has each
// Journal's concurrent writes share a connection: 5 is what three of them
// now fill.)
func TestF9TooManyConnectionsWait(t *testing.T) {
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		pg := pgtest.Own(t)
		exec(t, pg.DSN(), `ALTER SYSTEM SET max_connections = 5`)
		if err := pg.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		threeMachines(t, pg.DSN())
		checkRefused(t, pg.Log, "sorry, too many clients already")
	})
	t.Run("pgbouncer", func(t *testing.T) {
		b := pgtest.NewBouncer(t, pgtest.NewDatabase(t), "transaction", "max_client_conn = 5", "default_pool_size = 4")
		threeMachines(t, b.DSN())
		checkRefused(t, b.Log, "no more connections allowed")
	})
}

// threeMachines opens three Journals on dsn, then runs 40 operations on
// each, at concurrency 16 each, and fails t unless every operation
// succeeds, sent once. A refused statement waits until its context ends,
// which Options.Timeout bounds: a minute here, so that on a loaded
// machine the waits end with a connection, as the clause says, rather
// than with the default five seconds; the liveness, whose renewals wait
// for a connection too, is as long.
func threeMachines(t *testing.T, dsn string) {
	ctx := context.Background()
	l := newLedger(t, 0)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		all     []string
		clients []*idem.Client
	)
	for range 3 {
		clients = append(clients, client(t, openJournal(t, dsn, pgjournal.Options{Namespace: "full", Timeout: time.Minute, Liveness: time.Minute})))
	}
	for m, c := range clients {
		ids := opIDs(fmt.Sprint("machine", m), 40)
		all = append(all, ids...)
		wg.Go(func() {
			e := runAll(ctx, c, l, ids, 16)
			mu.Lock()
			errs = append(errs, e...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d operations failed on a full server, the first: %v", len(errs), len(all), errs[0])
	}
	l.check(t, all)
}

// checkRefused fails t unless the log says a connection was refused:
// else the test did not fill the server.
func checkRefused(t *testing.T, log func() (string, error), refusal string) {
	t.Helper()
	text, err := log()
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(text, refusal)
	if n == 0 {
		t.Fatalf("the log never says %q: the test did not fill the server", refusal)
	}
	t.Logf("%d connections refused (%q); every operation waited and succeeded", n, refusal)
}

// F9.4: a failover. A multi-host DSN (target_session_attrs=read-write)
// names a primary and its synchronous standby; mid-batch the primary's
// postmaster is SIGKILLed and the standby promoted. Every operation is
// sent under one key only, every key sent is on the new primary, done,
// and work resumes after the promotion (the figure is logged). Every
// error on the way is typed: the database unavailable, or a lease lost.
func TestF9Failover(t *testing.T) {
	primary := pgtest.Own(t)
	standby := pgtest.OwnStandby(t, primary)
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())
	ids := opIDs("failover", 150)
	l := newLedger(t, len(ids)/3)
	o := pgjournal.Options{Namespace: "failover", LeaseTTL: 3 * time.Second, Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var (
		promoted atomic.Pointer[time.Time]
		resumed  atomic.Pointer[time.Time]
		typed    atomic.Int64
		mu       sync.Mutex
		untyped  []error
		wg       sync.WaitGroup
		next     atomic.Int64
	)
	for m := range 2 { // two machines at concurrency 8
		c := client(t, openJournal(t, dsn, o))
		for range 8 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
					for ctx.Err() == nil {
						err := l.do(ctx, c, ids[i])
						if err == nil {
							if p := promoted.Load(); p != nil && resumed.Load() == nil {
								now := time.Now()
								resumed.CompareAndSwap(nil, &now)
							}
							break
						}
						if errors.Is(err, journal.ErrUnavailable) || errors.Is(err, journal.ErrClaimLost) || errors.Is(err, journal.ErrClaimed) {
							typed.Add(1)
							time.Sleep(20 * time.Millisecond) // a caller's pause before trying again
							continue
						}
						mu.Lock()
						untyped = append(untyped, fmt.Errorf("machine %d: %w", m, err))
						mu.Unlock()
						break
					}
				}
			})
		}
	}
	select {
	case <-l.reach:
	case <-ctx.Done():
		t.Fatal("the batch never got a third of the way")
	}
	if err := primary.KillPostmaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	promoted.Store(&now)
	wg.Wait()
	if len(untyped) > 0 {
		t.Fatalf("%d untyped errors across the failover, the first: %v", len(untyped), untyped[0])
	}
	if ctx.Err() != nil {
		t.Fatalf("the batch did not finish after the failover: %v", ctx.Err())
	}
	keys := l.check(t, ids)
	if r := resumed.Load(); r != nil {
		t.Logf("failover: the first operation done %v after the promotion; %d typed errors retried", r.Sub(now).Round(time.Millisecond), typed.Load())
	}

	conn, err := pgx.Connect(context.Background(), standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT op_id, op_key, state FROM idem_operations WHERE namespace = 'failover'`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID, Key string
		State   int16
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	onNew := map[string]row{}
	for _, r := range got {
		onNew[r.ID] = r
	}
	pending := 0
	for id, key := range keys {
		r, ok := onNew[id]
		if !ok || r.Key != key {
			t.Errorf("operation %s, sent under %s: on the new primary %+v (found %v), want that key", id, key, r, ok)
		}
		if r.State == int16(journal.StatePending) {
			pending++ // answered, its completion lost with the primary (C3)
		}
	}
	// Those whose completion was lost run again under their keys.
	c := client(t, openJournal(t, standby.DSN(), o))
	if errs := runAll(context.Background(), c, l, ids, 8); len(errs) > 0 {
		t.Fatalf("after the failover, %d operations failed, the first: %v", len(errs), errs[0])
	}
	if again := l.check(t, ids); !maps.Equal(again, keys) {
		t.Fatal("a second run after the failover sent an operation under a new key")
	}
	t.Logf("failover: %d operations pending on the new primary (their completion lost), run again under their keys", pending)
}

// F9.5: a server that takes no writes (a standby, which a multi-host DSN
// without target_session_attrs=read-write can land on) fails a Do with
// journal.ErrUnavailable (25006), before sending, never with an
// untyped error.
func TestF9AReadOnlyServerIsUnavailable(t *testing.T) {
	primary := pgtest.Own(t)
	openJournal(t, primary.DSN(), pgjournal.Options{}) // the schema, replicated
	standby := pgtest.OwnStandby(t, primary)
	ctx := context.Background()
	_, err := pgjournal.Open(ctx, standby.DSN(), pgjournal.Options{Logger: quiet})
	if !errors.Is(err, journal.ErrUnavailable) || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("Open (migrating) on a standby: %v, want journal.ErrUnavailable for 25006", err)
	}
	j := openJournal(t, standby.DSN(), pgjournal.Options{NoMigrate: true})
	l := newLedger(t, 0)
	err = l.do(ctx, client(t, j), "charge")
	if !errors.Is(err, journal.ErrUnavailable) || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("Do on a standby: %v, want journal.ErrUnavailable for 25006", err)
	}
	if len(l.keys) != 0 {
		t.Fatalf("Do on a standby sent %v", l.keys)
	}
}

// TestF13ABatchRidesThroughAFifteenSecondOutage is F13.1 and F13.2 on
// PostgreSQL itself: one pass of RunBatch, 300 operations 16 at once,
// with the default options, while the database is stopped for 15 s
// after the hundredth request (the 16 requests then in flight answered
// only once it is down, so their outcomes cannot be recorded). Every
// operation is done, none failed; the server got each once, under one
// key, and the journal holds each under that key. A Do outside the
// batch fails at once during the outage, with journal.ErrUnavailable.
func TestF13ABatchRidesThroughAFifteenSecondOutage(t *testing.T) {
	const outage = 15 * time.Second
	srv := pgtest.Own(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j := openJournal(t, srv.DSN(), pgjournal.Options{Namespace: "outage"})
	c := client(t, j)
	var (
		mu    sync.Mutex
		keys  = map[string]map[string]int{}
		n     int
		reach = make(chan struct{})
		gate  = make(chan struct{}) // closed once the database is down
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		mu.Lock()
		if keys[id] == nil {
			keys[id] = map[string]int{}
		}
		keys[id][r.Header.Get("Idempotency-Key")]++
		n++
		if n == 100 {
			close(reach)
		}
		held := n > 100
		mu.Unlock()
		if held {
			<-gate
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer api.Close()
	ids := opIDs("outage", 300)
	ops := make([]idem.BatchOp, len(ids))
	for i, id := range ids {
		ops[i] = idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/charges/"+id, strings.NewReader(`{}`))
		}}
	}

	var (
		wg       sync.WaitGroup
		restart  time.Time
		aloneErr error
	)
	wg.Go(func() {
		select {
		case <-reach:
		case <-ctx.Done():
			return
		}
		if err := srv.Stop(ctx); err != nil {
			t.Error(err)
		}
		close(gate)
		down := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/charges/alone", strings.NewReader(`{}`))
		_, aloneErr = c.Do("alone", req)
		time.Sleep(outage - time.Since(down))
		if err := srv.Start(ctx); err != nil {
			t.Error(err)
		}
		restart = time.Now()
	})
	var failed []idem.BatchResult
	progress := func(r idem.BatchResult, _ idem.BatchSummary) {
		if r.Err != nil {
			failed = append(failed, r)
		}
	}
	sum, err := c.RunBatch(ctx, ops, idem.BatchOptions{Concurrency: 16, Progress: progress})
	end := time.Now()
	wg.Wait()
	if err != nil || sum != (idem.BatchSummary{Done: 300}) {
		t.Fatalf("one pass through the outage: %+v, %v; want 300 done (failed: %v)", sum, err, failed)
	}
	if !errors.Is(aloneErr, journal.ErrUnavailable) {
		t.Errorf("a Do outside the batch during the outage: %v, want journal.ErrUnavailable", aloneErr)
	}
	sent := map[string]string{}
	for _, id := range ids {
		for k, times := range keys[id] {
			if times != 1 || len(keys[id]) != 1 {
				t.Errorf("operation %s: sent %d times under %s, under %d keys in all", id, times, k, len(keys[id]))
			}
			sent[id] = k
		}
	}
	if len(keys) != len(ids) {
		t.Errorf("the server got %d operations, want %d", len(keys), len(ids))
	}
	for _, id := range ids {
		op, ok, err := j.Lookup(ctx, id)
		if err != nil || !ok || op.Key != sent[id] {
			t.Errorf("operation %s, sent under %s: the journal holds %+v (%v, %v)", id, sent[id], op, ok, err)
		}
	}
	t.Logf("the batch ended %v after the database's restart", end.Sub(restart).Round(time.Millisecond))
}
