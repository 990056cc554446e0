package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// GatewayFaults injects failures into the fake payment gateway. The zero
// value injects none.
type GatewayFaults struct {
	// Failure is the fraction of captures (0 to 1) that fail with
	// ErrGatewayUnavailable before capturing anything. Default 0.
	Failure float64

	// LostResponse is the fraction of captures that capture the money and
	// then fail with ErrGatewayUnavailable, as if the answer was lost on
	// the way back. Only the gateway's own idempotency saves the retry
	// from capturing twice. Default 0.
	LostResponse float64

	// Delay makes every capture take this long, holding the caller's
	// in-flight lock meanwhile: the simplest way to observe the 409 a
	// concurrent retry gets. Default 0.
	Delay time.Duration
}

func (f GatewayFaults) validate() error {
	if !(f.Failure >= 0 && f.LostResponse >= 0 && f.Failure+f.LostResponse <= 1) {
		return fmt.Errorf("%w: gateway fault rates must be between 0 and 1 and add up to at most 1", ErrInvalidConfig)
	}
	if f.Delay < 0 {
		return fmt.Errorf("%w: negative gateway delay", ErrInvalidConfig)
	}
	return nil
}

// GatewayConfig configures a Gateway.
type GatewayConfig struct {
	// Path is the SQLite file, or the postgres:// URL, holding the gateway's
	// captures, typically the server's own database: the gateway keeps its
	// table there but writes it in its own transactions, independent of the
	// server's, as an external system would. On PostgreSQL every replica's
	// gateway shares the one table, so a capture under a key is one capture
	// whichever replica asks for it. Empty or ":memory:" keeps captures in
	// memory.
	Path string

	// Faults injects failures. Default: none.
	Faults GatewayFaults

	// Seed seeds the fault generator. Default 0.
	Seed uint64

	// BusyTimeout is SQLite's busy_timeout (unused on PostgreSQL). Default:
	// 5 seconds.
	BusyTimeout time.Duration

	// Now is the clock for capture times. Default: time.Now.
	Now func() time.Time

	// Logger receives a record per capture. Default: nil, silent.
	Logger *slog.Logger
}

// Gateway is a fake payment gateway with Stripe-like idempotency: a capture
// names an idempotency key, and a second capture under the same key returns
// the first one's charge ID without capturing again. It counts the captures
// that really happened, which is what a test of exactly-once charging
// compares against. A Gateway is safe for concurrent use.
type Gateway struct {
	cfg      GatewayConfig
	db       *store
	captures atomic.Int64
	closed   atomic.Bool

	injectedFailures atomic.Int64 // faults that fired, for Stats.Faults
	injectedLosses   atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand

	// beforeCapture, if set, runs at the start of every capture: a seam for
	// tests that need a request to stop inside the gateway call.
	beforeCapture atomic.Pointer[func(ctx context.Context)]
}

// gatewaySchema is the gateway's table: one row per real capture, keyed by
// the idempotency key the caller passed downstream.
var gatewaySchema = []string{
	`CREATE TABLE IF NOT EXISTS gateway_captures (
		key        TEXT    PRIMARY KEY,
		charge_id  TEXT    NOT NULL UNIQUE,
		amount     {{int64}} NOT NULL,
		currency   TEXT    NOT NULL,
		created_at {{int64}} NOT NULL
	)`,
}

// NewGateway opens the gateway's store, creating its table if needed.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if err := cfg.Faults.validate(); err != nil {
		return nil, err
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx := context.Background()
	// No read pool: the gateway reads once, to count its captures at start.
	db, err := openStore(ctx, cfg.Path, cfg.BusyTimeout, 0, gatewaySchema)
	if err != nil {
		return nil, fmt.Errorf("testserver: gateway: %w", err)
	}
	g := &Gateway{cfg: cfg, db: db, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9a7e_3a1_0000_0002))}
	var n int64
	if err := db.queryRow(ctx, `SELECT COUNT(*) FROM gateway_captures`).Scan(&n); err != nil {
		db.close()
		return nil, fmt.Errorf("testserver: gateway: counting captures: %w", err)
	}
	g.captures.Store(n)
	return g, nil
}

// Capture charges amount (in the currency's minor unit) under the
// idempotency key and returns the gateway's charge ID. A key seen before
// returns the charge ID it captured then and captures nothing; the same key
// with a different amount or currency is refused with ErrGatewayKeyReused.
// With faults configured it may fail with ErrGatewayUnavailable, before or
// after capturing.
func (g *Gateway) Capture(ctx context.Context, key string, amount int64, currency string) (string, error) {
	if g.closed.Load() {
		return "", ErrClosed
	}
	if hook := g.beforeCapture.Load(); hook != nil {
		(*hook)(ctx)
	}
	fail, lose := g.drawFault()
	if fail {
		g.injectedFailures.Add(1)
		g.cfg.Logger.InfoContext(ctx, "gateway fault: failing before capture", "key", key)
		return "", fmt.Errorf("%w (injected before capture)", ErrGatewayUnavailable)
	}
	if d := g.cfg.Faults.Delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("testserver: gateway: %w", ctx.Err())
		}
	}
	id, captured, err := g.capture(ctx, key, amount, currency)
	if err != nil {
		return "", err
	}
	if captured {
		g.captures.Add(1)
		g.cfg.Logger.InfoContext(ctx, "gateway captured", "key", key, "charge", id, "amount", amount, "currency", currency)
	} else {
		g.cfg.Logger.InfoContext(ctx, "gateway replayed capture", "key", key, "charge", id)
	}
	if lose {
		g.injectedLosses.Add(1)
		g.cfg.Logger.InfoContext(ctx, "gateway fault: losing the answer", "key", key, "charge", id)
		return "", fmt.Errorf("%w (injected after capture)", ErrGatewayUnavailable)
	}
	return id, nil
}

// capture runs the gateway's own transaction: find the key, or insert the
// capture under it. The PRIMARY KEY on key makes a second capture for a key
// impossible even if two callers raced; on PostgreSQL the loser of such a
// race fails to serialize, runs again and finds the winner's capture.
func (g *Gateway) capture(ctx context.Context, key string, amount int64, currency string) (id string, captured bool, err error) {
	err = g.db.inTx(ctx, func(tx *txn) error {
		var err error
		id, captured, err = g.captureIn(ctx, tx, key, amount, currency)
		return err
	})
	if err != nil {
		return "", false, err
	}
	return id, captured, nil
}

// captureIn is capture's transaction.
func (g *Gateway) captureIn(ctx context.Context, tx *txn, key string, amount int64, currency string) (id string, captured bool, err error) {
	var prevAmount int64
	var prevCurrency string
	err = tx.QueryRowContext(ctx, `SELECT charge_id, amount, currency FROM gateway_captures WHERE key = ?`, key).
		Scan(&id, &prevAmount, &prevCurrency)
	switch {
	case err == nil:
		if prevAmount != amount || prevCurrency != currency {
			return "", false, fmt.Errorf("%w: key %q captured %d %s, now asked for %d %s",
				ErrGatewayKeyReused, key, prevAmount, prevCurrency, amount, currency)
		}
		return id, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return "", false, fmt.Errorf("testserver: gateway: %w", err)
	}
	id = "gw_" + uuid.NewString()
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO gateway_captures (key, charge_id, amount, currency, created_at) VALUES (?, ?, ?, ?, ?)`,
		key, id, amount, currency, g.cfg.Now().UnixNano()); err != nil {
		return "", false, fmt.Errorf("testserver: gateway: %w", err)
	}
	return id, true, nil
}

func (g *Gateway) drawFault() (fail, lose bool) {
	f := g.cfg.Faults
	if f.Failure == 0 && f.LostResponse == 0 {
		return false, false
	}
	g.mu.Lock()
	u := g.rng.Float64()
	g.mu.Unlock()
	return u < f.Failure, u >= f.Failure && u < f.Failure+f.LostResponse
}

// injected returns how often the gateway fault of kind k fired.
func (g *Gateway) injected(k faultKind) int64 {
	switch k {
	case faultGatewayFailure:
		return g.injectedFailures.Load()
	case faultGatewayLostResponse:
		return g.injectedLosses.Load()
	}
	return 0
}

// Captures returns how many captures really happened, over the whole life
// of the gateway's store (including earlier processes on the same file):
// those in the store when the gateway opened, and those it made since.
// Replayed captures are not counted. Captures made meanwhile by other
// processes on the same database (replicas on PostgreSQL) are not seen;
// CountCaptures counts them.
func (g *Gateway) Captures() int64 { return g.captures.Load() }

// CountCaptures counts the captures in the gateway's store, whichever
// process made them: on PostgreSQL, those of every replica. After Close it
// returns ErrClosed.
func (g *Gateway) CountCaptures(ctx context.Context) (int64, error) {
	if g.closed.Load() {
		return 0, ErrClosed
	}
	var n int64
	if err := g.db.queryRow(ctx, `SELECT COUNT(*) FROM gateway_captures`).Scan(&n); err != nil {
		return 0, fmt.Errorf("testserver: gateway: counting captures: %w", err)
	}
	return n, nil
}

// Close closes the gateway's store. Captures after Close fail with
// ErrClosed.
func (g *Gateway) Close() error {
	if g.closed.Swap(true) {
		return nil
	}
	return g.db.close()
}
