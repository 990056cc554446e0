package idemserver_test

// Boundaries the gremlins run over idemserver (lab/mutants/MUTANTS.md) found
// untested: each test below kills mutants that lived through the other
// tests, and says which rule of DESIGN.md it proves, where there is one.
// boundaries_internal_test.go holds those of unexported helpers.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/idemkit/idem/idemserver"
)

// --- Atomic routes (L2) ---

// L2.2: a handler that answers 5xx, or panics, has its transaction rolled
// back once: it is not run again within the request, and no rerun is
// counted (only a unique violation under the key is rerun at once).
func TestAFailedAtomicRunIsNotRunAgain(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		runs := 0
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			ctx := r.Context()
			if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "a", "n"); err != nil {
				t.Errorf("insert: %v", err)
			}
			if r.URL.Path == "/panic" {
				panic("the handler panicked")
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		if got := do(t, route, "POST", "/items", "k1", "a"); got.status != http.StatusServiceUnavailable || runs != 1 {
			t.Fatalf("a 503: %d after %d runs, want 503 after 1", got.status, runs)
		}
		func() {
			defer func() {
				if p := recover(); p != "the handler panicked" {
					t.Errorf("panic %v, want the handler's", p)
				}
			}()
			do(t, route, "POST", "/panic", "k2", "a")
		}()
		if runs != 2 {
			t.Errorf("the panic ran the handler %d times, want once", runs-1)
		}
		if s := e.keys.Stats(); s.Reruns != 0 || s.RolledBack != 2 {
			t.Errorf("Reruns %d, RolledBack %d; want 0 and 2", s.Reruns, s.RolledBack)
		}
		if n := e.count("items") + e.count("idempotency_keys"); n != 0 {
			t.Errorf("%d rows stored, want none", n)
		}
	})
}

// L2.6 and L2.10: on PostgreSQL, a duplicate that arrives while the first
// request under its key holds its business row waits for the key in the
// database, runs nothing, and gets the first's answer once it commits.
func TestADuplicateWaitingForTheKeyGetsTheStoredAnswer(t *testing.T) {
	e := newEnv(t, stores[1], idemserver.Config{})
	entered := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var runs atomic.Int64
	route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		body, _ := io.ReadAll(r.Body)
		holder := runs.Add(1) == 1
		if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), string(body), "n"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if holder {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made "+string(body))
	}))
	firstDone := make(chan answer, 1)
	go func() { firstDone <- do(t, route, "POST", "/items", "k", "a") }()
	<-entered
	secondDone := make(chan answer, 1)
	go func() { secondDone <- do(t, route, "POST", "/items", "k", "a") }()
	for waiting := 0; waiting == 0; {
		if err := e.db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case two := <-secondDone:
			t.Fatalf("the duplicate finished without waiting for the key: %d %q", two.status, two.body)
		case <-time.After(2 * time.Millisecond):
		}
	}
	close(release)
	one, two := <-firstDone, <-secondDone
	if one.status != http.StatusCreated || one.body != "made a" {
		t.Fatalf("first: %d %q, want 201", one.status, one.body)
	}
	if two.status != http.StatusCreated || two.body != "made a" || two.header.Get(idemserver.HeaderReplayed) != "true" {
		t.Fatalf("second: %d %q replayed %q, want the stored 201 replayed", two.status, two.body, two.header.Get(idemserver.HeaderReplayed))
	}
	if n, items := runs.Load(), e.count("items"); n != 1 || items != 1 {
		t.Errorf("%d runs, %d items; want 1 and 1", n, items)
	}
}

// slowCommitConnector opens SQLite connections whose commits, in a
// transaction with a deadline, return only once the deadline has passed:
// the commit is done, and the work context ends as it is reported.
type slowCommitConnector struct{ dsn string }

func (c slowCommitConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return slowCommitConn{conn}, nil
}

func (c slowCommitConnector) Driver() driver.Driver { return &sqlite.Driver{} }

type slowCommitConn struct{ driver.Conn }

func (c slowCommitConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return slowCommitTx{tx, ctx}, nil
}

type slowCommitTx struct {
	driver.Tx
	ctx context.Context
}

func (t slowCommitTx) Commit() error {
	err := t.Tx.Commit()
	if _, ok := t.ctx.Deadline(); ok && err == nil {
		<-t.ctx.Done()
	}
	return err
}

// L2.1: an answer whose commit succeeded is sent, and replayed, even when
// Config.WorkTimeout passes as the commit returns: only work that did not
// commit by the timeout gets 503 (L2.7).
func TestAnAnswerCommittedAsTheWorkTimeoutEndsIsSent(t *testing.T) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Set("_txlock", "immediate")
	db := sql.OpenDB(slowCommitConnector{"file:" + filepath.Join(t.TempDir(), "slow.db") + "?" + q.Encode()})
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, WorkTimeout: 200 * time.Millisecond, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	runs := 0
	route := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	}))
	first := do(t, route, "POST", "/items", "k", "a")
	if first.status != http.StatusCreated || first.body != "made" {
		t.Fatalf("first: %d %q, want the committed 201", first.status, first.body)
	}
	again := do(t, route, "POST", "/items", "k", "a")
	if again.status != http.StatusCreated || again.body != "made" || again.header.Get(idemserver.HeaderReplayed) != "true" || runs != 1 {
		t.Fatalf("retry: %d %q after %d runs, want the 201 replayed after 1", again.status, again.body, runs)
	}
}

// L2.7: a handler that gives up at Config.WorkTimeout, reporting an error
// of its own with Fail, gets 503 with Retry-After: the timeout is the
// cause, whatever the error says.
func TestAHandlerGivingUpAtTheWorkTimeoutGets503(t *testing.T) {
	onBothStores(t, idemserver.Config{WorkTimeout: 100 * time.Millisecond}, func(t *testing.T, e *env) {
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			idemserver.Fail(r.Context(), errors.New("the handler gave up"))
			w.WriteHeader(http.StatusInternalServerError)
		}))
		got := do(t, route, "POST", "/items", "k", "a")
		if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") != "1" {
			t.Fatalf("%d Retry-After %q, want 503 with Retry-After 1", got.status, got.header.Get("Retry-After"))
		}
		if n := e.count("idempotency_keys"); n != 0 {
			t.Errorf("%d key rows, want none", n)
		}
	})
}

// Fail outside idemserver does nothing (the package doc of Fail).
func TestFailOutsideIdemserverDoesNothing(t *testing.T) {
	idemserver.Fail(context.Background(), errors.New("not in a request"))
	idemserver.Fail(context.Background(), nil)
}

// --- Phased routes (L3, L5) ---

// L3: Tx on a phased route is the one final transaction, however often
// the handler asks for it: what it writes through each call commits.
func TestAPhasedHandlersTxIsOneTransaction(t *testing.T) {
	onBothStores(t, idemserver.Config{LockTimeout: 2 * time.Second}, func(t *testing.T, e *env) {
		route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			tx := idemserver.Tx(ctx)
			if _, err := tx.ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "a", "n"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if again := idemserver.Tx(ctx); again != tx {
				http.Error(w, "Tx gave another transaction", http.StatusInternalServerError)
				return
			}
			if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "b", "n"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		if got := do(t, route, "POST", "/items", "k", "a"); got.status != http.StatusCreated {
			t.Fatalf("%d %q, want 201", got.status, got.body)
		}
		if n := e.count("items"); n != 2 {
			t.Errorf("%d items, want both writes", n)
		}
	})
}

// stallingClock is a Config.Now on real time that stalls once, for d,
// when told: a statement of the transaction that calls it is slow.
type stallingClock struct {
	stall atomic.Bool
	d     time.Duration
}

func (c *stallingClock) Now() time.Time {
	if c.stall.CompareAndSwap(true, false) {
		time.Sleep(c.d)
	}
	return time.Now()
}

// L5.5: the holder's context ends at its lease's end in real time, the
// lease counted from when the claim began, however long the claim's
// transaction took (never LockTimeout after it ended).
func TestAHoldersContextEndsAtTheLeaseCountedFromTheClaim(t *testing.T) {
	const lock, stall = 2 * time.Second, 1500 * time.Millisecond
	c := &stallingClock{d: stall}
	onBothStores(t, idemserver.Config{LockTimeout: lock, Now: c.Now}, func(t *testing.T, e *env) {
		ended := make(chan time.Time, 1)
		route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
				ended <- time.Now()
			case <-time.After(10 * time.Second):
				ended <- time.Time{}
			}
			w.WriteHeader(http.StatusCreated)
		}))
		c.stall.Store(true) // the claim's transaction takes 1.5s
		start := time.Now()
		got := do(t, route, "POST", "/items", "k", "a")
		end := <-ended
		if end.IsZero() || end.Sub(start) > lock+time.Second {
			t.Fatalf("the holder's context ended %v after the claim began, want at its lease's end, %v", end.Sub(start), lock)
		}
		if got.status != http.StatusConflict {
			t.Errorf("a holder past its lease: %d, want 409", got.status)
		}
	})
}

// L5.5 and L3: a Step renews the lease from when its record's transaction
// began, so that the holder's context still ends at the lease's end in
// real time however long that transaction took.
func TestAStepRenewsTheLeaseFromWhenItsRecordBegan(t *testing.T) {
	const lock, stall = 2 * time.Second, 1500 * time.Millisecond
	c := &stallingClock{d: stall}
	onBothStores(t, idemserver.Config{LockTimeout: lock, Now: c.Now}, func(t *testing.T, e *env) {
		lasted := make(chan time.Duration, 1)
		route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			var called time.Time
			if _, err := idemserver.Step(ctx, "s", func(context.Context, string) ([]byte, error) {
				c.stall.Store(true) // the record's transaction takes 1.5s
				called = time.Now()
				return []byte("done"), nil
			}); err != nil {
				lasted <- -1
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			select {
			case <-ctx.Done():
				lasted <- time.Since(called)
			case <-time.After(10 * time.Second):
				lasted <- -1
			}
			w.WriteHeader(http.StatusCreated)
		}))
		do(t, route, "POST", "/items", "k", "a")
		if d := <-lasted; d < stall || d > lock+time.Second {
			t.Fatalf("the holder's context ended %v after the Step's call, want at its lease's end, %v after the record began", d, lock)
		}
	})
}

// L2.3 and L3: a phased handler whose final transaction keeps failing to
// serialize runs Config.Reruns times more, then gets 503 with
// Retry-After, its writes rolled back.
func TestAPhasedRouteGivesUpAfterItsReruns(t *testing.T) {
	var logs syncBuffer
	given := 0 // the requests that gave up so far, one per store
	onBothStores(t, idemserver.Config{Reruns: 2, LockTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(t *testing.T, e *env) {
		h := &failing{e: e, fails: []error{serializationFailure, serializationFailure, serializationFailure, serializationFailure}}
		got := do(t, e.keys.Handle(idemserver.Route{Phased: true}, h), "POST", "/items", "k", "x")
		if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") != "1" || h.runs != 3 {
			t.Fatalf("%d Retry-After %q after %d runs; want 503 with Retry-After 1 after 3", got.status, got.header.Get("Retry-After"), h.runs)
		}
		if s := e.keys.Stats(); s.Reruns != 2 {
			t.Errorf("Reruns %d, want 2", s.Reruns)
		}
		if n := e.count("items"); n != 0 {
			t.Errorf("%d items, want none", n)
		}
		// The logged error counts the runs: the first and the two reruns.
		if given++; strings.Count(logs.String(), "(3 runs)") != given {
			t.Errorf("the log says %q, want the error counting 3 runs", logs.String())
		}
	})
}

// L1: a claim the database refuses (here a trigger or a CHECK, as a
// failing statement) is answered 500 at once: it is not run again, as a
// claim that lost a race under its key is.
func TestARefusedClaimIsNotRunAgain(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		refuse := `CREATE TRIGGER refuse_claims BEFORE INSERT ON idempotency_keys
			WHEN NEW.idem_key = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`
		if e.store.dialect != "sqlite" {
			refuse = `ALTER TABLE idempotency_keys ADD CONSTRAINT refuse_claims CHECK (idem_key <> 'refused')`
		}
		if _, err := e.db.Exec(refuse); err != nil {
			t.Fatal(err)
		}
		runs := 0
		route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
		}))
		if got := do(t, route, "POST", "/items", "refused", "a"); got.status != http.StatusInternalServerError || runs != 0 {
			t.Fatalf("%d after %d handler runs, want 500 and none", got.status, runs)
		}
		if s := e.keys.Stats(); s.Reruns != 0 || s.Failed != 1 {
			t.Errorf("Reruns %d, Failed %d; want 0 and 1", s.Reruns, s.Failed)
		}
	})
}

// L1.8 and L1.11: on PostgreSQL, a claim whose insert meets the row
// another replica committed under the key after this one looked it up
// (a unique violation) looks again and gets 409 with Retry-After, not 500.
func TestAClaimLosingTheInsertRaceGets409(t *testing.T) {
	e := newEnv(t, stores[1], idemserver.Config{})
	now := e.clock.Now()
	other, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	// The other replica's claim, uncommitted: principal, key, fingerprint
	// and lease as a claim of the same request leaves them.
	if _, err := other.Exec(`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at,
		expires_at, finished, lock_token, lease_until) VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8)`,
		"", "k", idemserver.Fingerprint("POST", "/items", []byte("a")), "seed",
		now.UnixNano(), now.Add(24*time.Hour).UnixNano(), "other-token", now.Add(30*time.Second).UnixNano()); err != nil {
		t.Fatal(err)
	}
	runs := 0
	route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan answer, 1)
	go func() { done <- do(t, route, "POST", "/items", "k", "a") }()
	// Wait until the claim's insert waits for the other's row.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := e.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case got := <-done:
			t.Fatalf("the claim finished without waiting for the other's row: %d %q", got.status, got.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the other's row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.status != http.StatusConflict || got.header.Get("Retry-After") != "30" || runs != 0 {
		t.Fatalf("%d Retry-After %q after %d runs, want 409 with Retry-After 30 and no run", got.status, got.header.Get("Retry-After"), runs)
	}
}

// L5.4: releasing a claim that answered 5xx logs no error when it
// succeeds.
func TestReleasingAClaimLogsNoError(t *testing.T) {
	var log syncBuffer
	onBothStores(t, idemserver.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}, func(t *testing.T, e *env) {
		route := e.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
		}))
		if got := do(t, route, "POST", "/items", "k", "a"); got.status != http.StatusBadGateway {
			t.Fatalf("%d, want the handler's 502", got.status)
		}
		var lease sql.NullInt64
		if err := e.db.QueryRow(`SELECT lease_until FROM idempotency_keys`).Scan(&lease); err != nil || lease.Valid {
			t.Fatalf("lease_until %v (%v), want the claim released", lease, err)
		}
	})
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("logged an error:\n%s", log.String())
	}
}

// --- Keys (L1) ---

// L1.2: a quoted key of MaxKeyLength whose every character is escaped,
// twice as long as the key plus its quotes, is taken.
func TestAQuotedKeyOfTheLongestLengthIsTaken(t *testing.T) {
	onBothStores(t, idemserver.Config{MaxKeyLength: 8}, func(t *testing.T, e *env) {
		var key string
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, key, _ = idemserver.Key(r.Context())
			w.WriteHeader(http.StatusCreated)
		}))
		v := `"` + strings.Repeat(`\"`, 8) + `"`
		if got := do(t, route, "POST", "/items", v, "a"); got.status != http.StatusCreated || key != strings.Repeat(`"`, 8) {
			t.Fatalf("%s: %d %q with key %q, want 201 with 8 quotes", v, got.status, got.body, key)
		}
	})
}

// L1.12: with KeyField, a body that is a JSON array is no object (400
// saying so), not an object without the key.
func TestABodyArrayIsNoObject(t *testing.T) {
	onBothStores(t, idemserver.Config{KeyField: "key"}, func(t *testing.T, e *env) {
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, route, "POST", "/items", "", "[]")
		if got.status != http.StatusBadRequest || !strings.Contains(got.body, "must be a JSON object") ||
			strings.Contains(got.body, "missing-idempotency-key") {
			t.Fatalf("%d %q, want 400: the body must be a JSON object", got.status, got.body)
		}
	})
}

// L1.2 and L1.12: a body key is printable ASCII, space to tilde; a control
// byte, DEL or a non-ASCII character gets 400.
func TestABodyKeyIsPrintableASCII(t *testing.T) {
	onBothStores(t, idemserver.Config{KeyField: "key"}, func(t *testing.T, e *env) {
		var keys []string
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, k, _ := idemserver.Key(r.Context())
			keys = append(keys, k)
			w.WriteHeader(http.StatusCreated)
		}))
		if got := do(t, route, "POST", "/items", "", `{"key":" a~"}`); got.status != http.StatusCreated {
			t.Fatalf("the key %q: %d %q, want 201", " a~", got.status, got.body)
		}
		for _, k := range []string{`caf\u00e9`, `a\u0001`, `a\u001f`, `a\u007f`} {
			if got := do(t, route, "POST", "/items", "", `{"key":"`+k+`"}`); got.status != http.StatusBadRequest {
				t.Errorf("the key %s: %d, want 400", k, got.status)
			}
		}
		if strings.Join(keys, "|") != " a~" {
			t.Errorf("the handler ran under %q, want only \" a~\"", keys)
		}
	})
}

// --- Requests and answers (L1, L2) ---

// L1: a request whose Body is nil (as http.NewRequest makes one without a
// body, for a handler called directly) is served as one with no body.
func TestARequestWithANilBodyIsServed(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "body %q", b)
		}))
		r, err := http.NewRequest("POST", "/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(idemserver.HeaderIdempotencyKey, "k")
		w := httptest.NewRecorder()
		route.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Body.String() != `body ""` {
			t.Fatalf("%d %q, want 200 with no body", w.Code, w.Body.String())
		}
	})
}

// L1.12: the handler sees the Content-Length of the body it reads (the
// body key taken out), and none where the request had none.
func TestTheHandlerSeesTheContentLengthOfItsBody(t *testing.T) {
	onBothStores(t, idemserver.Config{KeyField: "key"}, func(t *testing.T, e *env) {
		var lengths []string
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lengths = append(lengths, fmt.Sprintf("%q %d", r.Header.Get("Content-Length"), r.ContentLength))
			w.WriteHeader(http.StatusCreated)
		}))
		body := `{"key":"k1","a":1}`
		do(t, route, "POST", "/items", "", body, "Content-Length", fmt.Sprint(len(body)))
		do(t, route, "POST", "/items", "", `{"key":"k2","a":1}`)
		if want := `"7" 7|"" 7`; strings.Join(lengths, "|") != want {
			t.Errorf("the handler saw Content-Length %q, want %q", strings.Join(lengths, "|"), want)
		}
	})
}

// L2.1: the first status a handler writes is its answer (as net/http
// keeps it): a later WriteHeader, even of 500, changes nothing, and 200
// written first is the answer too.
func TestTheFirstStatusIsTheAnswer(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		runs := 0
		route := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusOK)
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "ok")
		}))
		first := do(t, route, "POST", "/items", "k", "a")
		again := do(t, route, "POST", "/items", "k", "a")
		if first.status != http.StatusOK || first.body != "ok" {
			t.Fatalf("first: %d %q, want 200 ok", first.status, first.body)
		}
		if again.status != http.StatusOK || again.body != "ok" || again.header.Get(idemserver.HeaderReplayed) != "true" || runs != 1 {
			t.Fatalf("retry: %d %q after %d runs, want 200 ok replayed after 1", again.status, again.body, runs)
		}
	})
}

// --- Sweep (L1.9, L1.10) ---

// insertKeyRows stores n finished keys (or unfinished and unclaimed),
// created 48h and expired 24h before the env's clock.
func insertKeyRows(t *testing.T, e *env, n int, finished bool) {
	t.Helper()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	fin := 0
	if finished {
		fin = 1
	}
	now := e.clock.Now()
	for i := 0; i < n; i++ {
		if _, err := tx.Exec(e.q(`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at,
			expires_at, finished, response_status, response_header, response_body) VALUES (?, ?, ?, ?, ?, ?, ?, 200, '{}', ?)`),
			"p", fmt.Sprintf("old-%v-%d", finished, i), []byte("f"), "seed", now.Add(-48*time.Hour).UnixNano(),
			now.Add(-24*time.Hour).UnixNano(), fin, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// L1.9: Sweep deletes every expired key, batch after batch: one more key
// than a batch holds is deleted, counted in the total, and the sweep ends.
func TestSweepDeletesEveryBatch(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		insertKeyRows(t, e, 501, true) // a batch is 500
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		n, err := e.keys.Sweep(ctx)
		if err != nil || n != 501 {
			t.Fatalf("Sweep = %d, %v; want 501, nil", n, err)
		}
		if left := e.count("idempotency_keys"); left != 0 {
			t.Errorf("%d keys left, want none", left)
		}
		if s := e.keys.Stats(); s.Swept != 501 {
			t.Errorf("Stats.Swept %d, want 501", s.Swept)
		}
	})
}

// L1.10: Sweep warns of unfinished keys past retention, on the configured
// Logger, only when there are some.
func TestSweepWarnsOfAbandonedKeysOnlyWhenThereAreSome(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		var log syncBuffer
		cfg := idemserver.Config{DB: e.db, Now: e.clock.Now, Logger: slog.New(slog.NewTextHandler(&log, nil)), Table: "logged_keys"}
		logged, err := idemserver.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logged.Close() })
		if _, err := logged.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := log.String(); strings.Contains(s, "past retention") {
			t.Errorf("a sweep with no abandoned key warned:\n%s", s)
		}
		if _, err := e.db.Exec(e.q(`INSERT INTO logged_keys (principal, idem_key, fingerprint, seed, created_at,
			expires_at, finished) VALUES (?, ?, ?, ?, ?, ?, 0)`), "p", "k", []byte("f"), "seed",
			e.clock.Now().Add(-48*time.Hour).UnixNano(), e.clock.Now().Add(-24*time.Hour).UnixNano()); err != nil {
			t.Fatal(err)
		}
		if _, err := logged.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := log.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "past retention") || !strings.Contains(s, "abandoned=1") {
			t.Errorf("a sweep with one abandoned key logged:\n%s\nwant a warning with abandoned=1", s)
		}
	})
}

// L2.2: only a keyed request is rerun at once after a unique violation
// (to find the row a concurrent request under its key committed); an
// unkeyed one, on an Optional route, whose handler meets a unique
// violation runs once and fails.
func TestAnUnkeyedUniqueViolationIsNotRerun(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		if _, err := e.db.Exec(e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "a", "first"); err != nil {
			t.Fatal(err)
		}
		runs := 0
		route := e.keys.Handle(idemserver.Route{Optional: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			ctx := r.Context()
			if _, err := idemserver.Tx(ctx).ExecContext(ctx, e.q(`INSERT INTO items (id, note) VALUES (?, ?)`), "a", "again"); err != nil {
				idemserver.Fail(ctx, err)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		got := do(t, route, "POST", "/items", "", "a")
		if got.status < 500 || runs != 1 {
			t.Fatalf("an unkeyed duplicate: %d after %d runs, want a 5xx after 1", got.status, runs)
		}
	})
}
