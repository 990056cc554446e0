// Package mysqltest runs tests against a real MariaDB that the tests start
// themselves, as package pgtest does for PostgreSQL: no docker, no server
// to set up by hand.
//
// Most tests want a database of their own and nothing else:
//
//	func TestMain(m *testing.M) { mysqltest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := mysqltest.NewDatabase(t) // fresh and empty, dropped when t ends
//		...
//	}
//
// NewDatabase creates its database on one server per test binary (Shared),
// started by the first test that asks for it and stopped by Main once the
// tests are done. A package that already has a TestMain runs the tests
// through Run, which takes a *testing.M or another runner wrapping one
// (pgtest's, for a package that needs both servers) and returns the exit
// code. Shared and NewDatabase fail the test if neither Main nor Run is
// running it, since the shared server would then outlive the test binary.
// Tests that stop or kill the server take one of their own from Own,
// closed when the test ends.
//
// # Where the server comes from
//
// One function (choose) applies these rules, in this order:
//
//   - go test -short: the test skips, whatever CI and IDEM_MYSQL_DSN say.
//     The short run is a contributor's quick loop; CI runs the full one.
//   - IDEM_MYSQL_DSN set: Shared and NewDatabase use the server it names
//     (a go-sql-driver/mysql DSN, for a user that may create and drop
//     databases; a MySQL 8 server, say) and start nothing. Own skips,
//     except when CI=true, where it starts a private server as if
//     IDEM_MYSQL_DSN were unset.
//   - Otherwise Start starts mariadbd from IDEM_MARIADB_BIN, or /usr/sbin
//     when it is unset (Debian's mariadb-server).
//   - MariaDB unavailable (Probe says why): the test skips with a one-line
//     reason, or fails with it when CI=true, so that CI cannot pass by
//     skipping.
//
// # The servers
//
// Start runs mariadbd on a new data directory in a temporary directory,
// which it creates on first start (no mariadb-install-db: the server runs
// without grant tables, every client a superuser, which keeps the start
// to a second or two). It listens on 127.0.0.1 only, on a free port, with
// its socket in its temporary directory, so servers of parallel processes
// never meet. As root it runs as the mysql user (mariadbd's --user), the
// temporary directory given to that user. Stop, Kill and Start take the
// server down cleanly, as a crash would, and up again, on the same data
// and port; Close stops it and removes its files. Nothing here leaves a
// goroutine behind once Close returns. A process killed before it calls
// Close does leave its servers running.
package mysqltest
