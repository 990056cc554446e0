// Package testserver is the reference server for idempotency keys: a small
// HTTP API (stock reservations and card charges) backed by SQLite, or by
// PostgreSQL shared by any number of replicas (see Replicas below), that
// implements the server half of the Idempotency-Key protocol the way a real
// server should. It is what the idem client is tested against, what the demo
// runs, and what a user can start inside their own integration tests with
// Start. It is meant to be read: each rule below is implemented in one place,
// named after the rule.
//
// # Endpoints
//
// Requests and responses are JSON; every error is an RFC 9457
// application/problem+json document whose type is one of the Problem
// constants. A request body is one JSON object whose member names are
// exactly those listed (case-sensitive), each at most once.
//
//	POST /reservations         {"item_id", "quantity", "reference"?}
//	                           201 reserved; 409 insufficient stock; 404 unknown item
//	POST /charges              {"customer", "amount", "currency", "reference"?}
//	                           201 charged; 502 gateway failed (retry)
//	PUT  /inventory/{item_id}  {"available"}: 200 stock set
//	GET  /reservations/{id}    200, 404
//	GET  /charges/{id}         200, 404
//	GET  /charges?customer=&reference=   200 {"charges": [...]}
//	GET  /inventory/{item_id}  200, 404
//	GET  /stats                200 Stats
//
// The three mutating endpoints also answer 400 (missing or malformed key,
// bad JSON, bad field), 401 (an Authorization other than Bearer), 413 (body
// over Config.MaxBodyBytes), 415 (not JSON), 422 (key reused for another
// request) and 409 with Retry-After (key in flight). Reservations and
// charges belong to the client that created them: another client's GET
// finds nothing. Stock is shared. Unknown paths get 404, known paths with
// the wrong method 405 with Allow.
//
// # The key and its scope
//
// Every mutating request (POST and PUT) must carry an Idempotency-Key header
// (missing or malformed: 400). The value is either a bare token such as a
// UUID or a structured-field string ("..." as in RFC 8941); both spell the
// same key, which may be at most 255 characters long. Keys are scoped per
// client account: the X-Client-ID header, otherwise the shared anonymous
// client. A credential never scopes a key: a client that refreshes or
// rotates its bearer token keeps its keys, and its retry is a replay, not
// a second execution. Two clients using the same key never meet.
//
// # Dialects
//
// What this documentation says of the key's header and of the answers is
// the server's own convention, the zero Dialect. Config.Dialect (the
// -dialect flag) makes it speak another API's instead, so that a client
// can be tested against the way that API answers: Dialects holds one for
// each of the idem client's built-in dialects. A dialect may put the key
// in another header, or in a top-level member of the JSON body, which the
// server then takes out of the body before fingerprinting it and before
// the endpoint reads it; bound the key's length; keep keys for its own
// retention; and answer a request in flight, a replay, a reused key and an
// already-applied request in the API's words.
//
// # Built on idemserver
//
// The idempotency layer is package idemserver, the middleware any Go
// service can put in front of its handlers: the key and
// its scope, the fingerprint, the stored answers, the verdicts of a retry,
// the transaction of an atomic endpoint, the claim, recovery points and
// fencing of a phased one, and the sweeper are its. The server's endpoints
// are handlers behind it; what is the server's own is its API (the
// business tables, the checks of a body, the Dialects' answers, given to
// the layer as idemserver.Answers), the fake gateway, and the faults.
//
// # The stored answer
//
// For every key the layer keeps one row in idempotency_keys (and the
// recovery points of a charge in idempotency_keys_steps): the request
// fingerprint (SHA-256 over method, path with its query, and body bytes),
// an in-flight claim, and, once the request has finished, the response
// status, headers and body. A later request with the same key is answered
// from that row:
//
//   - same fingerprint, finished: the stored response, byte for byte, with
//     Idempotent-Replayed: true;
//   - different fingerprint: 422, nothing executed;
//   - same fingerprint, still locked by a live request: 409 with Retry-After;
//   - same fingerprint, lock free or stale (older than Config.LockTimeout):
//     the request takes the lock over and resumes from the recovery point.
//
// Final answers are stored whatever their status: "insufficient stock" (409)
// and "unknown item" (404) are business answers as final as "reserved", and
// are replayed the same way. Answers that decide nothing about the request
// are not stored: bad input (400, 401, 413, 415) is refused before the key
// is looked at; 409 in flight and 422 describe another request's row; and a
// gateway failure (502) or an injected or internal failure (500, 503) rolls
// its transaction back, so a retry under the same key runs the request
// again, a charge from its last recovery point.
//
// # One transaction when the work is local
//
// POST /reservations and PUT /inventory/{item_id} touch nothing but the
// database, so the whole request is one transaction, begun with BEGIN
// IMMEDIATE on SQLite and at SERIALIZABLE on PostgreSQL: look the key up,
// apply the business change, insert the key row with its response, commit. Either all of it is durable or none of it is;
// a crash at any instant leaves no half-done reservation and no key without
// its answer. The business table carries the key too, under a UNIQUE
// constraint, as a second line of defence. Because writers are serialised, a
// concurrent duplicate waits for the first transaction and then replays it;
// on PostgreSQL the duplicate's transaction fails to serialize instead, and
// the server runs it again, and it replays.
//
// # Atomic phases when the work calls out
//
// POST /charges calls a payment gateway, which no database transaction can
// cover. It therefore runs in atomic phases, each its own transaction, with a
// recovery point recorded at the end of each (after Brandur Leach,
// "Implementing Stripe-like Idempotency Keys in Postgres"):
//
//	started         the key row is inserted and locked
//	gateway_called  the gateway captured the money; its charge ID is recorded
//	finished        the charge row and the response are stored, lock released
//
// The gateway is called with a downstream key (the key passed
// downstream), minted at random when phase 1 inserts the key row, stored in
// the row and reused by every resume of it; the gateway is itself
// idempotent by that key, so calling it twice captures once. It is random
// rather than the client's key so that two clients' equal keys, or a key
// used again as a new request after the sweeper forgot it, never name one
// capture at the gateway. Each recovery point renews the lock. A request that dies between
// phases leaves its lock behind; a retry that finds the lock older than
// Config.LockTimeout takes it over and resumes from the last recovery point
// instead of starting over. A lock token fences the old holder: if it wakes
// up later, its next phase finds the token changed and gives up.
//
// # Retention
//
// Keys are kept for Config.Retention (default 24 hours). A background sweeper
// deletes older finished ones and clears the key from the business rows, so
// a key used again after that is a new request. A key whose request has not
// finished is never swept: forgetting it would let its retry capture the
// money again under a new downstream key. Once past retention with no live
// lock it is counted in Stats.Abandoned, for a person to reconcile.
//
// # Replicas
//
// With Config.Path a postgres:// URL, any number of Servers, in one process
// or many, share one database, and every rule above holds across them:
// a key claimed on one replica is in flight, replayed or mismatched
// on all of them; a charge whose replica died is resumed by another from
// its last recovery point once the lock goes stale; the gateway's captures
// live in the same database, so a downstream key captures once whichever
// replica calls. Write transactions run at SERIALIZABLE; PostgreSQL aborts
// one that would break that order (a serialization failure, 40001) or that
// deadlocked (40P01), and the server runs it again, up to 12 times with a
// short random backoff (Stats.Retries counts them); if it still fails, the
// request gets 503 with Retry-After, never 500. Two requests with one key
// and different bodies may instead collide in a business table's UNIQUE
// key (a unique violation, 23505): that transaction runs once more, finds
// the other's key row and answers 422. The sweeper deletes in
// batches that lock their rows FOR UPDATE SKIP LOCKED, so replicas sweeping
// at once delete each expired key once. The schema is created on open
// under an advisory lock, so replicas may start together on an empty
// database. A database that cannot be reached makes New fail with
// ErrDatabaseUnavailable, and a request 503 with Retry-After. Times in the
// rows (key ages, locks) are each replica's own clock: replicas' clocks
// must agree to well within Config.LockTimeout, or one may take over a lock
// that is still live.
//
// # Slow clients
//
// A server that waits forever for a client holds a connection, a file
// descriptor and a goroutine for it, and a graceful shutdown waits with it.
// Listen bounds each wait (Config.ReadTimeout, WriteTimeout, IdleTimeout):
// a request whose body trickles or stalls past ReadTimeout gets 408 (a
// problem document) and its connection is closed, before its key is looked
// up, so nothing is committed for it; an idle keep-alive connection is
// closed after IdleTimeout.
//
// # Faults
//
// For tests, Config.Faults injects failures at the points where real servers
// fail: an error before commit, a hang-up or a 502 after commit, delays, and
// crashes before commit, after commit and between the gateway call and the
// final commit. They are off unless configured and are drawn from a seeded
// generator. Each leaves the database consistent; GET /stats reports the
// counts a test needs to prove that every operation took effect exactly once.
package testserver
