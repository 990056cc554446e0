package pgtest

import (
	"context"
	"testing"
	"time"
)

// TestStandbyHasEveryCommitAndTakesOver: what the primary committed is on
// its synchronous standby as soon as the commit returns, with no wait; a
// SIGKILLed postmaster takes its connections down with it; the promoted
// standby has every row and takes writes.
func TestStandbyHasEveryCommitAndTakesOver(t *testing.T) {
	primary := Own(t)
	standby := OwnStandby(t, primary)
	if standby.Port() == primary.Port() {
		t.Fatalf("the standby listens on the primary's port %d", primary.Port())
	}
	conn := connect(t, primary.DSN())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE charges (id int PRIMARY KEY);
		INSERT INTO charges SELECT generate_series(1, 100)`); err != nil {
		t.Fatal(err)
	}
	mode := queryRow[string](t, conn, `SELECT sync_state FROM pg_stat_replication`)
	if mode != "sync" {
		t.Fatalf("the standby replicates %s, want sync", mode)
	}
	// remote_apply: the commit returns once the standby shows it.
	if _, err := conn.Exec(t.Context(), `SET synchronous_commit = remote_apply; INSERT INTO charges VALUES (101)`); err != nil {
		t.Fatal(err)
	}
	ro := connect(t, standby.DSN())
	if n := queryRow[int](t, ro, `SELECT count(*) FROM charges`); n != 101 {
		t.Fatalf("the standby has %d charges, want 101", n)
	}
	if _, err := ro.Exec(t.Context(), `INSERT INTO charges VALUES (102)`); err == nil {
		t.Fatal("a standby took a write")
	}

	if err := primary.KillPostmaster(t.Context()); err != nil {
		t.Fatal(err)
	}
	if answers(t, primary.DSN()) {
		t.Fatal("the primary answers new connections after KillPostmaster")
	}
	if err := standby.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	rw := connect(t, standby.DSN())
	if _, err := rw.Exec(t.Context(), `INSERT INTO charges VALUES (102)`); err != nil {
		t.Fatalf("the promoted standby: %v", err)
	}
	if n := queryRow[int](t, rw, `SELECT count(*) FROM charges`); n != 102 {
		t.Fatalf("the promoted standby has %d charges, want 102", n)
	}
}

// TestBouncerPoolsEachTransaction: in transaction mode, two transactions
// of one client connection may run on different server connections,
// and the DSN NewBouncer returns reaches the database it was given.
func TestBouncerPoolsEachTransaction(t *testing.T) {
	dsn := NewDatabase(t)
	conn := connect(t, dsn)
	want := queryRow[string](t, conn, `SELECT current_database()`)
	conn.Close(t.Context())

	// Exec mode: prepared statements do not survive a transaction here.
	via := NewBouncer(t, dsn, "transaction", "default_pool_size = 2").DSN() + "&default_query_exec_mode=exec"
	a := connect(t, via)
	if got := queryRow[string](t, a, `SELECT current_database()`); got != want {
		t.Fatalf("through pgbouncer: database %q, want %q", got, want)
	}
	b := connect(t, via)
	// a holds one server connection in an open transaction: b's must be
	// the other.
	tx, err := a.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pidA := queryRow[int](t, tx.Conn(), `SELECT pg_backend_pid()`)
	pidB := queryRow[int](t, b, `SELECT pg_backend_pid()`)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if pidA == pidB {
		t.Fatalf("two open transactions on one server connection %d", pidA)
	}
	seen := map[int]bool{}
	for range 20 {
		seen[queryRow[int](t, a, `SELECT pg_backend_pid()`)] = true
		seen[queryRow[int](t, b, `SELECT pg_backend_pid()`)] = true
	}
	if len(seen) > 2 {
		t.Fatalf("server connections %v, more than default_pool_size 2", seen)
	}
}

// TestAsyncStandbyLeavesCommitsUnwaited: an asynchronous standby streams
// (the primary reports it async), and with it stopped a commit on the
// primary still returns.
func TestAsyncStandbyLeavesCommitsUnwaited(t *testing.T) {
	primary := Own(t)
	standby := OwnAsyncStandby(t, primary)
	conn := connect(t, primary.DSN())
	if mode := queryRow[string](t, conn, `SELECT sync_state FROM pg_stat_replication`); mode != "async" {
		t.Fatalf("the standby replicates %s, want async", mode)
	}
	if names := queryRow[string](t, conn, `SHOW synchronous_standby_names`); names != "" {
		t.Fatalf("synchronous_standby_names is %q, want it empty", names)
	}
	if err := standby.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `CREATE TABLE charges (id int); INSERT INTO charges VALUES (1)`); err != nil {
		t.Fatalf("a commit with the async standby down: %v", err)
	}
}
