package pgjournal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// machineTransport marks each request with the machine that sends it.
type machineTransport struct{ name string }

func (t machineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Machine", t.name)
	return http.DefaultTransport.RoundTrip(r)
}

// TestAPartitionedHolderStopsSending is F3.5 (and F11.3) under a
// partition: machine a can reach the API but no longer the database, while
// its attempts are retried. Its lease lapses in the database, or its
// liveness does (a lease of an hour), and b takes the operation over; a
// must have stopped sending before b's attempt starts, however long its
// renewal statements hang.
func TestAPartitionedHolderStopsSending(t *testing.T) {
	const short = 600 * time.Millisecond // Timeout 5s is longer
	for name, o := range map[string]pgjournal.Options{
		"the lease lapses":    {LeaseTTL: short, Liveness: time.Hour},
		"the liveness lapses": {LeaseTTL: time.Hour, Liveness: short},
	} {
		t.Run(name, func(t *testing.T) { partitionedHolder(t, o) })
	}
}

// partitionedHolder is TestAPartitionedHolderStopsSending with a's and
// b's lease and a's liveness as o says.
func partitionedHolder(t *testing.T, o pgjournal.Options) {
	dsn := pgtest.NewDatabase(t)
	p, viaProxy := newProxy(t, dsn)
	a := openJournal(t, viaProxy, pgjournal.Options{Owner: "a", LeaseTTL: o.LeaseTTL, Liveness: o.Liveness})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b", LeaseTTL: o.LeaseTTL})
	type sent struct {
		who        string
		start, end time.Time
	}
	var (
		mu    sync.Mutex
		sends []sent
		first = make(chan struct{})
		once  sync.Once
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		who, start := r.Header.Get("X-Machine"), time.Now()
		once.Do(func() { close(first) })
		time.Sleep(20 * time.Millisecond) // an attempt takes a while
		mu.Lock()
		sends = append(sends, sent{who, start, time.Now()})
		mu.Unlock()
		if who == "a" {
			w.WriteHeader(http.StatusServiceUnavailable) // retried, again and again
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	client := func(j journal.Journal, name string) *idem.Client {
		c, err := idem.New(idem.Config{Journal: j, Logger: quiet, MaxAttempts: 100000, MaxElapsed: time.Hour,
			InitialWait: time.Millisecond, MaxWait: time.Millisecond, RetryBudget: idem.RetryBudget{Disabled: true},
			HTTPClient: &http.Client{Transport: machineTransport{name}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	post := func() *http.Request {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1}`))
		return req
	}
	aEnded := make(chan error, 1)
	go func() {
		_, err := client(a, "a").Do("charge", post())
		aEnded <- err
	}()
	<-first
	p.Freeze(true) // a can no longer reach the database; b can
	resp, err := client(b, "b").Do("charge", post())
	if err != nil {
		t.Fatalf("b: %v", err)
	}
	resp.Body.Close()
	select {
	case err = <-aEnded:
	case <-time.After(time.Minute):
		t.Fatal("a never stopped")
	}
	p.Freeze(false)
	if !errors.Is(err, journal.ErrClaimLost) {
		t.Fatalf("a ended with %v, want ErrClaimLost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var bStart time.Time
	for _, s := range sends {
		if s.who == "b" {
			bStart = s.start
		}
	}
	// An attempt a started before its deadline may still be in the
	// server's hands (its bytes were sent; cutting it off cannot unsend
	// them); none may start after b's.
	for _, s := range sends {
		if s.who == "a" && s.start.After(bStart) {
			t.Fatalf("a, whose lease had lapsed, started an attempt at %s, after b started at %s", s.start, bStart)
		}
	}
}

// TestALargeBodyOfALeasedDoIsReadWhole: a done response whose body is over
// MaxRecordedBody reaches the caller whole, as with any journal; a lease
// does not cut it short when Do returns.
func TestALargeBodyOfALeasedDoIsReadWhole(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 8<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		w.Write(big)
	}))
	defer srv.Close()
	c := client(t, openJournal(t, pgtest.NewDatabase(t), pgjournal.Options{}))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
	resp, err := c.Do("big", req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != int64(len(big)) {
		t.Fatalf("read %d of %d bytes: %v", n, len(big), err)
	}
}

// TestCloseHandsTheLeasesBack is F11.4 for Close: a Journal built with
// New on the caller's pool, closed while it holds a claim, reports the
// claim lost (its attempts stop) and hands the lease back at once: with a
// lease and a liveness of an hour, another machine takes the operation
// without waiting.
func TestCloseHandsTheLeasesBack(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, err := pgjournal.New(ctx, pool, pgjournal.Options{Owner: "a", LeaseTTL: time.Hour, Liveness: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := a.Claim(ctx, "charge")
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Release()
	if err := ca.Begin(ctx, journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-ca.Lost():
	default:
		t.Fatal("a claim of a closed journal is not reported lost")
	}
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	cb, err := b.TryClaim(ctx, "charge")
	if err != nil {
		t.Fatalf("a claim of an operation a closed journal held: %v, want it free at once", err)
	}
	defer cb.Release()
	if op, ok := cb.Operation(); !ok || op.Key != "k" || op.State != journal.StatePending {
		t.Fatalf("b took %+v (%v), want the pending operation under key k", op, ok)
	}
}

// F11.4: a Close that cannot end its life in the database, which it
// cannot reach, says so in a warning (its leases are free to others when
// the life lapses); a Close that can, ends it quietly and deletes the
// life's row.
func TestACloseThatCannotEndItsLifeSaysSo(t *testing.T) {
	const warning = "pgjournal: ending this journal's liveness at Close failed; its leases are free to others when it lapses"
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	p, via := newProxy(t, dsn)
	for _, reachable := range []bool{true, false} { // the proxy closed last
		log := &logMessages{}
		owner := fmt.Sprint("reachable-", reachable)
		// The default Timeout: the database refuses, rather than
		// ignores, the last Close, so nothing waits for it to end, and a
		// loaded database answers the others.
		j, err := pgjournal.Open(ctx, via, pgjournal.Options{Owner: owner, Liveness: time.Hour, Logger: slog.New(log)})
		if err != nil {
			t.Fatal(err)
		}
		c := claimWithin(t, j, owner)
		if err := c.Begin(ctx, journal.Operation{ID: owner, Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}); err != nil {
			t.Fatal(err)
		}
		c.Release()
		if !reachable {
			p.close() // every connection cut, and new ones refused
		}
		j.Close()
		if warned := log.has(warning); warned == reachable {
			t.Fatalf("Close, the database reachable %v: warned %v (logged: %q)", reachable, warned, log.all())
		}
		if reachable {
			var lives int
			queryRow(t, dsn, fmt.Sprintf(`SELECT count(*) FROM idem_lives WHERE owner = '%s'`, owner), &lives)
			if lives != 0 {
				t.Fatalf("a Close that could end its life left %d lives", lives)
			}
		}
	}
}

// TestOpenOfADatabaseThatDoesNotAnswer is F6.2 at Open: a database that
// does not answer within Options.Timeout is unavailable, migrating or not.
func TestOpenOfADatabaseThatDoesNotAnswer(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	openJournal(t, dsn, pgjournal.Options{}) // the tables exist
	p, via := newProxy(t, dsn)
	p.Freeze(true)
	for _, noMigrate := range []bool{false, true} {
		_, err := pgjournal.Open(context.Background(), via, pgjournal.Options{Timeout: 300 * time.Millisecond, NoMigrate: noMigrate, Logger: quiet})
		if !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("Open (NoMigrate %v) of a database that does not answer: %v, want journal.ErrUnavailable", noMigrate, err)
		}
	}
}

// TestRecordsEveryByteOfAHeader: a header value that is not UTF-8 (HTTP
// allows obs-text) replays byte for byte; an operation ID PostgreSQL's
// text cannot hold is refused before anything is written.
func TestRecordsEveryByteOfAHeader(t *testing.T) {
	ctx := context.Background()
	j := openJournal(t, pgtest.NewDatabase(t), pgjournal.Options{})
	c, err := j.Claim(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	op := journal.Operation{ID: "op", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	if err := c.Begin(ctx, op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Status, op.Header = journal.StateDone, 201, http.Header{"Content-Disposition": {"attachment; filename=caf\xe9.pdf"}, "X-Empty": {""}}
	if err := c.Complete(ctx, op); err != nil {
		t.Fatal(err)
	}
	c.Release()
	got, _, err := j.Lookup(ctx, "op")
	if err != nil || got.Header.Get("Content-Disposition") != "attachment; filename=caf\xe9.pdf" || len(got.Header["X-Empty"]) != 1 {
		t.Fatalf("replayed header %q (%v)", got.Header, err)
	}
	for _, id := range []string{"a\x00b", "caf\xe9"} {
		if _, err := j.Claim(ctx, id); !errors.Is(err, journal.ErrInvalidOperation) {
			t.Errorf("Claim(%q): %v, want ErrInvalidOperation", id, err)
		}
	}
}

// TestConcurrentOpensOfANewDatabase: machines opening a new database at
// once all succeed, whichever creates the tables.
func TestConcurrentOpensOfANewDatabase(t *testing.T) {
	for round := range 8 {
		if err := openAtOnce(pgtest.NewDatabase(t), 8); err != nil {
			t.Fatal(fmt.Errorf("round %d: %w", round, err))
		}
	}
}

// openAtOnce opens (and closes) the journal in dsn's database n times at
// once, as n machines starting together would, and returns the first error.
func openAtOnce(dsn string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			j, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{Logger: quiet})
			if err == nil {
				j.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
