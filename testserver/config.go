package testserver

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults for the Config fields left at their zero value.
const (
	// DefaultRetention is how long keys are remembered: 24 hours, the window
	// the idem client assumes by default.
	DefaultRetention = 24 * time.Hour

	// DefaultLockTimeout is how long an in-flight lock protects a request
	// before a retry may take it over.
	DefaultLockTimeout = 10 * time.Second

	// DefaultMaxBodyBytes bounds a request body: 64 KiB.
	DefaultMaxBodyBytes = 64 << 10

	// DefaultBusyTimeout is how long SQLite waits for another connection's
	// write lock before failing with SQLITE_BUSY.
	DefaultBusyTimeout = 5 * time.Second

	// DefaultReadTimeout bounds the time to read a whole request, header
	// and body: 30 seconds.
	DefaultReadTimeout = 30 * time.Second

	// DefaultWriteTimeout bounds the time from the end of a request's
	// header to the end of its response: 60 seconds.
	DefaultWriteTimeout = 60 * time.Second

	// DefaultIdleTimeout bounds how long a keep-alive connection waits for
	// its next request: 2 minutes.
	DefaultIdleTimeout = 2 * time.Minute

	// maxSweepInterval caps the default sweep interval for long retentions.
	maxSweepInterval = time.Hour
)

// Config configures a Server. The zero value is a working server: an
// in-memory database, 24-hour retention, no faults and no logging.
type Config struct {
	// Path is the SQLite database file. It is created if missing and
	// survives restarts; the fake payment gateway keeps its own table in the
	// same file. Empty (the default) or ":memory:" keeps everything in
	// memory for the life of the Server.
	//
	// A postgres:// or postgresql:// URL (pgx's syntax) names a PostgreSQL
	// database instead, which must exist; the tables are created in it if
	// missing. Any number of Servers, in one process or in many, may share
	// it: they serve the same keys and the same gateway captures, and the
	// rules hold across them. A database that cannot be reached makes
	// New fail with ErrDatabaseUnavailable, and a request 503.
	Path string

	// Retention is how long a key and its stored response are kept. A key
	// used again after it was swept is a new request. Default: the
	// Dialect's retention, 24 hours unless it says otherwise.
	Retention time.Duration

	// Dialect is the idempotency convention the server speaks: where the
	// key goes, and how in-flight requests, replays and reused keys are
	// answered. Default: the zero Dialect, the server's own convention.
	Dialect Dialect

	// SweepInterval is how often the background sweeper deletes expired
	// keys. Default: a tenth of Retention, at least 10 milliseconds and at
	// most an hour.
	SweepInterval time.Duration

	// LockTimeout is how long a request's in-flight lock is honoured,
	// counted from the claim or from the last recovery point recorded (a
	// charge renews its lock when it records the gateway call). While it
	// holds, a retry under the same key gets 409 with Retry-After; after
	// it, the retry takes the lock over and resumes the request from its
	// last recovery point. Default: 10 seconds.
	LockTimeout time.Duration

	// MaxBodyBytes is the largest request body accepted; a larger one gets
	// 413. Default: 64 KiB.
	MaxBodyBytes int64

	// ReadTimeout bounds the time to read a whole request, header and body.
	// A client that trickles its body, or stops sending it, gets 408
	// (a problem document) and its connection is closed; nothing is
	// looked up or committed for the request. The header alone must
	// arrive within the smaller of ReadTimeout and 10 seconds. Used by
	// Listen. Default: 30 seconds.
	ReadTimeout time.Duration

	// WriteTimeout bounds the time from the end of a request's header to
	// the end of its response; a response still being written then is cut
	// off. Keep it above the longest a request may take (LockTimeout,
	// gateway and fault delays). Used by Listen. Default: 60 seconds.
	WriteTimeout time.Duration

	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request before the server closes it. Used by Listen. Default:
	// 2 minutes.
	IdleTimeout time.Duration

	// BusyTimeout is SQLite's busy_timeout: how long a connection waits for
	// another connection's write lock (the gateway's, another process's).
	// It does not bound the server's own writers, which queue in Go for
	// its single write connection: behind a transaction that never ends
	// they wait until the server closes. Unused on PostgreSQL, except as
	// the bound on freeing a lock after a failed charge (as on SQLite).
	// Default: 5 seconds.
	BusyTimeout time.Duration

	// Faults injects failures for tests. The zero value (the default)
	// injects none.
	Faults Faults

	// Crash is called when an injected crash fault reaches its crash point
	// (one of the CrashPoint constants). A binary sets it to exit the
	// process, which is what a real crash does. If it returns, the request
	// is aborted in process as a crash would leave it: the open transaction
	// is rolled back, nothing is written, and the connection is closed.
	// Default: nil, which aborts the request only.
	Crash func(point string)

	// Now is the clock used for key ages, locks and retention. Default:
	// time.Now.
	Now func() time.Time

	// Logger receives one record per request and the sweeper's reports.
	// Default: nil, which logs nothing.
	Logger *slog.Logger

	// DisableIdempotency is for benchmarks only: it serves the
	// single-transaction mutations (POST /reservations, PUT
	// /inventory/{item_id}) without the idempotency layer, as the baseline
	// the layer's cost is measured against. They then need no key; none is
	// looked up or stored, and a retry applies the mutation again. A key
	// that is sent is still written on the reservation row, under its
	// UNIQUE constraint. POST /charges, whose phases rely on the key, keeps
	// the layer and still requires one. Never set it in a server a client
	// relies on. Default: false.
	DisableIdempotency bool
}

// withDefaults returns c with every zero field replaced by its default, or
// an error if a field holds a value that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.Retention < 0 || c.SweepInterval < 0 || c.LockTimeout < 0 || c.MaxBodyBytes < 0 || c.BusyTimeout < 0 ||
		c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 {
		return c, fmt.Errorf("%w: negative duration or size", ErrInvalidConfig)
	}
	if err := c.Dialect.check(); err != nil {
		return c, err
	}
	setDefault(&c.Retention, c.Dialect.Retention)
	setDefault(&c.Retention, DefaultRetention)
	setDefault(&c.SweepInterval, min(max(c.Retention/10, 10*time.Millisecond), maxSweepInterval))
	setDefault(&c.LockTimeout, DefaultLockTimeout)
	setDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&c.BusyTimeout, DefaultBusyTimeout)
	setDefault(&c.ReadTimeout, DefaultReadTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.Faults.validate(); err != nil {
		return c, err
	}
	return c, nil
}

// setDefault sets *field to def when it is zero.
func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}
