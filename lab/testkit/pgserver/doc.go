// Package pgserver starts and stops PostgreSQL 15 servers of this
// process's own: no docker, no server to set up by hand. The commands
// link it (idem-bench starts a server when it is given none), so it must
// not import the testing package; package pgtest puts the tests' rules
// on top of it.
//
// Start initializes a cluster and starts a server on it, and Close stops
// it and removes its files. In between, Stop, Kill and Start take the
// server down cleanly, as a crash would, and up again, on the same data
// and port. Server.Standby makes a synchronous streaming standby of a
// server, for KillPostmaster and Promote to fail over to (AsyncStandby an
// asynchronous one), and
// StartBouncer puts pgbouncer in front of one. Connect wraps a server
// that runs elsewhere, which the methods that stop or start a server
// refuse to touch.
//
// The binaries are those in IDEM_PG_BIN, or in /usr/lib/postgresql/15/bin
// when it is unset. Each server lives in a temporary directory, listens
// on 127.0.0.1 only, on a free port, and has no unix socket, so servers
// of parallel processes never meet. Probe says why PostgreSQL cannot run
// here, and the error of Start then wraps ErrUnavailable.
//
// As root the binaries run as the postgres user through runuser, since
// initdb refuses to run as root; the temporary directory is then given to
// that user, under /tmp when the usual temporary directory is not open to
// it. Nothing here leaves a goroutine behind once Close returns: servers
// are processes of their own, and every connection this package opens is
// closed before the call that opened it returns. A process killed before
// it calls Close does leave its servers running.
package pgserver
