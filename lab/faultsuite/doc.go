// Package faultsuite tries hard to break idem's exactly-once promise, end to
// end, with real processes: the idem client and its journal, the reference
// server (package testserver, run as its own binary on a SQLite file, or
// as replicas sharing one PostgreSQL database) and the fault proxy (package testserver/chaos), under network faults,
// SIGKILLs of the client and of the server, disk faults and key expiry.
//
// The package holds what the scenarios share: a Checker in the spirit of
// Jepsen's counter and total-queue checkers, the workload, the server as a
// child process (ServerProcess) or several on one database (Replicas),
// and journal files that fail on command
// (DiskFaults). The scenarios are its tests:
//
//	TestChaos                         network faults of every kind through the proxy, 30% of attempts
//	TestChaosConcurrentDoOfOneOperation  the same, each operation run by four goroutines at once
//	TestChaosStandardClient           the same, through StandardClient, quoted keys, a bearer scope
//	TestChaosCallerGivesUp            callers whose deadlines end their Do calls at every stage
//	TestClientAgainstReferenceServer  the server's own faults at 20%, in process
//	TestClientCrash                   SIGKILL of a batch client, resumed from its journal
//	TestClientPowerCut                the same, each kill a power cut that tears the journal's unsynced tail
//	TestServerCrash                   SIGKILL of the server, at its crash points and at random
//	TestClientAndServerCrash          both, alternately, in one run
//	TestReplicasBehindABalancer       three replicas on PostgreSQL behind the proxy, round robin, 20% faults
//	TestReplicaKills                  SIGKILL of random replicas under load, each started again
//	TestExpiryEndToEnd                a key that outlived the server's retention
//	TestDialectChaos                  each built-in dialect against the server speaking it, 30% faults
//	                                  and its in-flight answer while the server works
//	TestDialectClientCrash            each dialect's batch client SIGKILLed and resumed
//	TestDialectRetention              each dialect's retention: a key resent within it, refused past it
//	TestDisk*                         failing writes and fsyncs under the journal
//	TestHostile*                      hostile peers: redirects, bare 409s, a journal reached
//	                                  by a second name, megabyte headers, stalling clients
//	TestModel, FuzzModel (lab/model)  random Do, crash, reopen, compact and clock sequences
//
// The batch client of the crash scenarios is the test binary itself,
// re-executed with IDEM_FAULTSUITE_BATCH_CHILD set; the server's binary is
// built by the first test that needs it, with -race when the tests have it.
//
// # What the checker asserts
//
// For every operation of a run, the effects the server holds (business rows
// whose reference is the operation ID, read from its database) must be 0 or
// 1; every operation the client reported done must have exactly 1; after
// the last resume every operation must be done and have exactly 1; every
// attempt of an operation, in every process, must carry the same key; and
// the payment gateway must have captured once per charge, and the stock
// the inventory lost must be what the reservations hold. Each run logs one
// line (see Report.String).
//
// # Sizes and seeds
//
// Every scenario logs its seed first; IDEM_SEED replays it: the proxy's and
// the server's fault draws and the kill points. (The interleaving of
// concurrent workers is the scheduler's, so a replay is close, not exact.)
// The default sizes are what CI runs; see the Env constants for every
// variable. Under go test -short the scenarios skip, and only the suite's
// own parts (the checker, the wire, the events, the disk faults, the power
// cut) run. The large run:
//
//	IDEM_CHAOS_OPS=100000 IDEM_CRASH_OPS=5000 IDEM_CLIENT_KILLS=25 IDEM_SERVER_KILLS=10 \
//	    go test -v -timeout 2h ./lab/faultsuite/
//
// regressions_test.go keeps the reproductions of the bugs the suite found
// in the client and its journal, fixed since.
package faultsuite
