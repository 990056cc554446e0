package pgjournal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/filejournal"
	"github.com/idemkit/idem/internal/keyedlock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Options.
const (
	// DefaultNamespace is the default Options.Namespace.
	DefaultNamespace = "default"
	// DefaultLeaseTTL is the default Options.LeaseTTL.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultTimeout is the default Options.Timeout.
	DefaultTimeout = 5 * time.Second
	// DefaultMaxConns is the size of the connection pool Open makes when
	// the DSN does not set pool_max_conns.
	DefaultMaxConns = 32
)

// Options tunes a Journal. The zero value is the default for every field.
type Options struct {
	// Namespace separates journals kept in one database: machines share
	// operations only within a namespace. Default DefaultNamespace.
	Namespace string

	// Owner names this Journal in the leases it holds, so that a
	// HeldError says which machine runs an operation. Default: the host
	// name, the process ID and a random suffix.
	Owner string

	// LeaseTTL is how long a claim on an operation lasts without being
	// renewed (F3). A Journal renews the claims it holds every LeaseTTL/3
	// while their attempts run; the claim of a machine that died lapses
	// LeaseTTL after its last renewal, and another machine then resumes
	// the operation under the same key. A claim whose renewal fails for
	// LeaseTTL is lost: its attempts stop. Default DefaultLeaseTTL (30s).
	LeaseTTL time.Duration

	// KeyTTL is how long a key lives on the server (Journal.KeyTTL):
	// pending operations older than it are expired, judged by the
	// database's clock (F4). Default idem.DefaultKeyTTL (24h).
	KeyTTL time.Duration

	// Timeout bounds each statement the Journal sends, so that a database
	// that stopped answering fails a Do with idem.ErrJournalUnavailable
	// (F6) instead of hanging it. Default DefaultTimeout (5s).
	Timeout time.Duration

	// NoMigrate makes Open and New refuse a database whose schema is not at
	// SchemaVersion, instead of creating or upgrading it (for deployments
	// that run Migrate, or `idem journal migrate`, as a separate step).
	// Default false.
	NoMigrate bool

	// Logger receives the Journal's records, by idem's logging rule:
	// routine at Debug; a lease lost, or a release that failed, at Warn.
	// Default nil: slog.Default().
	Logger *slog.Logger
}

// Journal is an idem.Journal kept in a PostgreSQL database, shared by every
// machine that opens the same database and namespace. It is safe for
// concurrent use.
type Journal struct {
	pool    *pgxpool.Pool
	ownPool bool // made by Open: closed by Close
	opt     Options
	log     *slog.Logger
	clock   clock

	// running serializes this process's claims on each ID: the
	// database's lease does it across machines.
	running keyedlock.Set

	mu     sync.Mutex
	closed bool
	held   map[*claim]struct{} // leased claims, abandoned by Close
}

var _ idem.Journal = (*Journal)(nil)

// Open connects to the database at dsn (a postgres:// URL or a key=value
// connection string, as pgx reads it, pool_max_conns included: default
// DefaultMaxConns), creates or upgrades the journal's tables (see Migrate)
// and returns the Journal. Close closes its connections.
func Open(ctx context.Context, dsn string, opt Options) (*Journal, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message would repeat the DSN, password included; the
		// error it wraps, when there is one, does not.
		if inner := errors.Unwrap(err); inner != nil {
			return nil, fmt.Errorf("pgjournal: opening: the connection string does not parse: %w", inner)
		}
		return nil, errors.New("pgjournal: opening: the connection string does not parse")
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgxpool's default (4, or the number of CPUs) queues a fleet
		// machine's callers behind a handful of connections: each
		// operation holds one for two or three short statements.
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgjournal: opening: %w", err)
	}
	j, err := New(ctx, pool, opt)
	if err != nil {
		pool.Close()
		return nil, err
	}
	j.ownPool = true
	return j, nil
}

// New returns the Journal kept in pool's database, after creating or
// upgrading its tables (see Migrate). Close leaves the pool open.
func New(ctx context.Context, pool *pgxpool.Pool, opt Options) (*Journal, error) {
	switch {
	case opt.LeaseTTL < 0 || opt.KeyTTL < 0 || opt.Timeout < 0:
		return nil, fmt.Errorf("%w: pgjournal.Options has a negative duration", idem.ErrInvalidConfig)
	case opt.LeaseTTL > 0 && opt.LeaseTTL < 30*time.Millisecond:
		return nil, fmt.Errorf("%w: pgjournal.Options.LeaseTTL %s is too short to renew", idem.ErrInvalidConfig, opt.LeaseTTL)
	}
	if opt.Namespace == "" {
		opt.Namespace = DefaultNamespace
	}
	if opt.Owner == "" {
		opt.Owner = defaultOwner()
	}
	if opt.LeaseTTL == 0 {
		opt.LeaseTTL = DefaultLeaseTTL
	}
	if opt.KeyTTL == 0 {
		opt.KeyTTL = idem.DefaultKeyTTL
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	j := &Journal{pool: pool, opt: opt, log: opt.Logger}
	sctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if opt.NoMigrate {
		var v int
		err := pool.QueryRow(sctx, `SELECT version FROM idem_schema`).Scan(&v)
		if err == nil && v != SchemaVersion {
			err = fmt.Errorf("the database is at schema version %d, this idem needs %d: run Migrate", v, SchemaVersion)
		}
		if err != nil {
			return nil, fmt.Errorf("pgjournal: opening: %w", classify(ctx, err))
		}
	} else if err := Migrate(sctx, pool); err != nil {
		// Judged against the caller's context: Migrate's own ended
		// with Options.Timeout, which is the database's doing.
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, err
		}
		return nil, classify(ctx, err)
	}
	if err := j.clock.sync(sctx, pool); err != nil {
		return nil, fmt.Errorf("pgjournal: opening: reading the database's clock: %w", classify(ctx, err))
	}
	return j, nil
}

// defaultOwner names this process: host, process ID and a random suffix
// (two Journals in one process are two owners).
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	var b [4]byte
	rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Close stops the Journal. Claims still held stop renewing their leases
// and report them lost (their attempts stop); the leases lapse in the
// database by themselves. A pool the Journal opened is closed; one given to
// New is not. A second Close does nothing.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	held := make([]*claim, 0, len(j.held))
	for c := range j.held {
		held = append(held, c)
	}
	j.mu.Unlock()
	for _, c := range held {
		c.abandon()
	}
	if j.ownPool {
		j.pool.Close()
	}
	return nil
}

// hold and unhold keep the set of leased claims.
func (j *Journal) hold(c *claim) {
	j.mu.Lock()
	if j.held == nil {
		j.held = make(map[*claim]struct{})
	}
	j.held[c] = struct{}{}
	j.mu.Unlock()
}

func (j *Journal) unhold(c *claim) {
	j.mu.Lock()
	delete(j.held, c)
	j.mu.Unlock()
}

// usable returns idem.ErrClosed after Close.
func (j *Journal) usable() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("pgjournal: %w", idem.ErrClosed)
	}
	return nil
}

// Namespace returns the journal's namespace.
func (j *Journal) Namespace() string { return j.opt.Namespace }

// Owner returns the name this Journal gives its leases.
func (j *Journal) Owner() string { return j.opt.Owner }

// KeyTTL returns Options.KeyTTL.
func (j *Journal) KeyTTL() time.Duration { return j.opt.KeyTTL }

// Now returns the database's time (F4): its clock as last read (at open and
// at every claim) advanced by this machine's monotonic clock since.
func (j *Journal) Now() time.Time { return j.clock.now() }

// Lookup returns the operation with the given ID.
func (j *Journal) Lookup(ctx context.Context, id string) (idem.Operation, bool, error) {
	if err := j.usable(); err != nil {
		return idem.Operation{}, false, err
	}
	sctx, cancel := context.WithTimeout(ctx, j.opt.Timeout)
	defer cancel()
	rows, err := j.pool.Query(sctx, `SELECT `+operationColumns+` FROM idem_operations
		WHERE namespace = $1 AND op_id = $2`, j.opt.Namespace, id)
	if err != nil {
		return idem.Operation{}, false, fmt.Errorf("pgjournal: looking up %q: %w", id, classify(ctx, err))
	}
	op, err := pgx.CollectExactlyOneRow(rows, scanOperation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return idem.Operation{}, false, nil
	case err != nil:
		return idem.Operation{}, false, fmt.Errorf("pgjournal: looking up %q: %w", id, classify(ctx, err))
	}
	return op, true, nil
}

// List returns the operations the listing selects, ordered by Created then
// ID; pending and expired are judged by the database's clock (F4).
func (j *Journal) List(ctx context.Context, which idem.Listing) ([]idem.Operation, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	cutoff := j.Now().Add(-j.opt.KeyTTL).UnixNano() // created at or before it: expired
	var where string
	switch which {
	case idem.ListAll:
		where = `true`
	case idem.ListPending:
		where = `state = 1 AND created_ns > $2`
	case idem.ListExpired:
		where = `state = 1 AND created_ns <= $2`
	case idem.ListCompleted:
		where = `state > 1`
	default:
		return nil, fmt.Errorf("pgjournal: listing: unknown %v", which)
	}
	sctx, cancel := context.WithTimeout(ctx, j.opt.Timeout)
	defer cancel()
	args := []any{j.opt.Namespace}
	if strings.Contains(where, "$2") {
		args = append(args, cutoff)
	}
	rows, err := j.pool.Query(sctx, `SELECT `+operationColumns+` FROM idem_operations WHERE namespace = $1 AND `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("pgjournal: listing %s operations: %w", which, classify(ctx, err))
	}
	ops, err := pgx.CollectRows(rows, scanOperation)
	if err != nil {
		return nil, fmt.Errorf("pgjournal: listing %s operations: %w", which, classify(ctx, err))
	}
	// Sorted here, not by ORDER BY: the database would order IDs by its
	// collation, and every journal orders them by their bytes.
	slices.SortFunc(ops, func(a, b idem.Operation) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return ops, nil
}

// operationColumns are the columns scanOperation reads, in its order.
const operationColumns = `op_id, op_key, fingerprint, method, url, created_ns, state,
	completed_ns, status, flags, header, body`

// opRow holds a row of operationColumns as scanned.
type opRow struct {
	opID, method, url  string
	key                string
	fp, header, body   []byte
	created, completed int64
	state, flags       int16
	status             int32
}

// dest returns the scan destinations of operationColumns.
func (r *opRow) dest() []any {
	return []any{&r.opID, &r.key, &r.fp, &r.method, &r.url, &r.created, &r.state,
		&r.completed, &r.status, &r.flags, &r.header, &r.body}
}

// operation returns the row as an Operation.
func (r *opRow) operation() (idem.Operation, error) {
	var op idem.Operation
	if len(r.fp) != len(op.Fingerprint) {
		return op, fmt.Errorf("pgjournal: operation %q: row has a %d-byte fingerprint", r.opID, len(r.fp))
	}
	op.ID, op.Key, op.Method, op.URL = r.opID, r.key, r.method, r.url
	copy(op.Fingerprint[:], r.fp)
	op.Created = time.Unix(0, r.created).UTC()
	op.State = idem.State(r.state)
	if op.State == idem.StateDone || op.State == idem.StateRejected {
		op.Completed = time.Unix(0, r.completed).UTC()
		op.Status = int(r.status)
		if len(r.header) > 0 {
			h, err := filejournal.DecodeHeader(r.header)
			if err != nil {
				return op, fmt.Errorf("pgjournal: operation %q: recorded header: %w", r.opID, err)
			}
			op.Header = h
		}
		if len(r.body) > 0 {
			op.Body = r.body
		}
		op.BodyTruncated = r.flags&flagBodyTruncated != 0
		op.HeaderTruncated = r.flags&flagHeaderTruncated != 0
	}
	return op, nil
}

// scanOperation reads a row of operationColumns.
func scanOperation(row pgx.CollectableRow) (idem.Operation, error) {
	var r opRow
	if err := row.Scan(r.dest()...); err != nil {
		return idem.Operation{}, err
	}
	return r.operation()
}

// The bits of the flags column.
const (
	flagBodyTruncated   = 1
	flagHeaderTruncated = 2
)

// encodeHeader returns h as the header column holds it, in the file
// journal's encoding (every byte of a value kept, as HTTP allows bytes
// that are not UTF-8), or nil for an empty header.
func encodeHeader(h http.Header) []byte {
	if len(h) == 0 {
		return nil
	}
	return filejournal.EncodeHeader(h)
}

// statement runs fn with a context bounded by Options.Timeout.
func (j *Journal) statement(ctx context.Context, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, j.opt.Timeout)
	defer cancel()
	return classify(ctx, fn(sctx))
}

// clock is the database's clock as seen from this machine: a reading of
// the database's clock and the local monotonic time it was taken at.
type clock struct {
	mu    sync.Mutex
	db    time.Time // the database's clock_timestamp()
	local time.Time // time.Now() when the reading arrived, monotonic
}

// sync reads the database's clock.
func (c *clock) sync(ctx context.Context, pool *pgxpool.Pool) error {
	var db time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return err
	}
	c.set(db)
	return nil
}

// set records a reading of the database's clock, taken just now.
func (c *clock) set(db time.Time) {
	c.mu.Lock()
	c.db, c.local = db, time.Now()
	c.mu.Unlock()
}

// now returns the database's time now.
func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.db.Add(time.Since(c.local)).UTC()
}
