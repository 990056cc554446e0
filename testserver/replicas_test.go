package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/jackc/pgx/v5/pgconn"
)

// replicas starts n servers on one new PostgreSQL database, each listening
// on its own port, as n processes would.
func replicas(t *testing.T, n int, cfg Config) []*Instance {
	t.Helper()
	cfg.Path = pgtest.NewDatabase(t)
	ins := make([]*Instance, n)
	for i := range ins {
		ins[i] = Start(t, cfg)
	}
	return ins
}

// openPG opens the database at dsn for a test's own statements.
func openPG(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// S9 with S3 and S4: 200 requests with one key, spread over three replicas
// at once, have one effect; every other one is a replay of the same answer
// or, while the first is in flight, 409 with Retry-After.
func TestPostgresReplicasOneKeyOneEffect(t *testing.T) {
	const n = 200
	tests := []struct {
		name string
		path string
		body string
	}{
		{"charge", "/charges", chargeBody},
		{"reservation", "/reservations", `{"item_id":"sku-1","quantity":2,"reference":"r"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The gateway's delay keeps the first charge in flight while
			// the others arrive.
			ins := replicas(t, 3, Config{Faults: Faults{Gateway: GatewayFaults{Delay: 50 * time.Millisecond}}})
			stock(t, ins[0], "sku-1", 100)
			replies := make([]reply, n)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-gate
					replies[i] = <-sendAsync(t, ins[i%len(ins)], req{method: "POST", path: tt.path, key: "same", client: "c", body: tt.body})
				})
			}
			close(gate)
			wg.Wait()
			firsts, replays, conflicts := 0, 0, 0
			var first string
			var answers []string
			for _, rep := range replies {
				switch {
				case rep.status == http.StatusCreated && rep.header.Get(HeaderReplayed) == "true":
					replays++
					answers = append(answers, string(rep.body))
				case rep.status == http.StatusCreated:
					firsts++
					first = string(rep.body)
				case rep.status == http.StatusConflict && rep.header.Get("Retry-After") != "":
					conflicts++
				default:
					t.Fatalf("unexpected reply %d %s", rep.status, rep.body)
				}
			}
			if firsts != 1 || firsts+replays+conflicts != n {
				t.Fatalf("%d first answers, %d replays, %d in-flight conflicts; want exactly one first answer", firsts, replays, conflicts)
			}
			for _, a := range answers {
				if a != first {
					t.Fatalf("replay %s differs from the first answer %s", a, first)
				}
			}
			// Every replica sees the one effect and the one capture.
			var retries int64
			for i, in := range ins {
				st := stats(t, in)
				retries += st.Retries
				want := Effects{Reservations: 1}
				wantCaptures := int64(0)
				if tt.path == "/charges" {
					want, wantCaptures = Effects{Charges: 1}, 1
				}
				if st.Effects != want || st.GatewayCaptures != wantCaptures || st.Keys != 2 || st.InFlight != 0 {
					t.Fatalf("replica %d: stats %+v; want effects %+v, %d capture(s), 2 keys, none in flight", i, st, want, wantCaptures)
				}
			}
			if tt.path == "/reservations" {
				if got := available(t, ins[2], "sku-1"); got != 98 {
					t.Fatalf("stock %d, want 98", got)
				}
			}
			t.Logf("%d requests: 1 first answer, %d replays, %d conflicts; %d transactions retried", n, replays, conflicts, retries)
			checkConsistent(t, ins[0].Server)
		})
	}
}

// S9 with S5: a replica killed in the middle of a charge leaves the key row
// at its last recovery point; another replica, already serving the same
// database, takes the stale lock over and resumes from there. One capture,
// one charge.
func TestPostgresKilledReplicaIsResumedByAnother(t *testing.T) {
	tests := []struct {
		name   string
		fault  string
		point  string
		gwCall bool   // whether the resuming replica calls the gateway again (it answers from its store)
		resume string // the recovery point the resuming replica starts from
	}{
		{"killed after the gateway call", "-fault-crash-after-gateway=1", CrashPointAfterGateway, true, pointStarted},
		{"killed inside the final transaction", "-fault-crash-before-commit=1", CrashPointBeforeCommit, false, pointGatewayCalled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dsn := pgtest.NewDatabase(t)
			client := childClient(t)
			r := req{method: "POST", path: "/charges", key: "2b0c7f0e-replica-kill", client: "shop", body: chargeBody}

			// The claim's lease is its holder's -lock-timeout: the doomed
			// replica's is short, so the survivor waits out a second, not
			// the default ten.
			survivor := startChild(t, "-addr=127.0.0.1:0", "-db="+dsn, "-log-level=info", "-lock-timeout=1s")
			doomed := startChild(t, "-addr=127.0.0.1:0", "-db="+dsn, "-log-level=warn", "-lock-timeout=1s", tt.fault, "-crash=hang")
			lost := make(chan error, 1)
			go func() {
				_, err := postTo(t, client, doomed.url, r)
				lost <- err
			}()
			doomed.waitLine("crash point " + tt.point + " reached")
			if err := doomed.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if _, sig := doomed.wait(); sig != syscall.SIGKILL {
				t.Fatalf("replica not killed by SIGKILL (%v)", sig)
			}
			if err := <-lost; err == nil {
				t.Fatal("the request that the killed replica was serving got an answer")
			}

			var rep reply
			conflicts := 0
			deadline := time.Now().Add(10 * time.Second)
			for {
				var err error
				if rep, err = postTo(t, client, survivor.url, r); err != nil {
					t.Fatal(err)
				}
				if rep.status != http.StatusConflict || time.Now().After(deadline) {
					break
				}
				// The dead replica's claim: wait out its one-second lease,
				// polling faster than Retry-After says.
				conflicts++
				time.Sleep(20 * time.Millisecond)
			}
			wantStatus(t, rep, http.StatusCreated)
			statsRep, err := postTo(t, client, survivor.url, req{method: "GET", path: "/stats"})
			if err != nil {
				t.Fatal(err)
			}
			st := decode[Stats](t, statsRep)
			if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.InFlight != 0 || st.Conflicts != int64(conflicts) {
				t.Fatalf("stats %+v after %d conflicts; want one capture, one charge, one resumed request", st, conflicts)
			}
			if replayed := strings.Contains(survivor.stderr.String(), "gateway replayed capture"); replayed != tt.gwCall {
				t.Fatalf("gateway called again: %v, want %v", replayed, tt.gwCall)
			}
			if !strings.Contains(survivor.stderr.String(), `msg="resuming charge" key=`+r.key+" point="+tt.resume+" stale_lock=true") {
				t.Fatalf("the survivor did not take the stale lock over at %s:\n%s", tt.resume, survivor.stderr.String())
			}
			again, err := postTo(t, client, survivor.url, r)
			if err != nil || again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(rep.body) {
				t.Fatalf("retry after success: %d %s (%v), want the replay", again.status, again.body, err)
			}
			survivor.cmd.Process.Signal(syscall.SIGTERM)
			if code, _ := survivor.wait(); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, survivor.stderr.String())
			}
		})
	}
}

// waitForLockWait waits until some connection to db's database waits for
// a lock: of this database alone, since other tests may share the server
// (a row lock's wait, on a transaction ID, names no database in pg_locks).
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	waitFor(t, "a transaction waiting for a lock", func() bool {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// oneReplicaAndATransaction starts one replica with 5 of sku-1 in stock,
// and opens a transaction of the test's own on its database (rolled back at
// cleanup unless committed), for a test to hold rows a request will need.
func oneReplicaAndATransaction(t *testing.T) (*Instance, *sql.DB, *sql.Tx) {
	t.Helper()
	in := replicas(t, 1, Config{})[0]
	stock(t, in, "sku-1", 5)
	db := openPG(t, in.Server.cfg.Path)
	other, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Rollback() })
	return in, db, other
}

// A serialization failure (40001) and a deadlock (40P01) are provoked in a
// request's transaction by a transaction of the test's own; the server
// runs its transaction again and answers 201, not 500.
func TestPostgresConflictsAreRetried(t *testing.T) {
	t.Run("serialization failure", func(t *testing.T) {
		in, db, other := oneReplicaAndATransaction(t)
		// The test's transaction changes the row the reservation will
		// update, and commits once the reservation waits for it: the
		// reservation's snapshot is then older than the row's version.
		if _, err := other.Exec(`UPDATE inventory SET available = 4 WHERE item_id = 'sku-1'`); err != nil {
			t.Fatal(err)
		}
		done := sendAsync(t, in, req{method: "POST", path: "/reservations", key: "k", body: `{"item_id":"sku-1","quantity":1}`})
		waitForLockWait(t, db)
		if err := other.Commit(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, <-done, http.StatusCreated)
		if got := available(t, in, "sku-1"); got != 3 {
			t.Fatalf("stock %d, want 3 (4 from the test's update, less 1)", got)
		}
		if st := stats(t, in); st.Retries != 1 || st.Effects.Reservations != 1 {
			t.Fatalf("stats %+v; want one retried transaction and one reservation", st)
		}
	})
	t.Run("deadlock", func(t *testing.T) {
		in, db, other := oneReplicaAndATransaction(t)
		// The test's transaction holds the stock the request will update;
		// the request claims its key, then waits for the stock; the test's
		// transaction then inserts the same key and waits for the request:
		// a deadlock, which the request's connection detects first (the
		// test's waits longer before looking) and is aborted with. The
		// request runs again once the test's transaction rolls back.
		if _, err := other.Exec(`SET LOCAL deadlock_timeout = '1min'`); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(`UPDATE inventory SET available = available WHERE item_id = 'sku-1'`); err != nil {
			t.Fatal(err)
		}
		done := sendAsync(t, in, req{method: "POST", path: "/reservations", key: "dl", body: `{"item_id":"sku-1","quantity":1}`})
		waitForLockWait(t, db)
		if _, err := other.Exec(`
			INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished)
			VALUES ($1, 'dl', '\x00', 'x', 0, 0, 0)`, AnonymousClient); err != nil {
			t.Fatal(err)
		}
		if err := other.Rollback(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, <-done, http.StatusCreated)
		if got := available(t, in, "sku-1"); got != 4 {
			t.Fatalf("stock %d, want 4", got)
		}
		if st := stats(t, in); st.Retries < 1 || st.Effects.Reservations != 1 {
			t.Fatalf("stats %+v; want a retried transaction and one reservation", st)
		}
	})
}

// S9 with S4: a key reused at once, on two replicas, for two different
// reservations. The first to commit is served; the other, whose INSERT met
// the first one's reservation under the same key in the UNIQUE constraint
// of the business table, runs again, finds the key and gets 422, not a 500
// from the constraint. Nothing of it is committed.
func TestPostgresKeyReusedAtOnceIsRefused(t *testing.T) {
	in := replicas(t, 1, Config{})[0]
	stock(t, in, "sku-1", 5)
	stock(t, in, "sku-2", 5)
	db := openPG(t, in.Server.cfg.Path)
	other, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	// The test's transaction is another replica's reservation of sku-1
	// under key k, not yet committed.
	for _, q := range []string{
		`SELECT COUNT(*) FROM idempotency_keys WHERE principal = $1 AND idem_key = 'k'`,
		`INSERT INTO reservations (id, client_id, idempotency_key, item_id, quantity, created_at)
		 VALUES ('rsv_other', $1, 'k', 'sku-1', 1, 0)`,
		`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished,
		                               response_status, response_header, response_body)
		 VALUES ($1, 'k', '\x00', 'x', 0, 9000000000000000000, 1, 201, '{}', '\x00')`,
	} {
		if _, err := other.Exec(q, AnonymousClient); err != nil {
			t.Fatal(err)
		}
	}
	done := sendAsync(t, in, req{method: "POST", path: "/reservations", key: "k", body: `{"item_id":"sku-2","quantity":1}`})
	waitForLockWait(t, db)
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, <-done, http.StatusUnprocessableEntity, ProblemKeyMismatch)
	if got := available(t, in, "sku-2"); got != 5 {
		t.Fatalf("sku-2: stock %d, want 5 (the refused request reserves nothing)", got)
	}
	if st := stats(t, in); st.Effects.Reservations != 1 || st.Mismatches != 1 || st.Retries != 1 {
		t.Fatalf("stats %+v; want the other replica's reservation only, one mismatch, one transaction run again", st)
	}
}

// S9 with S6: three replicas sweep one database at once. Every expired key
// is deleted by exactly one of them (the deleted counts add up to the
// expired keys, none left), and no live key is deleted: neither a recent
// finished key nor an old unfinished one.
func TestPostgresReplicasSweepEachKeyOnce(t *testing.T) {
	const expired, recent, unfinished = 1300, 40, 30 // expired > 2 batches
	clock := newFakeClock()
	ins := replicas(t, 3, Config{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	db := openPG(t, ins[0].Server.cfg.Path)
	old, now := clock.Now().Add(-2*time.Hour).UnixNano(), clock.Now().UnixNano()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished,
		                               response_status, response_header, response_body)
		  SELECT 'client:c', 'old-' || i, '\x00', 'd-old-' || i, $1, $1::bigint + $3::bigint, 1, 201, '{}', '\x00'
		  FROM generate_series(1, $2::int) i`, []any{old, expired, time.Hour.Nanoseconds()}},
		{`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished,
		                               response_status, response_header, response_body)
		  SELECT 'client:c', 'new-' || i, '\x00', 'd-new-' || i, $1, $1::bigint + $3::bigint, 1, 201, '{}', '\x00'
		  FROM generate_series(1, $2::int) i`, []any{now, recent, time.Hour.Nanoseconds()}},
		{`INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished)
		  SELECT 'client:c', 'open-' || i, '\x00', 'd-open-' || i, $1, $1::bigint + $3::bigint, 0
		  FROM generate_series(1, $2::int) i`, []any{old, unfinished, time.Hour.Nanoseconds()}},
		{`INSERT INTO reservations (id, client_id, idempotency_key, item_id, quantity, created_at)
		  SELECT 'rsv-' || idem_key, principal, idem_key, 'sku-1', 1, created_at FROM idempotency_keys WHERE finished = 1`, nil},
	} {
		if _, err := db.Exec(q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}

	counts := make([]int64, len(ins))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			<-gate
			n, err := in.Server.Sweep(context.Background())
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
			counts[i] = n
		})
	}
	close(gate)
	wg.Wait()
	if sum := counts[0] + counts[1] + counts[2]; sum != expired {
		t.Fatalf("deleted %v, %d in all; want %d", counts, sum, expired)
	}
	for _, c := range []struct {
		what string
		sql  string
		want int
	}{
		{"expired keys left", `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key LIKE 'old-%'`, 0},
		{"recent keys left", `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key LIKE 'new-%'`, recent},
		{"unfinished keys left", `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key LIKE 'open-%'`, unfinished},
		{"reservations that lost their key", `SELECT COUNT(*) FROM reservations WHERE idempotency_key IS NULL AND id LIKE 'rsv-old-%'`, expired},
		{"reservations that kept their key", `SELECT COUNT(*) FROM reservations WHERE idempotency_key = substr(id, 5)`, recent},
	} {
		var n int
		if err := db.QueryRow(c.sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s: %d, want %d", c.what, n, c.want)
		}
	}
	if st := stats(t, ins[1]); st.Abandoned != unfinished {
		t.Fatalf("abandoned %d, want %d", st.Abandoned, unfinished)
	}
}

// Replicas that open one empty database at the same moment all start: the
// schema is created once, the others wait for it.
func TestPostgresReplicasCreateTheSchemaAtOnce(t *testing.T) {
	const n = 6
	dsn := pgtest.NewDatabase(t)
	servers := make([]*Server, n)
	errs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			servers[i], errs[i] = New(Config{Path: dsn})
		})
	}
	close(gate)
	wg.Wait()
	for i, s := range servers {
		if errs[i] != nil {
			t.Errorf("replica %d: %v", i, errs[i])
			continue
		}
		if _, err := s.Stats(context.Background()); err != nil {
			t.Errorf("replica %d: stats: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("replica %d: close: %v", i, err)
		}
	}
}

// A replica started beside others that are serving runs no DDL: with a
// transaction holding the tables (as a serving replica's does), New still
// returns, where CREATE INDEX IF NOT EXISTS would wait for that transaction
// (or, among several, deadlock with it) before finding the index there.
func TestPostgresReplicaJoinsWhileOthersServe(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	first, err := New(Config{Path: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	db := openPG(t, dsn)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, table := range []string{"idempotency_keys", "charges", "reservations", "inventory"} {
		if _, err := tx.Exec("LOCK TABLE " + table + " IN ROW EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
	}
	// Only a wait for the lock could make New slow, and that wait is what
	// the test rules out; the bound keeps a regression from hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := New(Config{Path: dsn})
		if err == nil {
			err = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second replica: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("second replica waited for the serving transaction's lock: it ran DDL on a database that had the schema")
	}
}

// A PostgreSQL that cannot be reached is named at start, and a request that
// meets it while running gets 503 with Retry-After, not a 500 or a panic;
// once PostgreSQL is back, requests succeed again.
func TestPostgresUnavailable(t *testing.T) {
	t.Run("at start", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		// pgx takes a password in the URL's user part or in its query
		// (password, sslpassword); none may reach an error or a log.
		for _, url := range []string{
			"postgres://idem:secret@" + addr + "/idem?sslmode=disable&connect_timeout=5",
			"postgres://idem@" + addr + "/idem?password=secret&sslmode=disable&connect_timeout=5",
			"postgresql://idem@" + addr + "/idem?sslmode=disable&PassWord=secret&connect_timeout=5",
			"postgres://idem@" + addr + "/idem?sslmode=disable&sslpassword=secret&connect_timeout=5",
			"postgres://idem@" + addr + "/idem?sslmode=disable&pass%77ord=secret&connect_timeout=5",
		} {
			_, err = New(Config{Path: url})
			if !errors.Is(err, ErrDatabaseUnavailable) || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "secret") {
				t.Fatalf("New(%q): %v; want ErrDatabaseUnavailable naming %s, without the password", url, err, addr)
			}
			if got := redactDatabase(url); strings.Contains(got, "secret") || !strings.Contains(got, addr) || !strings.Contains(got, "sslmode=disable") {
				t.Fatalf("redactDatabase(%q) = %q; want the URL without the password", url, got)
			}
		}
	})
	// A PostgreSQL that answers and refuses (no such database, a wrong
	// password) is not unavailable: waiting would not help, and the error
	// says why instead.
	t.Run("refused by a reachable server", func(t *testing.T) {
		u, err := url.Parse(pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/idem_no_such_database"
		_, err = New(Config{Path: u.String()})
		if err == nil || errors.Is(err, ErrDatabaseUnavailable) || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("New: %v; want an error saying the database does not exist, not ErrDatabaseUnavailable", err)
		}
	})
	t.Run("while serving", func(t *testing.T) {
		pg := pgtest.Own(t)
		in := Start(t, Config{Path: pg.DSN()})
		ctx := context.Background()
		wantStatus(t, send(t, in, req{method: "PUT", path: "/inventory/sku-1", key: "k1", body: `{"available":1}`}), http.StatusOK)
		if err := pg.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// A database lost between the server's own check and the
		// layer's opening is named the same way.
		if _, err := in.Server.openKeys(ctx, "Idempotency-Key", ""); !errors.Is(err, ErrDatabaseUnavailable) {
			t.Fatalf("openKeys with PostgreSQL stopped: %v; want ErrDatabaseUnavailable", err)
		}
		for _, r := range []req{
			{method: "PUT", path: "/inventory/sku-1", key: "k2", body: `{"available":2}`},
			{method: "POST", path: "/charges", key: "k3", body: chargeBody},
			{method: "GET", path: "/inventory/sku-1"},
		} {
			rep := send(t, in, r)
			wantProblem(t, rep, http.StatusServiceUnavailable, ProblemUnavailable)
			if rep.header.Get("Retry-After") == "" {
				t.Fatalf("%s %s: 503 without Retry-After", r.method, r.path)
			}
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, send(t, in, req{method: "PUT", path: "/inventory/sku-1", key: "k2", body: `{"available":2}`}), http.StatusOK)
		if got := available(t, in, "sku-1"); got != 2 {
			t.Fatalf("stock %d, want 2", got)
		}
	})
}

// A transaction that keeps failing to serialize is run maxTxAttempts times,
// then given up with ErrContention, which a request gets as 503 with
// Retry-After; any other error is not retried.
func TestTransactionRetriesAreBounded(t *testing.T) {
	db, err := openStore(context.Background(), ":memory:", time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	runs := 0
	err = db.inTx(context.Background(), func(*txn) error {
		runs++
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40001"})
	})
	if !errors.Is(err, ErrContention) || runs != maxTxAttempts || db.retries.Load() != maxTxAttempts-1 {
		t.Fatalf("%d runs, %d retries, err %v; want %d runs and ErrContention", runs, db.retries.Load(), err, maxTxAttempts)
	}
	runs = 0
	other := errors.New("not a conflict")
	if err := db.inTx(context.Background(), func(*txn) error { runs++; return other }); !errors.Is(err, other) || runs != 1 {
		t.Fatalf("%d runs, err %v; want one run and the error", runs, err)
	}

	in := replicas(t, 1, Config{})[0]
	rec := httptest.NewRecorder()
	in.Server.internalError(rec, httptest.NewRequest("POST", "/charges", nil), fmt.Errorf("testserver: finishing: %w", ErrContention))
	rep := reply{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	wantProblem(t, rep, http.StatusServiceUnavailable, ProblemUnavailable)
	if rep.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q, want 1", rep.header.Get("Retry-After"))
	}
}

// A sweeper skips the expired keys another transaction holds locked (on
// PostgreSQL, another replica's sweeper) instead of waiting for them, and
// deletes them on a later sweep.
func TestPostgresSweepSkipsLockedKeys(t *testing.T) {
	const expired = 600
	clock := newFakeClock()
	in := replicas(t, 1, Config{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})[0]
	db := openPG(t, in.Server.cfg.Path)
	if _, err := db.Exec(`
		INSERT INTO idempotency_keys (principal, idem_key, fingerprint, seed, created_at, expires_at, finished,
		                              response_status, response_header, response_body)
		SELECT 'client:c', 'old-' || i, '\x00', 'd-' || i, $1, $1::bigint + $3::bigint, 1, 201, '{}', '\x00'
		FROM generate_series(1, $2::int) i`, clock.Now().Add(-2*time.Hour).UnixNano(), expired, time.Hour.Nanoseconds()); err != nil {
		t.Fatal(err)
	}
	other, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	var locked int64
	if err := other.QueryRow(`SELECT COUNT(*) FROM (SELECT id FROM idempotency_keys WHERE idem_key LIKE 'old-1%' FOR UPDATE) l`).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n, err := in.Server.Sweep(ctx); err != nil || n != expired-locked {
		t.Fatalf("sweep beside %d locked keys: %d deleted (%v), want %d", locked, n, err, expired-locked)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, err := in.Server.Sweep(ctx); err != nil || n != locked {
		t.Fatalf("sweep after the lock: %d deleted (%v), want %d", n, err, locked)
	}
}
