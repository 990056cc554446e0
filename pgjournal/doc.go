// Package pgjournal keeps idem's journal in PostgreSQL, so that every
// machine of a fleet shares operations, keys and outcomes: a Kubernetes Job
// rescheduled to another node, an autoscaled worker pool, or a queue
// consumer whose message is redelivered elsewhere resumes an operation
// under the key the first machine minted, and answers a completed one from
// its recorded outcome without sending it again.
//
//	j, err := pgjournal.Open(ctx, "postgres://idem@db/jobs", pgjournal.Options{})
//	...
//	c, err := idem.New(idem.Config{Journal: j})
//
// It keeps the rules of a shared journal:
//
//   - an operation's intent row is committed before its first byte is
//     sent, and a failed commit sends nothing (Claim.Begin).
//   - any machine opening the same database and namespace resumes a
//     pending operation under its original key and answers a completed one
//     from the recorded outcome.
//   - one sender at a time. A machine sends an operation only while it
//     holds its lease; another machine's Do of it waits, within
//     its context, and returns a *journal.HeldError naming the holder if the
//     context ends first. A dead holder's lease lapses after
//     Options.LeaseTTL, or sooner when its Journal's liveness lapses (below), and the operation resumes
//     elsewhere.
//   - expiry is judged by the database's clock (Journal.Now).
//   - every write carries the lease's fencing token: a machine whose
//     lease was taken over cannot overwrite the next holder's outcome.
//   - when the database cannot be reached, Do fails before sending with
//     an error matching journal.ErrUnavailable, and works again once the
//     database answers.
//   - a batch (idem.Client.RunBatch) run on many machines shares the
//     work: it claims with TryClaim, which does not wait, sets aside what
//     another machine holds and waits for it only at the end.
//   - a lease this Journal left in the database when its release
//     failed is taken back at its next claim of the ID, not after
//     LeaseTTL.
//   - behind pgbouncer (transaction or session pooling), across a
//     failover over a multi-host DSN, and on a server that refuses new
//     connections, a Journal works, or fails with a typed error (see
//     Open); what PostgreSQL cannot store is refused at Open (a namespace)
//     or at Claim (an ID), before it is sent.
//   - concurrent Begins share one statement and one commit, and so
//     do Completes and releases; a lone caller sends its own at
//     once. ClaimBegin claims a new operation and records its intent in
//     that one statement. Stats counts the commits.
//   - a Journal's liveness is kept apart from its leases:
//     one statement renews it every third of Options.Liveness for all its
//     claims, and when it lapses (the process was killed, paused or cut
//     off) every lease it held is free at once, however long; the Journal
//     stops sending before that, by its own clock. Close ends it, so a
//     clean stop hands every lease back at once.
//   - no commit a failover can lose. Open refuses a primary that
//     streams to standbys none of which is synchronous (a
//     *ReplicationError), unless Options.AllowAsyncReplication accepts
//     the risk, and every statement that writes waits for the
//     synchronous standbys whatever the session's synchronous_commit.
//
// A batch (idem.Client.RunBatch) rides through an outage of the
// database, a failover or a restart, instead of failing its operations.
//
// The tables are created or upgraded on Open, or by Migrate
// (`idem journal migrate URL`). The SQL keeps to what CockroachDB and
// YugabyteDB also accept (no advisory locks, no LISTEN, no extensions; the
// tests here run on PostgreSQL 15 only), which is the way on when one
// PostgreSQL is no longer enough: point the DSN at the distributed
// database, or split the fleet's work into namespaces on separate
// PostgreSQL servers.
//
// Durability is PostgreSQL's: a commit is durable when it returns, and
// every commit of the Journal has synchronous_commit on whatever the
// session's default. With streaming replicas, make the commit synchronous
// to the standby you would fail over to (synchronous_standby_names), or a
// failover can lose intents that were already sent: Open checks it.
package pgjournal
