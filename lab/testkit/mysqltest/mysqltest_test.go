package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// withServer runs the tests through Run, for goleak, which then checks
// that nothing is left once the shared server is closed.
type withServer struct{ m *testing.M }

func (w withServer) Run() int { return Run(w.m) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withServer{m}) }

// open returns a database handle on dsn, closed when t ends.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// answers reports whether the server at dsn accepts a connection.
func answers(t *testing.T, dsn string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return ping(ctx, dsn) == nil
}

// queryRow returns the one value of the one row of query.
func queryRow[T any](t *testing.T, db *sql.DB, query string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRowContext(t.Context(), query, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

func TestNewDatabaseGivesDistinctEmptyDatabases(t *testing.T) {
	a, b := open(t, NewDatabase(t)), open(t, NewDatabase(t))
	nameA, nameB := queryRow[string](t, a, "SELECT DATABASE()"), queryRow[string](t, b, "SELECT DATABASE()")
	if nameA == nameB || !strings.HasPrefix(nameA, "mt_") || !strings.HasPrefix(nameB, "mt_") {
		t.Fatalf("databases %q and %q: want two new, distinct ones", nameA, nameB)
	}
	for _, db := range []*sql.DB{a, b} {
		if n := queryRow[int](t, db, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"); n != 0 {
			t.Fatalf("a new database has %d tables, want 0", n)
		}
	}
	if _, err := a.Exec("CREATE TABLE charges (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec("INSERT INTO charges VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	if n := queryRow[int](t, a, "SELECT COUNT(*) FROM charges"); n != 2 {
		t.Fatalf("charges has %d rows in %s, want 2", n, nameA)
	}
	if n := queryRow[int](t, b, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"); n != 0 {
		t.Fatalf("table charges, created in %s, exists in %s too", nameA, nameB)
	}
}

func TestNewDatabaseIsDroppedAtCleanup(t *testing.T) {
	admin := open(t, Shared(t).DSN())
	const exists = "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?"
	var name string
	t.Run("user", func(t *testing.T) {
		name = queryRow[string](t, open(t, NewDatabase(t)), "SELECT DATABASE()")
		if n := queryRow[int](t, admin, exists, name); n != 1 {
			t.Fatalf("database %s: %d rows in information_schema.schemata, want 1", name, n)
		}
	})
	if name == "" {
		t.FailNow()
	}
	if n := queryRow[int](t, admin, exists, name); n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

func TestKillLosesNothingCommitted(t *testing.T) {
	s := Own(t)
	dsn, port := s.DSN(), s.Port()
	db := open(t, dsn)
	for _, stmt := range []string{
		"CREATE DATABASE shop",
		"CREATE TABLE shop.charges (id INT PRIMARY KEY, amount INT NOT NULL) ENGINE=InnoDB",
		// seq_1_to_1000: MariaDB's sequence engine, in any database.
		"INSERT INTO shop.charges SELECT seq, seq * 100 FROM shop.seq_1_to_1000",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	db.Close()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if answers(t, dsn) {
		t.Fatal("the server answers after Kill")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.DSN() != dsn || s.Port() != port {
		t.Fatalf("after Start: DSN %s port %d, want %s and %d as before", s.DSN(), s.Port(), dsn, port)
	}
	log, err := s.Log()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "Starting crash recovery") {
		t.Fatalf("the server log shows no crash recovery after Kill:\n%s", log)
	}
	db = open(t, dsn)
	if n := queryRow[int](t, db, "SELECT COUNT(*) FROM shop.charges"); n != 1000 {
		t.Fatalf("after Kill and Start, %d charges, want 1000", n)
	}
	if sum := queryRow[int64](t, db, "SELECT SUM(amount) FROM shop.charges"); sum != 100*1000*1001/2 {
		t.Fatalf("after Kill and Start, charges sum to %d, want %d", sum, 100*1000*1001/2)
	}
}

func TestStopThenCloseLeavesNothing(t *testing.T) {
	s := Own(t)
	dsn := s.DSN()
	if !answers(t, dsn) {
		t.Fatal("a started server does not answer")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if answers(t, dsn) {
		t.Fatal("the server answers after Stop")
	}
	if err := s.Stop(); err == nil {
		t.Fatal("Stop of a stopped server: no error")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !answers(t, dsn) {
		t.Fatal("the server does not answer after Stop and Start")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if answers(t, dsn) {
		t.Fatal("the server answers after Close")
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close, %s: %v; want it removed", s.dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if err := s.Start(t.Context()); err == nil {
		t.Fatal("Start of a closed server: no error")
	}
}

func TestConnectNeitherStopsNorCloses(t *testing.T) {
	s, err := Connect(t.Context(), Shared(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); !errors.Is(err, errNotOwned) {
		t.Fatalf("Stop of a connected server: %v, want errNotOwned", err)
	}
	if err := s.Kill(); !errors.Is(err, errNotOwned) {
		t.Fatalf("Kill of a connected server: %v, want errNotOwned", err)
	}
	if err := s.Start(t.Context()); !errors.Is(err, errNotOwned) {
		t.Fatalf("Start of a connected server: %v, want errNotOwned", err)
	}
	if err := s.Close(); err != nil || !answers(t, s.DSN()) {
		t.Fatalf("Close of a connected server: %v; it must stay up", err)
	}
	if _, err := Connect(t.Context(), "root@tcp(127.0.0.1:1)/"); err == nil {
		t.Fatal("Connect to a port nothing listens on: no error")
	}
}

func TestStartWithoutMariaDBIsUnavailable(t *testing.T) {
	t.Setenv(envBin, t.TempDir())
	if err := Probe(); err == nil || !strings.Contains(err.Error(), "mariadbd not found") {
		t.Fatalf("Probe with no mariadbd: %v", err)
	}
	if s, err := Start(t.Context()); !errors.Is(err, ErrUnavailable) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start with no mariadbd: %v, want ErrUnavailable", err)
	}
}

func TestChoose(t *testing.T) {
	present := func() error { return nil }
	missing := func() error { return errors.New("mariadbd not found at /usr/sbin/mariadbd") }
	tests := []struct {
		name  string
		env   map[string]string
		short bool
		own   bool
		probe func() error
		want  choice
	}{
		{"binaries", nil, false, false, present, choice{verdict: startLocal}},
		{"binaries, own", nil, false, true, present, choice{verdict: startLocal}},
		{"dsn", map[string]string{envDSN: "u@tcp(h)/"}, false, false, missing,
			choice{verdict: useExternal, dsn: "u@tcp(h)/"}},
		{"dsn, own", map[string]string{envDSN: "u@tcp(h)/"}, false, true, present,
			choice{verdict: skipTest, reason: "mysqltest: this test stops or kills the server and cannot do that to the one at IDEM_MYSQL_DSN; skipping (CI=true makes it start its own)"}},
		{"dsn, own, CI", map[string]string{envDSN: "u@tcp(h)/", envCI: "true"}, false, true, present,
			choice{verdict: startLocal}},
		{"dsn, own, CI, no binaries", map[string]string{envDSN: "u@tcp(h)/", envCI: "true"}, false, true, missing,
			choice{verdict: failTest, reason: "mysqltest: mariadbd not found at /usr/sbin/mariadbd; under CI=true this test needs a server of its own even with IDEM_MYSQL_DSN set"}},
		{"no binaries", nil, false, false, missing,
			choice{verdict: skipTest, reason: "mysqltest: mariadbd not found at /usr/sbin/mariadbd and IDEM_MYSQL_DSN unset; skipping (CI=true makes this a failure)"}},
		{"no binaries, CI", map[string]string{envCI: "true"}, false, false, missing,
			choice{verdict: failTest, reason: "mysqltest: mariadbd not found at /usr/sbin/mariadbd and IDEM_MYSQL_DSN unset; failing since CI=true"}},
		{"no binaries, own, CI=false", map[string]string{envCI: "false"}, false, true, missing,
			choice{verdict: skipTest, reason: "mysqltest: mariadbd not found at /usr/sbin/mariadbd and IDEM_MYSQL_DSN unset; skipping (CI=true makes this a failure)"}},
		// -short skips whatever the environment says: the fast lane.
		{"short", nil, true, false, present, choice{verdict: skipTest, reason: "mysqltest: -short skips the tests that need MariaDB, whatever CI says"}},
		{"short, own", nil, true, true, present, choice{verdict: skipTest, reason: "mysqltest: -short skips the tests that need MariaDB, whatever CI says"}},
		{"short, dsn", map[string]string{envDSN: "u@tcp(h)/"}, true, false, present, choice{verdict: skipTest, reason: "mysqltest: -short skips the tests that need MariaDB, whatever CI says"}},
		{"short, CI", map[string]string{envCI: "true"}, true, false, present, choice{verdict: skipTest, reason: "mysqltest: -short skips the tests that need MariaDB, whatever CI says"}},
		{"short, CI, no binaries", map[string]string{envCI: "true"}, true, false, missing, choice{verdict: skipTest, reason: "mysqltest: -short skips the tests that need MariaDB, whatever CI says"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := choose(func(k string) string { return tt.env[k] }, tt.short, tt.own, tt.probe)
			if got != tt.want {
				t.Fatalf("choose:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDatabaseName(t *testing.T) {
	a, b := databaseName("TestX/sub-case_with a very long name indeed, longer than forty characters"), databaseName("TestX")
	if a == b || len(a) > 64 || !strings.HasPrefix(a, "mt_testx_sub_case_with_a_very_long_name_ind_") {
		t.Fatalf("databaseName: %q and %q", a, b)
	}
	for _, r := range a {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '_') {
			t.Fatalf("databaseName: %q has %q", a, r)
		}
	}
}
