package idemserver

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Config and the names of the headers the layer reads and
// writes.
const (
	HeaderIdempotencyKey = "Idempotency-Key"     // the request header carrying the key
	HeaderReplayed       = "Idempotent-Replayed" // "true" on an answer replayed from a stored key

	DefaultTable            = "idempotency_keys"
	DefaultMaxKeyLength     = 255
	DefaultRetention        = 24 * time.Hour
	DefaultSweepInterval    = time.Minute
	DefaultLockTimeout      = 10 * time.Second
	DefaultWorkTimeout      = 30 * time.Second
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 1 << 20
	DefaultReruns           = 12
)

// Config configures a Keys. Only DB (or Store) is required; every other
// zero field takes the default named beside it.
type Config struct {
	// DB is the service's own database, where its handlers' writes live,
	// through database/sql: PostgreSQL on pgx's stdlib driver ("pgx"),
	// with package idemserver/postgres imported, or SQLite on modernc's
	// ("sqlite", best opened with sqlite.Open of idemserver/sqlite).
	DB *sql.DB

	// Store is the service's database through its driver's own
	// interface, instead of DB: postgres.Pool of a pgxpool.Pool, whose
	// handlers get their transaction from postgres.Tx.
	Store Store

	// Table names the key table (default DefaultTable); its recovery
	// points live in Table+"_steps".
	Table string

	// Principal says whose keys a request uses: the account the service
	// authenticated (a user, a tenant), read from what its authentication
	// established, never from the raw credential, whose refresh or
	// rotation would make a client's retry a new request. An error
	// answers 401 if it wraps ErrUnauthorized, else 400.
	//
	// Nil puts every request's keys in one space, principal "": a key is
	// one request whoever sends it, as the IETF draft's keys are. The
	// fingerprint check keeps a key reused for another request from
	// being replayed (422), and keys drawn at random (UUIDv4) do not
	// meet by chance; but a caller who learns another's key and request
	// can read its stored answer. A Principal per account (Stripe scopes
	// keys so) closes that: equal keys of two accounts are two requests,
	// and neither reads the other's answer.
	Principal func(*http.Request) (string, error)

	// KeyHeader is the request header holding the key (default
	// HeaderIdempotencyKey), bare or as an RFC 8941 sf-string. It is
	// matched case-insensitively and written in messages as spelt here.
	KeyHeader string

	// KeyField, if set, takes the key from this top-level member of a
	// JSON object body instead of a header; the member is removed before
	// the fingerprint and the handler see the body.
	KeyField string

	// MaxKeyLength bounds a key, in bytes (default DefaultMaxKeyLength).
	MaxKeyLength int

	// Fingerprint digests what a request asks for (default Fingerprint).
	Fingerprint func(method, target string, body []byte) []byte

	// Retention is how long a finished key is kept (default
	// DefaultRetention); Route.Retention overrides it per route.
	Retention time.Duration

	// SweepInterval is the period of Run (default DefaultSweepInterval).
	SweepInterval time.Duration

	// LockTimeout is the lease of a phased route's claim (default
	// DefaultLockTimeout), renewed by each Step.
	LockTimeout time.Duration

	// WorkTimeout bounds an atomic route's transaction, handler included
	// (default DefaultWorkTimeout).
	WorkTimeout time.Duration

	// Accepts, if set, decides from its Content-Type whether a request's
	// body can be read; false answers 415 before the body is read.
	// AcceptJSON accepts JSON bodies.
	Accepts func(contentType string) bool

	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes);
	// a longer one gets 413 and nothing is looked up.
	MaxBodyBytes int64

	// MaxResponseBytes bounds a handler's answer (default
	// DefaultMaxResponseBytes); a longer one rolls back and gets 500.
	MaxResponseBytes int64

	// Reruns bounds how often a transaction runs again after a
	// PostgreSQL serialization failure or deadlock (default
	// DefaultReruns); then the request gets 503 with Retry-After.
	Reruns int

	// Answers writes refusals and replays; the zero value speaks the
	// IETF draft with application/problem+json.
	Answers Answers

	// Forget, if set, runs in each sweep transaction before its keys are
	// deleted, to clear them from business rows (so that the key may be
	// used again as a new request). tx is that transaction on a DB (nil on
	// a Store; postgres.Tx(ctx) gives a pgxpool's).
	Forget func(ctx context.Context, tx *sql.Tx, swept []Swept) error

	// Now is the clock of retention and leases (default time.Now).
	Now func() time.Time

	// Logger receives the layer's log (default slog.Default()).
	Logger *slog.Logger
}

// Route configures one route of Keys.Handle.
type Route struct {
	// Optional lets a request without a key pass through unkeyed (an
	// atomic route's handler still gets Tx). Default: 400.
	Optional bool

	// Phased marks a handler that calls out (a payment gateway, mail):
	// its key is claimed first, its calls are Steps with recovery
	// points, and its own writes commit in a final transaction fenced by
	// the claim. Default: atomic.
	Phased bool

	// Retention overrides Config.Retention for keys stored by this route.
	Retention time.Duration

	// Serializable runs the transaction the handler writes in (an atomic
	// route's, a phased route's final one) at SERIALIZABLE instead of
	// READ COMMITTED, on PostgreSQL and MySQL, for a handler that reads
	// rows and writes what it read without locking them: its reads are
	// then repeatable, and a conflict with a concurrent request reruns
	// it. Concurrent requests conflict more often, even under distinct
	// keys, and run their handlers again. SQLite's transactions are
	// serializable either way.
	Serializable bool

	// Check, if set, validates a request before its key is looked up:
	// it runs after the key is read and the body read (without
	// Config.KeyField's member), with body as the handler would see it
	// and r's Body reading it again. False means Check has answered (a
	// 4xx refusal, say): nothing is looked up, stored or run, and the key
	// stays free for a good request. It counts in Stats.Invalid. Check
	// must not modify body.
	Check func(w http.ResponseWriter, r *http.Request, body []byte) bool
}

// Swept names a key the sweeper deletes, for Config.Forget.
type Swept struct {
	Principal, Key string
}

// Stats are a Keys' counters since New.
type Stats struct {
	Requests   int64 // keyed requests served
	Unkeyed    int64 // requests passed through without a key (Route.Optional)
	Invalid    int64 // refused before any look-up: missing or bad key, principal, body
	Stored     int64 // answers committed with their key
	Replays    int64 // answers replayed from a stored key
	Mismatches int64 // 422: key reused for another request
	InFlight   int64 // 409: the key's first request still holds it
	RolledBack int64 // handler answers >= 500 or panics: nothing stored
	Failed     int64 // database failures answered 500 or 503
	Reruns     int64 // transactions run again (40001, 40P01, 23505 under a key)
	Resumed    int64 // phased claims taken over from an earlier attempt
	StepsRun   int64 // Step calls that ran their function
	StepsKept  int64 // Step calls answered from a recovery point
	LockLost   int64 // phased holders taken over or past their lease: nothing more committed
	Swept      int64 // keys deleted by the sweeper
	Abandoned  int64 // unfinished keys past retention, unleased, kept (last sweep)
}
