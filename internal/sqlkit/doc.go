// Package sqlkit is the SQL substrate that idemserver, its database
// packages, testserver and pgjournal share: a database's flavour of SQL
// (placeholders, column types, locking clauses, isolation), the
// classification of its errors (unreachable, to run again, a unique
// violation), reruns after a serialization failure or deadlock, and a
// small seam over the driver so that the protocol above it links none.
//
// It imports no database driver: each flavour's package (idemserver/sqlite,
// idemserver/postgres) supplies what needs its driver and registers itself.
package sqlkit
