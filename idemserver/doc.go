// Package idemserver is the server half of idempotency keys: net/http
// middleware on the service's own SQL database that does each keyed
// request's work once and answers every retry of it the way it answered
// the first. It works under
// any router that takes an http.Handler (Keys.Handle) or a
// func(http.Handler) http.Handler (Keys.Middleware, as chi's r.With).
//
// # Rules
//
// Each rule is stated here once.
//
// Keys. A request carries its key in Config.KeyHeader (default
// Idempotency-Key), bare or as an RFC 8941 sf-string, or in the JSON body
// member Config.KeyField. A route requires a key unless Route.Optional; a
// missing or malformed key gets 400 and nothing is looked up. A body
// Config.Accepts refuses gets 415, one over Config.MaxBodyBytes 413, and
// one that stalls past the server's read timeout 408 with the connection
// closed. Route.Check may then refuse the request in the API's own words
// (bad JSON, a negative amount): nothing is looked up, and the key stays
// free for a good request.
//
// Principals. A key belongs to the principal Config.Principal names
// for the request: the same key from two principals is two requests, and
// no principal can read another's answer. The principal comes from the
// account the service authenticated, never from the raw credential: a
// client that refreshes its token keeps its keys. By default every
// request has one principal, so a key is one request whoever sends it
// (Config.Principal says what that allows).
//
// Fingerprints. The key row stores Config.Fingerprint of the request
// (default: method, path and query, body). A retry whose fingerprint
// differs gets 422 and does not run.
//
// Atomic routes (the default). The handler runs inside the
// transaction its key row lives in, begun before the key is looked up, and
// writes through Tx. Its answer is buffered: one < 500 is stored with the
// key and committed with everything the handler wrote, and only then sent;
// one >= 500 rolls back and is sent unstored. A commit that fails stores
// nothing and answers 500, or 503 with Retry-After when the database is
// unreachable, busy or contended. A retry after the commit gets the stored
// answer with Idempotent-Replayed: true. The key is claimed before the
// handler runs: its row is inserted, unfinished, in the transaction, which
// is the lock. A concurrent duplicate waits for the first in the database
// and is replayed; it never runs the handler (if the first rolls back, it
// claims the key and runs).
//
// Isolation and reruns. On PostgreSQL and MySQL the transaction runs
// at READ COMMITTED, the key row read FOR UPDATE; SQLite's (BEGIN
// IMMEDIATE) is serializable. Requests under distinct keys therefore
// neither wait for each other nor run each other's handlers again. A
// handler's reads are not repeatable: one that reads a row and writes
// what it read locks it first (SELECT ... FOR UPDATE) or writes relative
// to it (SET n = n + 1), or asks for SERIALIZABLE (Route.Serializable). A
// transaction that fails with a serialization failure or a deadlock (on
// MySQL also a lock wait timeout) runs again, handler included, at most
// Config.Reruns times, then 503: a handler must do nothing outside Tx.
// Such a failure met by one of the handler's own statements reruns it
// whatever it answers (a 500, say), where Keys sees the handler's
// statements: through postgres.Tx, and on a *sql.DB of postgres.Open or
// mysql.Open; on another *sql.DB the handler reports it with Fail, which
// gives the rerun (or the 503 or 500) instead of the handler's answer.
//
// Answers. A handler answers on the writer it is given, at least a
// status. The client is never told success for work that did not commit:
// a handler that writes nothing has not answered (its work rolls back,
// nothing is stored, the request gets 500 and the cause is logged); one
// that panics has its work rolled back, gets 500 written for it, and its
// panic, logged with the handler's own stack, is raised again, so that a
// recovery middleware leaves no success; one that answers around
// idemserver is aborted (see Frameworks).
//
// Phased routes (Route.Phased). A handler that calls out (a payment
// gateway, mail) cannot hold a transaction across the call. Its key is
// claimed first, in a transaction of its own, with a lock token and a
// lease of Config.LockTimeout. Each call is a Step: a recovery point
// recorded in its own transaction, with a downstream key (DownstreamKey)
// stable across every attempt of the request. Tx is the final
// transaction, in which the answer is stored and the claim ended together
// with the handler's writes. A retry while the claim is live gets 409 with
// Retry-After; a retry after a crash takes the row over and resumes: Steps
// already recorded return their results without calling out again, and
// Resumed tells the handler that it resumes. An answer >= 500 releases
// the claim at once, keeping the recovery points; a final transaction
// that fails to serialize runs the handler again, its Steps answering
// from their recovery points.
//
// Leases. A claim lapses only by a takeover, and the takeover is the
// statement that fences the holder: every write of the holder (a Step's
// record, the final commit) is fenced by its lock token, which the
// takeover replaces. The lease (Config.LockTimeout by Config.Now, renewed
// by each Step) only decides when a takeover is allowed: a holder whose
// lease ended but whom nobody took over may still finish, and its answer
// is stored. The holder's context ends (cause ErrLockLost) at its lease's
// end in real time, the last renewal plus Config.LockTimeout by time.Now,
// so that a holder never works on past its lease. The replicas' clocks
// must agree to well within Config.LockTimeout, or a claim may be taken
// over while its holder still works (the holder then commits nothing).
//
// Retention. A key is kept for its route's Route.Retention, else
// Config.Retention (default 24 h), counted from its first request (as a
// client counts its key's lifetime from the key's first use); once it is
// finished and that time has passed, Sweep (or Run, every
// Config.SweepInterval) deletes it, calling Config.Forget in the same
// transaction so that business rows carrying the key can let it go. An
// unfinished key is never deleted; past retention and unclaimed it is
// counted in Stats.Abandoned and Keys.Count for a person to reconcile.
//
// Frameworks. A handler answers on the writer it is given. One that
// answers around it, on the framework's own writer (gin's c.JSON writes to
// c.Writer), tells the client something idemserver cannot store: when that
// writer says it was written (gin's, by Written), the handler's work rolls
// back, nothing is stored, the error is logged naming the cause, and the
// answer is aborted: the connection's writes fail from then on and the
// handler is aborted (http.ErrAbortHandler), so that the client sees a
// failed connection rather than the answer, unless the framework has sent
// it already. The safe wirings: Keys.Handle and Keys.Middleware under
// net/http and any router that takes an http.Handler (chi); idemgin.Handle
// for gin and idemecho.Handle for echo, which give a framework's handler
// idemserver's writer. A generic adapter of net/http middleware to gin
// fails every request so; echo.WrapMiddleware serves a handler that writes
// its answer and returns nil, and fails one that returns an error (500).
//
// Work. A client that disconnects does not cancel its request's work: the
// work context is detached from the request, bounded by
// Config.WorkTimeout (atomic) or the lease (phased). Close waits for it.
// An atomic request still working at Config.WorkTimeout rolls back and
// gets 503 with Retry-After, whatever its handler answers then, and an
// error is logged naming the cause: the pool exhausted, when every
// connection was in use and some acquire waited for one while the handler
// ran (a handler that uses the pool instead of its transaction waits for a
// connection the requests' own transactions hold). A handler that uses the
// database instead of its transaction is told where the database allows
// (ErrOutsideTx says where).
//
// # Databases
//
// This package links no database driver: a service imports the package
// of its database, which links that driver alone. Package
// idemserver/sqlite is SQLite through modernc.org/sqlite: open the
// database with its Open (WAL, synchronous=FULL, BEGIN IMMEDIATE,
// transactions queued in Go); the write lock is then the lock on every key. Package
// idemserver/postgres is PostgreSQL (and CockroachDB) through pgx: a
// *sql.DB of pgx's stdlib driver (best opened with postgres.Open) as
// Config.DB, handlers using Tx; or a pgxpool.Pool as Config.Store
// (postgres.Pool), handlers using postgres.Tx. Any number of replicas may share one PostgreSQL database;
// New creates the tables under an advisory lock. Package idemserver/mysql
// is MySQL 8 and MariaDB 10.11 or later through go-sql-driver/mysql: a
// *sql.DB of its driver "mysql" (best opened with mysql.Open), whose DSN
// needs no parameter of its own but whose sql_mode must be strict (New
// checks it). Any number of replicas may share one MySQL database too. New finds a Config.DB's
// database among the imported packages' by its driver or, behind a
// wrapping driver, by asking it; one of no imported package's kind is
// ErrUnsupportedDatabase. A handler uses its transaction, never the
// database itself, while it runs.
//
// # Tables
//
// A service, its reports and its tests may read the two tables; only Keys
// writes them. Later versions may add columns; these keep their meaning.
// Times are Unix nanoseconds by Config.Now.
//
// Config.Table holds a row per key from its claim (or, on an atomic
// route, its commit) until Sweep deletes it: id (the row's number);
// principal and idem_key (the key, unique together); fingerprint
// (Config.Fingerprint of the request); seed (of its downstream keys:
// DownstreamKey(ctx, step) is "idem-" + seed + "-" + step); created_at;
// expires_at (created_at plus the route's retention: from then Sweep may
// delete the row once it is finished); finished
// (1 once the answer is stored, else 0); lock_token and lease_until (a
// phased claim's token and the end of its lease, both NULL when no claim
// holds the row); response_status, response_header (the stored headers
// as a JSON object of string arrays) and response_body (the stored
// answer, once finished).
//
// Config.Table+"_steps" holds a phased request's recovery points until
// its finish: key_id (the id of its key row), name (the Step's name) and
// result (what the Step's function returned).
//
// New creates the tables where they are missing. A table of either name
// that lacks these columns (another program's, or a key table of an
// older layout) is left alone and New fails with ErrForeignTable.
package idemserver
