package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/mysql"
	"github.com/idemkit/idem/lab/testkit/mysqltest"
)

// TestKeysCompareByteForByte: keys and principals that differ only in
// case are different keys on every database, MySQL's case-insensitive
// default collations included (its key columns are binary).
func TestKeysCompareByteForByte(t *testing.T) {
	principal := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	onBothStores(t, idemserver.Config{Principal: principal}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		route := e.keys.Handle(idemserver.Route{}, h)
		for i, c := range []struct{ key, user, item string }{
			{"order-1", "alice", "a"}, {"ORDER-1", "alice", "b"}, {"Order-1", "alice", "c"}, {"order-1", "Alice", "d"},
		} {
			first := do(t, route, "POST", "/items", c.key, c.item, "X-User", c.user)
			again := do(t, route, "POST", "/items", c.key, c.item, "X-User", c.user)
			if first.status != http.StatusCreated || first.header.Get(idemserver.HeaderReplayed) != "" ||
				again.body != first.body || again.header.Get(idemserver.HeaderReplayed) != "true" || h.Runs() != i+1 {
				t.Fatalf("key %q of %q: %+v then %+v after %d runs; want a new 201, then its replay", c.key, c.user, first, again, h.Runs())
			}
		}
		if n := e.count("items"); n != 4 {
			t.Fatalf("%d items, want 4", n)
		}
	})
}

// TestMySQLNeedsAStrictSQLMode: on a session whose sql_mode is not
// strict, which would cut a long key short instead of refusing it, New
// fails with mysql.ErrSession naming sql_mode, and creates no table.
func TestMySQLNeedsAStrictSQLMode(t *testing.T) {
	dsn := mysqltest.NewDatabase(t)
	db, err := sql.Open("mysql", dsn+"?sql_mode=%27NO_ENGINE_SUBSTITUTION%27")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = idemserver.New(context.Background(), idemserver.Config{DB: db})
	if !errors.Is(err, mysql.ErrSession) || !strings.Contains(err.Error(), "sql_mode") || !strings.Contains(err.Error(), "STRICT_TRANS_TABLES") {
		t.Fatalf("New on a non-strict session: %v; want mysql.ErrSession naming sql_mode", err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after a refused New (%v), want 0", n, err)
	}

	strict, err := sql.Open("mysql", dsn+"?sql_mode=%27STRICT_ALL_TABLES%27")
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: strict})
	if err != nil {
		t.Fatalf("New on a STRICT_ALL_TABLES session: %v", err)
	}
	keys.Close()
}

// TestMySQLTooLongAKeyIsRefused: a key longer than mysql.MaxText, which a
// larger Config.MaxKeyLength lets through, fails loudly at its claim (5xx,
// the handler not run, nothing stored) instead of being cut short into
// another key.
func TestMySQLTooLongAKeyIsRefused(t *testing.T) {
	db, err := sql.Open("mysql", mysqltest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, MaxKeyLength: 2 * mysql.MaxText, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	runs := 0
	route := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	base := strings.Repeat("k", mysql.MaxText)
	if w := serve(route, req("POST", "/x", "{}", base)); w.Code != http.StatusCreated {
		t.Fatalf("a key of mysql.MaxText bytes: %d, want 201", w.Code)
	}
	if w := serve(route, req("POST", "/x", "{}", base+"-other")); w.Code < 500 {
		t.Fatalf("a key past mysql.MaxText: %d %q, want 5xx", w.Code, w.Body.String())
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM idempotency_keys`).Scan(&n); err != nil || n != 1 || runs != 1 {
		t.Fatalf("%d key rows (%v) after %d runs; want 1 and 1", n, err, runs)
	}
}

// TestMySQLDownIsUnavailable: with the server stopped, a request gets 503
// with Retry-After and nothing runs to completion; started again, the
// retry under the same key runs and is stored.
func TestMySQLDownIsUnavailable(t *testing.T) {
	srv := mysqltest.Own(t)
	ctx := context.Background()
	dsn, err := srv.CreateDatabase(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys, err := idemserver.New(ctx, idemserver.Config{DB: db, Logger: proofQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	route := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("made"))
	}))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	w := serve(route, req("POST", "/x", "{}", "down"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("with the server down: %d, Retry-After %q; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := serve(route, req("POST", "/x", "{}", "down"))
	wantStatus(t, "the retry once the server is back", first, http.StatusCreated)
	wantReplay(t, "again", serve(route, req("POST", "/x", "{}", "down")), first)
}

// TestMySQLTwoRetriesCannotBothTakeOverAClaim: on MySQL, where every
// transaction of a key runs at READ COMMITTED, the key row is read FOR
// UPDATE, so that two retries of a released phased claim cannot both take
// it over. The first request answers 502 (its claim released); a retry
// takes the claim over and is held inside its UPDATE (a trigger waits for
// a lock the test holds) while a second retry reads the row. The second
// waits for the first's claim (its read is in flight when the first
// commits), then finds it held: 409 (or, if the first has finished by
// then, its replay). The handler runs once for the two.
func TestMySQLTwoRetriesCannotBothTakeOverAClaim(t *testing.T) {
	e := newProofEnv(t, proofStore{name: "mariadb", mysql: true})
	keys := e.keys(e.config())
	var runs atomic.Int64
	route := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "the gateway failed", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	if first := serve(route, req("POST", "/charges", "x", "k")); first.Code != http.StatusBadGateway {
		t.Fatalf("first request: %d %q, want 502", first.Code, first.Body)
	}
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, `CREATE TRIGGER takeover_gate BEFORE UPDATE ON `+idemserver.DefaultTable+` FOR EACH ROW
		BEGIN
			IF NEW.lock_token IS NOT NULL AND NOT (NEW.lock_token <=> OLD.lock_token) THEN
				SET @gate = GET_LOCK('takeover_gate', 60);
				SET @gate = RELEASE_LOCK('takeover_gate');
			END IF;
		END`); err != nil {
		t.Fatal(err)
	}
	gate, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	var got int
	if err := gate.QueryRowContext(ctx, `SELECT GET_LOCK('takeover_gate', 10)`).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %d, %v", got, err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			gate.ExecContext(ctx, `DO RELEASE_LOCK('takeover_gate')`)
		}
	}
	defer release()
	waitFor := func(what, query string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var n int
			if err := e.db.QueryRowContext(ctx, query).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
		}
	}
	answers := make(chan *httptest.ResponseRecorder, 2)
	go func() { answers <- serve(route, req("POST", "/charges", "x", "k")) }()
	waitFor("the first retry held in its takeover",
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE 'SET @gate = GET_LOCK%'`)
	go func() { answers <- serve(route, req("POST", "/charges", "x", "k")) }()
	waitFor("the second retry reading the key row",
		`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Execute' AND INFO LIKE '%`+
			idemserver.DefaultTable+`%'`)
	release()
	a, b := <-answers, <-answers
	if a.Code != http.StatusCreated {
		a, b = b, a
	}
	if a.Code != http.StatusCreated || a.Body.String() != "charged" || (b.Code != http.StatusConflict && b.Body.String() != "charged") ||
		(b.Code != http.StatusConflict && b.Header().Get(idemserver.HeaderReplayed) != "true") {
		t.Errorf("the retries: %d %q and %d %q; want 201 and 409 (or its replay)", a.Code, a.Body, b.Code, b.Body)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (the first request, then one retry)", n)
	}
}

// TestL7MySQLNothingCommitsAfterADeadlock proves L7.3: on MySQL a
// deadlock rolls the handler's whole transaction back, and the
// connection's next statements would commit on their own. The handler
// here meets a real deadlock (with a heavier transaction of the test's,
// so that InnoDB rolls the handler's back), ignores it, writes another
// row and answers 201. On a *sql.DB of mysql.Open the row written after
// the deadlock fails and commits nothing; on one of sql.Open it commits
// on its own (the reason to use mysql.Open); on either the answer of the
// lost transaction is not stored: the request runs again, and the client
// gets the rerun's 201.
func TestL7MySQLNothingCommitsAfterADeadlock(t *testing.T) {
	for _, observed := range []bool{true, false} {
		t.Run(fmt.Sprint("mysql.Open=", observed), func(t *testing.T) {
			dsn := mysqltest.NewDatabase(t)
			open := func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }
			if observed {
				open = mysql.Open
			}
			db, err := open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, stmt := range []string{
				`CREATE TABLE locks (id INT PRIMARY KEY, n INT NOT NULL)`,
				`INSERT INTO locks VALUES (1, 0), (2, 0)`,
				`CREATE TABLE heavy (id INT NOT NULL)`,
				`CREATE TABLE notes (note VARCHAR(64) NOT NULL)`,
			} {
				if _, err := db.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db, Logger: proofQuiet})
			if err != nil {
				t.Fatal(err)
			}
			defer keys.Close()
			other, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback()
			// The test's transaction is the heavier: InnoDB rolls the
			// handler's back.
			for i := range 50 {
				if _, err := other.Exec(`INSERT INTO heavy VALUES (?)`, i); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := other.Exec(`UPDATE locks SET n = n + 1 WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			deadlocked := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				run := runs.Add(1)
				ctx := r.Context()
				tx := idemserver.Tx(ctx)
				if run == 1 {
					tx.ExecContext(ctx, `UPDATE locks SET n = n + 1 WHERE id = 2`)
					_, err := tx.ExecContext(ctx, `UPDATE locks SET n = n + 1 WHERE id = 1`) // waits for the test's
					deadlocked <- err
					tx.ExecContext(ctx, `INSERT INTO notes VALUES ('after the deadlock')`)
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO notes VALUES (?)`, fmt.Sprint("run ", run)); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "run %d", run)
			})
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- serve(keys.Handle(idemserver.Route{}, h), req("POST", "/notes", "{}", "k")) }()
			// Until the handler waits for the test's lock; InnoDB refreshes
			// what innodb_trx shows only when it has not been read for 0.1 s.
			for waiting := 0; waiting == 0; time.Sleep(150 * time.Millisecond) {
				select {
				case got := <-done:
					t.Fatalf("the request finished (%d %q) without waiting for the test's lock", got.Code, got.Body.String())
				default:
				}
				if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.innodb_trx t
					JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
					WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := other.Exec(`UPDATE locks SET n = n + 1 WHERE id = 2`); err != nil { // the deadlock
				t.Fatalf("the test's transaction: %v, want the handler's rolled back instead", err)
			}
			if err := <-deadlocked; err == nil || !strings.Contains(err.Error(), "1213") {
				t.Fatalf("the handler's statement: %v, want a deadlock", err)
			}
			if err := other.Commit(); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.Code != http.StatusCreated || got.Body.String() != "run 2" {
				t.Fatalf("the client got %d %q, want the rerun's 201", got.Code, got.Body.String())
			}
			var notes []string
			rows, err := db.Query(`SELECT note FROM notes ORDER BY note`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var n string
				rows.Scan(&n)
				notes = append(notes, n)
			}
			want := "[run 2]"
			if !observed {
				want = "[after the deadlock run 1 run 2]" // committed on their own
			}
			if fmt.Sprint(notes) != want || runs.Load() != 2 {
				t.Fatalf("notes %q after %d runs, want %s after 2", notes, runs.Load(), want)
			}
		})
	}
}
