// Package idemserver is the server half of idempotency keys: net/http
// middleware on database/sql, for PostgreSQL (the pgx stdlib driver) and
// SQLite (modernc.org/sqlite), that answers every retry of a request the
// way it answered the first, and does the request's work once.
package idemserver
