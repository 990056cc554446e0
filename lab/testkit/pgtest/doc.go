// Package pgtest runs tests against a real PostgreSQL 15 that the tests
// start themselves: no docker, no server to set up by hand.
//
// Most tests want a database of their own and nothing else:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.NewDatabase(t) // fresh and empty, dropped when t ends
//		...
//	}
//
// NewDatabase creates its database on one server per test binary (Shared),
// started by the first test that asks for it and stopped by Main once the
// tests are done. A package that already has a TestMain runs the tests
// through Run instead, which returns the exit code; with goleak, for
// example:
//
//	type withPostgres struct{ m *testing.M }
//
//	func (w withPostgres) Run() int { return pgtest.Run(w.m) }
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }
//
// Shared and NewDatabase fail the test if neither Main nor Run is running
// it, since the shared server would then outlive the test binary. Tests
// that stop, kill or restart PostgreSQL take a server of their own from
// Own, closed when the test ends; the shared one must stay up for the
// others.
//
// For the deployments PostgreSQL runs in, NewBouncer puts pgbouncer in
// front of a server, and OwnStandby makes a streaming standby of an owned
// server, synchronous, for KillPostmaster and Promote to fail over to
// (OwnAsyncStandby an asynchronous one).
//
// The servers are those of package pgserver, which starts them without
// importing testing; this package adds the rules below and ties each
// server to a test.
//
// # Where the server comes from
//
// One function (choose) applies these rules, in this order:
//
//   - go test -short: the test skips, whatever CI and IDEM_PG_DSN say.
//     The short run is a contributor's quick loop; CI runs the full one.
//   - IDEM_PG_DSN set: Shared and NewDatabase use the server it names
//     (a postgres:// URL or key=value string, for a role that may create
//     and drop databases) and start nothing. Own skips, since it cannot
//     kill or restart a server it does not own, except when CI=true, where
//     it starts a private server as if IDEM_PG_DSN were unset.
//   - Otherwise pgserver starts the server, from the binaries in
//     IDEM_PG_BIN, or in /usr/lib/postgresql/15/bin when it is unset.
//   - PostgreSQL unavailable (pgserver.Probe says why): the test skips
//     with a one-line reason, or fails with it when CI=true, so that CI
//     cannot pass by skipping. NewBouncer does the same without pgbouncer.
//
// A test binary killed before Main returns (a -timeout panic, say) leaves
// its servers running.
package pgtest
