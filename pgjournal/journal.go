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
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Options.
const (
	// DefaultNamespace is the default Options.Namespace.
	DefaultNamespace = "default"
	// DefaultLeaseTTL is the default Options.LeaseTTL.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultLiveness is the default Options.Liveness.
	DefaultLiveness = 5 * time.Second
	// DefaultTimeout is the default Options.Timeout.
	DefaultTimeout = 5 * time.Second
	// MaxIDLen bounds an operation ID, in bytes. The primary key's index
	// holds the namespace and the ID, and a PostgreSQL index entry holds
	// at most a third of a page (2,704 bytes), however well they
	// compress. The file and memory journals take IDs of up to 4,096
	// bytes.
	MaxIDLen = 2048
	// MaxNamespaceLen bounds Options.Namespace, in bytes, for the same
	// index.
	MaxNamespaceLen = 256
	// DefaultMaxConns is the size of the connection pool Open makes when
	// the DSN does not set pool_max_conns: three machines at it take 30
	// of a small server's 100 connections.
	DefaultMaxConns = 10
)

// Options tunes a Journal. The zero value is the default for every field.
// The connection pool is not an option but the DSN's (see Open): by
// default DefaultMaxConns (10) connections, in pgx's exec mode.
type Options struct {
	// Namespace separates journals kept in one database: machines share
	// operations only within a namespace. It is PostgreSQL text (UTF-8,
	// no NUL) of at most MaxNamespaceLen bytes. Default DefaultNamespace.
	Namespace string

	// Owner names this Journal in the leases it holds, so that a
	// HeldError says which machine runs an operation. It is PostgreSQL
	// text (UTF-8, no NUL). Default: the host name, the process ID and a
	// random suffix.
	Owner string

	// LeaseTTL is how long a claim on an operation lasts without being
	// renewed. A Journal renews the claims it holds every LeaseTTL/3
	// while their attempts run. A claim whose renewal fails for LeaseTTL
	// is lost: its attempts stop. A machine that died frees its claims
	// after Liveness, or LeaseTTL if that is shorter. Default
	// DefaultLeaseTTL (30s).
	LeaseTTL time.Duration

	// Liveness is how long the Journal stays alive in the database
	// without renewing its liveness: it renews it every Liveness/3
	// with one statement for all its claims, and when it has not for
	// Liveness (the process was killed, paused, starved or cut off from
	// the database) every claim it holds is free to other machines at
	// once. The Journal stops sending a tenth of Liveness before that, by
	// its own clock. Shorter resumes a dead machine's work sooner and
	// costs more statements; a process paused for longer than nine tenths
	// of it loses its claims. The renewals keep one of the pool's
	// connections to themselves, unless it has only one. Default
	// DefaultLiveness (5s).
	Liveness time.Duration

	// Timeout bounds each statement the Journal sends, so that a database
	// that stopped answering fails a Do with journal.ErrUnavailable
	// instead of hanging it. Default DefaultTimeout (5s).
	Timeout time.Duration

	// NoMigrate makes Open and New refuse a database whose schema is not at
	// SchemaVersion (ErrNotMigrated, or ErrSchemaTooNew), instead of
	// creating or upgrading it: for deployments that run Migrate, or `idem
	// journal migrate`, as a separate step, and for reading a database
	// without writing to it. Default false.
	NoMigrate bool

	// AllowAsyncReplication opens a Journal on a primary that streams to
	// standbys none of which is synchronous, which Open otherwise refuses
	// with a *ReplicationError. A failover to such a standby can
	// lose the last intents the primary committed, after their requests
	// were sent: the new primary does not know those operations, and their
	// next Do sends them again under new keys, which the API applies
	// twice. Set it only where no failover can promote a standby that was
	// behind; Open then logs a warning that says so. Default false.
	AllowAsyncReplication bool

	// Logger receives the Journal's records, by idem's logging rule:
	// routine at Debug; a lease lost, or a release that failed, at Warn.
	// Default nil: slog.Default().
	Logger *slog.Logger
}

// Journal is an journal.Journal kept in a PostgreSQL database, shared by every
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
	running journalkit.Set

	// The group commits of intents, outcomes and releases, and the
	// intents inserted.
	intents    group[intentIn, intentOut]
	outcomes   group[outcomeIn, bool]
	releases   group[releaseIn, struct{}]
	intentRows atomic.Uint64

	// The Journal's liveness (F11, life.go): its current life, the
	// heartbeat that renews it (beat is closed by Close), and counts.
	starting sync.Mutex // held while a life is started
	beat     chan struct{}
	beating  sync.WaitGroup
	renewals atomic.Uint64
	lives    atomic.Uint64

	mu     sync.Mutex
	closed bool
	life   *life               // the current life, nil before the first claim
	held   map[*claim]struct{} // leased claims, abandoned by Close
	kept   map[string]int64    // leases a failed release left in the database: ID to fence
}

var _ journal.Journal = (*Journal)(nil)

// Open connects to the database at dsn (a postgres:// URL or a key=value
// connection string, as pgx reads it), creates or upgrades the journal's
// tables (see Migrate) and returns the Journal. Close closes its
// connections.
//
// The pool has pool_max_conns connections, DefaultMaxConns when the DSN
// does not set it. A statement that finds no free connection waits for
// one, and one whose new connection the server refuses as too many
// (53300) tries again, until Options.Timeout.
//
// Statements run in pgx's exec mode (default_query_exec_mode=exec): each
// in one round trip, on an unnamed statement, so that no prepared
// statement outlives a transaction. That is what a pooler in transaction
// mode (pgbouncer's pool_mode=transaction, which hands each transaction
// to any server connection) needs, and it works directly and in session
// mode too. A DSN that sets default_query_exec_mode keeps its own: the
// default cache_statement saves the server a parse per statement but fails
// behind a transaction pooler.
//
// A DSN may list several hosts (host=a,b or postgres://a,b/db) for a
// failover to a promoted standby; with target_session_attrs=read-write a
// new connection skips a server that is in recovery. A statement refused
// by a read-only server (25006) matches journal.ErrUnavailable, as a
// server that cannot be reached does.
//
// Before it writes anything, Open checks that a failover cannot lose what
// the Journal commits: a primary that streams to standbys none of
// which is synchronous (synchronous_standby_names empty) is refused with
// a *ReplicationError, matching ErrAsyncReplication, unless
// Options.AllowAsyncReplication is set. A server with no standby passes.
// Every commit of the Journal then waits for the synchronous standbys
// whatever the session's synchronous_commit. What Open cannot see is a
// primary that stops waiting later: Patroni's synchronous_mode without
// synchronous_mode_strict empties synchronous_standby_names while no
// standby answers.
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
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
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

// New returns the Journal kept in pool's database, after checking its
// replication as Open does and creating or upgrading its tables (see
// Migrate). Close leaves the pool open.
func New(ctx context.Context, pool *pgxpool.Pool, opt Options) (*Journal, error) {
	switch {
	case opt.LeaseTTL < 0 || opt.Timeout < 0 || opt.Liveness < 0:
		return nil, fmt.Errorf("%w: pgjournal.Options has a negative duration", ErrInvalidOptions)
	case opt.LeaseTTL > 0 && opt.LeaseTTL < 30*time.Millisecond:
		return nil, fmt.Errorf("%w: pgjournal.Options.LeaseTTL %s is too short to renew", ErrInvalidOptions, opt.LeaseTTL)
	case opt.Liveness > 0 && opt.Liveness < 30*time.Millisecond:
		return nil, fmt.Errorf("%w: pgjournal.Options.Liveness %s is too short to renew", ErrInvalidOptions, opt.Liveness)
	case !isText(opt.Namespace):
		return nil, fmt.Errorf("%w: pgjournal.Options.Namespace %s is not PostgreSQL text (UTF-8 without NUL)",
			ErrInvalidOptions, journalkit.QuoteID(opt.Namespace))
	case len(opt.Namespace) > MaxNamespaceLen:
		return nil, fmt.Errorf("%w: pgjournal.Options.Namespace is %d bytes, over %d",
			ErrInvalidOptions, len(opt.Namespace), MaxNamespaceLen)
	case !isText(opt.Owner):
		return nil, fmt.Errorf("%w: pgjournal.Options.Owner %s is not PostgreSQL text (UTF-8 without NUL)",
			ErrInvalidOptions, journalkit.QuoteID(opt.Owner))
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
	if opt.Liveness == 0 {
		opt.Liveness = DefaultLiveness
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	j := &Journal{pool: pool, opt: opt, log: opt.Logger}
	j.intents.commit = j.commitIntents
	j.outcomes.commit = j.commitOutcomes
	j.releases.commit = j.commitReleases
	sctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	// Before anything is written: a commit a failover can lose is no
	// commit to send after.
	if err := j.checkReplication(sctx); err != nil {
		if errors.Is(err, ErrAsyncReplication) {
			return nil, err
		}
		return nil, fmt.Errorf("pgjournal: opening: reading the database's replication: %w", classify(ctx, err))
	}
	if opt.NoMigrate {
		var v int
		err := waitRefused(sctx, pool, func(ctx context.Context) error {
			return pool.QueryRow(ctx, `SELECT version FROM idem_schema`).Scan(&v)
		})
		switch {
		case isCode(err, "42P01"): // undefined_table
			return nil, fmt.Errorf("%w (there is no idem_schema table)", ErrNotMigrated)
		case err != nil:
			return nil, fmt.Errorf("pgjournal: opening: %w", classify(ctx, err))
		case v < SchemaVersion:
			return nil, fmt.Errorf("%w (the database is at schema version %d, this idem needs %d)", ErrNotMigrated, v, SchemaVersion)
		case v > SchemaVersion:
			return nil, fmt.Errorf("%w: the database is at version %d, this idem knows %d", ErrSchemaTooNew, v, SchemaVersion)
		}
	} else if err := waitRefused(sctx, pool, func(ctx context.Context) error { return Migrate(ctx, pool) }); err != nil {
		// Judged against the caller's context: Migrate's own ended
		// with Options.Timeout, which is the database's doing.
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, err
		}
		return nil, classify(ctx, err)
	}
	if err := waitRefused(sctx, pool, func(ctx context.Context) error { return j.clock.sync(ctx, pool) }); err != nil {
		return nil, fmt.Errorf("pgjournal: opening: reading the database's clock: %w", classify(ctx, err))
	}
	return j, nil
}

// isText reports whether s can be PostgreSQL text: valid UTF-8 without
// NUL bytes.
func isText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// checkID returns an error matching journal.ErrInvalidOperation if id cannot
// be an operation ID here. It does not repeat the ID: the caller's error
// names it.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty operation ID", journal.ErrInvalidOperation)
	case !isText(id):
		return fmt.Errorf("%w: an operation ID in PostgreSQL is text: UTF-8, without NUL", journal.ErrInvalidOperation)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: an operation ID of %d bytes, over pgjournal's %d (MaxIDLen)", journal.ErrInvalidOperation, len(id), MaxIDLen)
	}
	return nil
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
// and report them lost (their attempts stop), and the Journal ends its
// liveness in the database, so that every lease it holds is free to
// other machines at once; if the database does not answer within
// Options.Timeout, they are free when the liveness lapses. A pool the
// Journal opened is closed; one
// given to New is not. A second Close does nothing.
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
	j.stopLiving()
	if j.ownPool {
		j.pool.Close()
	}
	return nil
}

// hold and unhold keep the set of leased claims. A claim whose life
// is over when it is held is lost at once.
func (j *Journal) hold(c *claim) {
	j.mu.Lock()
	if j.held == nil {
		j.held = make(map[*claim]struct{})
	}
	j.held[c] = struct{}{}
	over := c.life != nil && c.life.over
	j.mu.Unlock()
	if over {
		j.log.Warn("pgjournal: a lease taken as this journal's liveness ended is lost", "op", c.id, "owner", j.opt.Owner)
		c.lose()
	}
}

func (j *Journal) unhold(c *claim) {
	j.mu.Lock()
	delete(j.held, c)
	j.mu.Unlock()
}

// usable returns journal.ErrClosed after Close.
func (j *Journal) usable() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.usableLocked()
}

// usableLocked is usable with j.mu held.
func (j *Journal) usableLocked() error {
	if j.closed {
		return fmt.Errorf("pgjournal: %w", journal.ErrClosed)
	}
	return nil
}

// Namespaces returns the namespaces that hold operations in the
// Journal's database, in byte order: what a reader that found nothing in
// its own namespace may have meant.
func (j *Journal) Namespaces(ctx context.Context) ([]string, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	var names []string
	err := j.statement(ctx, func(ctx context.Context) error {
		rows, err := j.pool.Query(ctx, `SELECT DISTINCT namespace FROM idem_operations`)
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgjournal: listing namespaces: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// Stats counts a Journal's writes since it was opened.
type Stats struct {
	// Intents is the number of intents recorded: rows inserted by Begin
	// or ClaimBegin.
	Intents uint64
	// IntentCommits is the number of statements, each one commit, that
	// carried intents and committed. Concurrent Begins share one,
	// so at many callers it is well below Intents.
	IntentCommits uint64
	// Outcomes is the number of outcomes sent (Complete) in statements
	// that committed, and OutcomeCommits the number of those statements.
	Outcomes, OutcomeCommits uint64
	// ReleaseCommits is the number of statements that gave leases back
	// (Release without Complete) and committed.
	ReleaseCommits uint64
	// Lives is the number of lives the Journal started: one at
	// its first claim, and one more after each that lapsed.
	Lives uint64
	// LivenessRenewals is the number of statements that renewed its
	// liveness and succeeded: one every third of Options.Liveness,
	// whatever the number of claims.
	LivenessRenewals uint64
}

// Stats returns the Journal's counts.
func (j *Journal) Stats() Stats {
	return Stats{
		Intents:        j.intentRows.Load(),
		IntentCommits:  j.intents.statements.Load(),
		Outcomes:       j.outcomes.rows.Load(),
		OutcomeCommits: j.outcomes.statements.Load(),
		ReleaseCommits: j.releases.statements.Load(),

		Lives:            j.lives.Load(),
		LivenessRenewals: j.renewals.Load(),
	}
}

// Namespace returns the journal's namespace.
func (j *Journal) Namespace() string { return j.opt.Namespace }

// Owner returns the name this Journal gives its leases.
func (j *Journal) Owner() string { return j.opt.Owner }

// Now returns the database's time: its clock as last read (at open and
// at every claim) advanced by this machine's monotonic clock since.
func (j *Journal) Now() time.Time { return j.clock.now() }

// Lookup returns the operation with the given ID.
func (j *Journal) Lookup(ctx context.Context, id string) (journal.Operation, bool, error) {
	if err := j.usable(); err != nil {
		return journal.Operation{}, false, err
	}
	var op journal.Operation
	err := j.statement(ctx, func(ctx context.Context) error {
		rows, err := j.pool.Query(ctx, `SELECT `+operationColumns+` FROM idem_operations
			WHERE namespace = $1 AND op_id = $2`, j.opt.Namespace, id)
		if err != nil {
			return err
		}
		op, err = pgx.CollectExactlyOneRow(rows, scanOperation)
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return journal.Operation{}, false, nil
	case err != nil:
		return journal.Operation{}, false, fmt.Errorf("pgjournal: looking up %s: %w", journalkit.QuoteID(id), err)
	}
	return op, true, nil
}

// List returns the operations the listing selects, ordered by Created then
// ID; pending and expired are judged by the database's clock.
func (j *Journal) List(ctx context.Context, which journal.Listing) ([]journal.Operation, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	now := j.Now().UnixNano() // a key created key_ttl_ns or more before it: expired
	var where string
	switch which {
	case journal.ListAll:
		where = `true`
	case journal.ListPending:
		where = `state = 1 AND created_ns > $2 - key_ttl_ns`
	case journal.ListExpired:
		where = `state = 1 AND created_ns <= $2 - key_ttl_ns`
	case journal.ListCompleted:
		where = `state > 1`
	default:
		return nil, fmt.Errorf("pgjournal: listing: unknown %v", which)
	}
	args := []any{j.opt.Namespace}
	if strings.Contains(where, "$2") {
		args = append(args, now)
	}
	var ops []journal.Operation
	err := j.statement(ctx, func(ctx context.Context) error {
		rows, err := j.pool.Query(ctx, `SELECT `+operationColumns+` FROM idem_operations WHERE namespace = $1 AND `+where, args...)
		if err != nil {
			return err
		}
		ops, err = pgx.CollectRows(rows, scanOperation)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgjournal: listing %s operations: %w", which, err)
	}
	// Sorted here, not by ORDER BY: the database would order IDs by its
	// collation, and every journal orders them by their bytes.
	slices.SortFunc(ops, func(a, b journal.Operation) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return ops, nil
}

// operationColumns are the columns scanOperation reads, in its order.
const operationColumns = `op_id, op_key, fingerprint, method, url, created_ns, key_ttl_ns, state,
	completed_ns, status, flags, header, body`

// opRow holds a row of operationColumns as scanned.
type opRow struct {
	opID, method, url  string
	key                string
	fp, header, body   []byte
	created, completed int64
	keyTTL             int64
	state, flags       int16
	status             int32
}

// dest returns the scan destinations of operationColumns.
func (r *opRow) dest() []any {
	return []any{&r.opID, &r.key, &r.fp, &r.method, &r.url, &r.created, &r.keyTTL, &r.state,
		&r.completed, &r.status, &r.flags, &r.header, &r.body}
}

// operation returns the row as an Operation.
func (r *opRow) operation() (journal.Operation, error) {
	var op journal.Operation
	if len(r.fp) != len(op.Fingerprint) {
		return op, fmt.Errorf("pgjournal: operation %s: row has a %d-byte fingerprint", journalkit.QuoteID(r.opID), len(r.fp))
	}
	op.ID, op.Key, op.Method, op.URL = r.opID, r.key, r.method, r.url
	copy(op.Fingerprint[:], r.fp)
	op.Created = time.Unix(0, r.created).UTC()
	op.KeyTTL = time.Duration(r.keyTTL)
	op.State = journal.State(r.state)
	if op.State == journal.StateDone || op.State == journal.StateRejected {
		op.Completed = time.Unix(0, r.completed).UTC()
		op.Status = int(r.status)
		if len(r.header) > 0 {
			h, err := journalkit.DecodeHeader(r.header)
			if err != nil {
				return op, fmt.Errorf("pgjournal: operation %s: recorded header: %w", journalkit.QuoteID(r.opID), err)
			}
			op.Header = h
			readMarks(&op)
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
func scanOperation(row pgx.CollectableRow) (journal.Operation, error) {
	var r opRow
	if err := row.Scan(r.dest()...); err != nil {
		return journal.Operation{}, err
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
	return journalkit.EncodeHeader(h)
}

// statement runs fn with a context bounded by Options.Timeout, through
// waitRefused.
func (j *Journal) statement(ctx context.Context, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, j.opt.Timeout)
	defer cancel()
	return classify(ctx, waitRefused(sctx, j.pool, fn))
}

// waitRefused runs fn. When the server refuses fn a new connection as one
// too many (53300), nothing was sent: fn runs again after a pause, until
// ctx ends, and pool closes one of its idle connections if it holds more
// than one, so that the machines sharing a full server share its
// connections rather than the first to come keeping them all.
func waitRefused(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context) error) error {
	var pause *backoff.ExponentialBackOff
	for {
		err := fn(ctx)
		if !tooManyConnections(err) {
			return err
		}
		shed(pool)
		if pause == nil {
			pause = backoff.NewExponentialBackOff(backoff.WithInitialInterval(5*time.Millisecond),
				backoff.WithMaxInterval(200*time.Millisecond), backoff.WithMaxElapsedTime(0))
		}
		t := time.NewTimer(pause.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// shed closes one idle connection of pool, unless it is the last.
func shed(pool *pgxpool.Pool) {
	if pool.Stat().TotalConns() <= 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for i, c := range pool.AcquireAllIdle(ctx) {
		if i > 0 {
			c.Release()
			continue
		}
		conn := c.Hijack() // out of the pool: closing it frees a slot on the server
		conn.Close(ctx)
	}
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

// storedHeader is op's header as the journal stores it, with op's marks.
func storedHeader(op *journal.Operation) http.Header {
	return journalkit.StoredHeader(op.Header, journalkit.Marks{Applied: op.Applied, KeyReused: op.KeyReused,
		Settled: op.Settled, SettledNote: op.SettledNote, Unrecorded: op.Unrecorded})
}

// readMarks moves the marks stored in op's header into op's fields: the
// way every record is read, those written before the marks were fields
// among them.
func readMarks(op *journal.Operation) {
	var m journalkit.Marks
	op.Header, m = journalkit.SplitMarks(op.Header)
	op.Applied, op.KeyReused, op.Settled, op.SettledNote, op.Unrecorded = m.Applied, m.KeyReused, m.Settled, m.SettledNote, m.Unrecorded
}
