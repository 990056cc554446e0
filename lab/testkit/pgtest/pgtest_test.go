package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

// withPostgres runs the tests through Run, for goleak, which then checks
// that nothing is left once the shared server is closed.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return Run(w.m) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }

// connect returns a connection to dsn, closed when t ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// answers reports whether the server at dsn accepts a connection.
func answers(t *testing.T, dsn string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false
	}
	conn.Close(context.Background())
	return true
}

// queryRow returns the one value of the one row of sql.
func queryRow[T any](t *testing.T, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(t.Context(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func TestNewDatabaseGivesDistinctEmptyDatabases(t *testing.T) {
	a, b := connect(t, NewDatabase(t)), connect(t, NewDatabase(t))
	nameA := queryRow[string](t, a, "SELECT current_database()")
	nameB := queryRow[string](t, b, "SELECT current_database()")
	if nameA == nameB || nameA == "postgres" || nameB == "postgres" {
		t.Fatalf("databases %q and %q: want two new, distinct ones", nameA, nameB)
	}
	for _, conn := range []*pgx.Conn{a, b} {
		if n := queryRow[int](t, conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"); n != 0 {
			t.Fatalf("a new database has %d relations in public, want 0", n)
		}
	}

	if _, err := a.Exec(t.Context(), "CREATE TABLE charges (id int PRIMARY KEY); INSERT INTO charges VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	if n := queryRow[int](t, a, "SELECT count(*) FROM charges"); n != 2 {
		t.Fatalf("charges has %d rows in %s, want 2", n, nameA)
	}
	if absent := queryRow[bool](t, b, "SELECT to_regclass('public.charges') IS NULL"); !absent {
		t.Fatalf("table charges, created in %s, exists in %s too", nameA, nameB)
	}
}

func TestNewDatabaseIsDroppedAtCleanup(t *testing.T) {
	admin := connect(t, Shared(t).DSN())
	const exists = "SELECT count(*) FROM pg_database WHERE datname = $1"
	var name string
	var left *pgx.Conn // left open by the subtest: the drop must end it
	t.Run("user", func(t *testing.T) {
		conn, err := pgx.Connect(t.Context(), NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		left = conn
		name = queryRow[string](t, conn, "SELECT current_database()")
		if n := queryRow[int](t, admin, exists, name); n != 1 {
			t.Fatalf("database %s: %d rows in pg_database, want 1", name, n)
		}
	})
	if left == nil {
		t.FailNow()
	}
	defer left.Close(context.Background())
	if n := queryRow[int](t, admin, exists, name); n != 0 {
		t.Fatalf("database %s still exists after its test ended", name)
	}
	if err := left.Ping(t.Context()); err == nil {
		t.Fatalf("a connection to the dropped database %s still works", name)
	}
}

func TestKillLosesNothingCommitted(t *testing.T) {
	s := Own(t)
	dsn, port := s.DSN(), s.Port()
	conn := connect(t, dsn)
	if _, err := conn.Exec(t.Context(), `CREATE TABLE charges (id int PRIMARY KEY, amount int NOT NULL);
		INSERT INTO charges SELECT i, i * 100 FROM generate_series(1, 1000) AS i`); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())

	if err := s.Kill(t.Context()); err != nil {
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
	if !strings.Contains(log, "automatic recovery in progress") {
		t.Fatalf("the server log shows no crash recovery after Kill:\n%s", log)
	}

	conn = connect(t, dsn)
	if n := queryRow[int](t, conn, "SELECT count(*) FROM charges"); n != 1000 {
		t.Fatalf("after Kill and Start, %d charges, want 1000", n)
	}
	if sum := queryRow[int64](t, conn, "SELECT sum(amount) FROM charges"); sum != 100*1000*1001/2 {
		t.Fatalf("after Kill and Start, charges sum to %d, want %d", sum, 100*1000*1001/2)
	}
}

func TestChoose(t *testing.T) {
	present := func() error { return nil }
	missing := func() error { return errors.New("PostgreSQL 15 not found at /usr/lib/postgresql/15/bin") }
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
		{"dsn", map[string]string{envDSN: "postgres://x/y"}, false, false, missing,
			choice{verdict: useExternal, dsn: "postgres://x/y"}},
		{"dsn, own", map[string]string{envDSN: "postgres://x/y"}, false, true, present,
			choice{verdict: skipTest, reason: "pgtest: this test kills or restarts PostgreSQL and cannot do that to the server at IDEM_PG_DSN; skipping (CI=true makes it start its own)"}},
		{"dsn, own, CI", map[string]string{envDSN: "postgres://x/y", envCI: "true"}, false, true, present,
			choice{verdict: startLocal}},
		{"dsn, own, CI, no binaries", map[string]string{envDSN: "postgres://x/y", envCI: "true"}, false, true, missing,
			choice{verdict: failTest, reason: "pgtest: PostgreSQL 15 not found at /usr/lib/postgresql/15/bin; under CI=true this test needs a server of its own even with IDEM_PG_DSN set"}},
		{"no binaries", nil, false, false, missing,
			choice{verdict: skipTest, reason: "pgtest: PostgreSQL 15 not found at /usr/lib/postgresql/15/bin and IDEM_PG_DSN unset; skipping (CI=true makes this a failure)"}},
		{"no binaries, CI", map[string]string{envCI: "true"}, false, false, missing,
			choice{verdict: failTest, reason: "pgtest: PostgreSQL 15 not found at /usr/lib/postgresql/15/bin and IDEM_PG_DSN unset; failing since CI=true"}},
		{"no binaries, own, CI=false", map[string]string{envCI: "false"}, false, true, missing,
			choice{verdict: skipTest, reason: "pgtest: PostgreSQL 15 not found at /usr/lib/postgresql/15/bin and IDEM_PG_DSN unset; skipping (CI=true makes this a failure)"}},
		// -short skips whatever the environment says: the fast lane.
		{"short", nil, true, false, present, choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}},
		{"short, own", nil, true, true, present, choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}},
		{"short, dsn", map[string]string{envDSN: "postgres://x/y"}, true, false, present, choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}},
		{"short, CI", map[string]string{envCI: "true"}, true, false, present, choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}},
		{"short, CI, no binaries", map[string]string{envCI: "true"}, true, false, missing, choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}},
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
	a, b := databaseName("TestX/sub-case_with a very long name indeed, longer than thirty"), databaseName("TestX")
	if a == b || len(a) > 63 || !strings.HasPrefix(a, "pgtest_testx_sub_case_with_a_very_lon_") {
		t.Fatalf("databaseName: %q and %q", a, b)
	}
	for _, r := range a {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '_') {
			t.Fatalf("databaseName: %q has %q", a, r)
		}
	}
}
