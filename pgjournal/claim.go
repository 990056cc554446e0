package pgjournal

// The lease (F3) and the fencing token (F5).
//
// A claim is a lease on the operation's row: lease_owner, lease_until (set
// and compared by the database's clock) and fence, a counter that every
// new lease increments. Claim takes the lease only when it is free or has
// lapsed; every write the holder makes (Begin, Complete, renewals, the
// release) carries the fence it was given and changes nothing when the row
// holds another, so a holder whose lease lapsed and was taken over cannot
// overwrite what the next holder records.
//
// The holder cannot read the database's clock between its statements, so
// it keeps its own deadline by its monotonic clock: LeaseTTL after it sent
// the statement that took or last renewed the lease. The database set
// lease_until LeaseTTL after it ran that statement, which is no earlier,
// so the holder always believes its lease lapsed no later than the
// database does. When that deadline passes, Lost is closed and the client
// sends no further attempt.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
)

// Bounds of the wait for a claim held elsewhere: polls start at the first
// and double up to the second, and never sleep past the lease's end.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// Claim waits until no other Do of operation id holds it, on any machine
// sharing the journal, and takes its lease. A completed operation is
// claimed without a lease: there is nothing left to send. When ctx ends
// while another machine holds the lease, Claim returns a *idem.HeldError
// naming it (matching idem.ErrClaimed and ctx's error).
func (j *Journal) Claim(ctx context.Context, id string) (idem.Claim, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("pgjournal: claiming: %w: empty operation ID", idem.ErrInvalidOperation)
	}
	poll := firstPoll
	for {
		c, held, err := j.tryClaim(ctx, id)
		if err != nil || c != nil {
			return c, err
		}
		if held == nil { // the lease lapsed or was released meanwhile
			continue
		}
		wait := min(poll, max(held.Until.Sub(j.Now()), time.Millisecond))
		poll = min(2*poll, maxPoll)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			held.Err = ctx.Err()
			return nil, held
		case <-t.C:
		}
	}
}

// claimSQL takes the lease on an operation's row, creating the row if the
// ID is new, unless the operation is completed or its lease is held.
const claimSQL = `INSERT INTO idem_operations AS o (namespace, op_id, lease_owner, lease_until, fence)
	VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 microsecond', 1)
	ON CONFLICT (namespace, op_id) DO UPDATE
		SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, fence = o.fence + 1
		WHERE o.state < 2 AND (o.lease_until IS NULL OR o.lease_until <= clock_timestamp())
	RETURNING o.fence, clock_timestamp(), ` + operationColumns

// tryClaim makes one attempt at the lease. It returns the claim, or who
// holds the lease (nil if it lapsed meanwhile: try again), or an error.
func (j *Journal) tryClaim(ctx context.Context, id string) (*claim, *idem.HeldError, error) {
	sent := time.Now()
	var (
		c    *claim
		held *idem.HeldError
	)
	err := j.statement(ctx, func(ctx context.Context) error {
		rows, err := j.pool.Query(ctx, claimSQL, j.opt.Namespace, id, j.opt.Owner, j.opt.LeaseTTL.Microseconds())
		if err != nil {
			return err
		}
		c, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (*claim, error) {
			return j.scanClaim(row, id, sent)
		})
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Not taken: completed, or leased to another.
		rows, err = j.pool.Query(ctx, `SELECT o.fence, clock_timestamp(), `+operationColumns+`,
			o.lease_owner, o.lease_until, o.lease_until > clock_timestamp()
			FROM idem_operations o WHERE namespace = $1 AND op_id = $2`, j.opt.Namespace, id)
		if err != nil {
			return err
		}
		c, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (*claim, error) {
			var (
				owner *string
				until *time.Time
				live  *bool
			)
			c, err := j.scanClaimWith(row, id, sent, &owner, &until, &live)
			switch {
			case err != nil || c.done:
				return c, err
			case live != nil && *live && owner != nil && until != nil:
				held = &idem.HeldError{ID: id, Holder: *owner, Until: until.UTC()}
			}
			return nil, nil
		})
		if errors.Is(err, pgx.ErrNoRows) { // released and deleted meanwhile
			return nil
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("pgjournal: claiming %q: %w", id, err)
	}
	if c != nil && c.leased {
		c.start()
	}
	return c, held, nil
}

// scanClaim reads a row of claimSQL's RETURNING into a leased claim.
func (j *Journal) scanClaim(row pgx.CollectableRow, id string, sent time.Time) (*claim, error) {
	c, err := j.scanClaimWith(row, id, sent)
	if err != nil {
		return nil, err
	}
	c.leased = true
	return c, nil
}

// scanClaimWith reads the fence, the database's clock and the operation's
// columns, then extra, into a claim without a lease.
func (j *Journal) scanClaimWith(row pgx.CollectableRow, id string, sent time.Time, extra ...any) (*claim, error) {
	c := &claim{j: j, id: id, deadline: sent.Add(j.opt.LeaseTTL)}
	var (
		dbNow time.Time
		r     opRow
	)
	if err := row.Scan(append(append([]any{&c.fence, &dbNow}, r.dest()...), extra...)...); err != nil {
		return nil, err
	}
	j.clock.set(dbNow)
	c.done = r.state >= 2
	if r.state > 0 {
		op, err := r.operation()
		if err != nil {
			return nil, err
		}
		c.op, c.found = op, true
	}
	return c, nil
}

// claim is a Journal's idem.Claim.
type claim struct {
	j     *Journal
	id    string
	fence int64
	op    idem.Operation
	found bool // an intent was recorded when the claim was taken
	done  bool // the operation is completed: no lease was taken

	leased bool // holds a lease to renew and release

	began    bool // this claim recorded the intent
	released bool // Complete or Release gave the lease back

	mu       sync.Mutex
	deadline time.Time     // local monotonic time by which the lease may lapse
	lost     chan struct{} // closed when the deadline passes or the lease is taken
	stop     chan struct{} // closed by Release: stops the renewals
	wg       sync.WaitGroup
}

// start begins renewing the lease every LeaseTTL/3 until Release, and
// closing lost if the deadline passes first.
func (c *claim) start() {
	c.lost = make(chan struct{})
	c.stop = make(chan struct{})
	c.wg.Add(1)
	go c.renew()
}

// renew is the renewal loop of a leased claim.
func (c *claim) renew() {
	defer c.wg.Done()
	ttl := c.j.opt.LeaseTTL
	tick := time.NewTimer(ttl / 3)
	defer tick.Stop()
	c.mu.Lock()
	lapse := time.NewTimer(time.Until(c.deadline))
	c.mu.Unlock()
	defer lapse.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-lapse.C:
			c.j.log.Warn("pgjournal: lease lapsed before it could be renewed", "op", c.id, "owner", c.j.opt.Owner)
			close(c.lost)
			return
		case <-tick.C:
		}
		sent := time.Now()
		var n int64
		err := c.j.statement(context.Background(), func(ctx context.Context) error {
			tag, err := c.j.pool.Exec(ctx, `UPDATE idem_operations
				SET lease_until = clock_timestamp() + $4 * interval '1 microsecond'
				WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND lease_owner IS NOT NULL`,
				c.j.opt.Namespace, c.id, c.fence, ttl.Microseconds())
			n = tag.RowsAffected()
			return err
		})
		switch {
		case err != nil:
			// Try again soon; the lapse timer still runs.
			c.j.log.Debug("pgjournal: renewing a lease failed", "op", c.id, "err", err)
			tick.Reset(ttl / 10)
			continue
		case n == 0:
			c.j.log.Warn("pgjournal: lease taken over", "op", c.id, "owner", c.j.opt.Owner)
			close(c.lost)
			return
		}
		c.mu.Lock()
		c.deadline = sent.Add(ttl)
		lapse.Reset(time.Until(c.deadline))
		c.mu.Unlock()
		tick.Reset(ttl / 3)
	}
}

func (c *claim) Operation() (idem.Operation, bool) { return c.op, c.found }

func (c *claim) Lost() <-chan struct{} { return c.lost }

// errLost is the error of a write refused because the lease was lost.
func (c *claim) errLost(verb string) error {
	return fmt.Errorf("pgjournal: %s %q: %w (another machine claimed it, or the lease lapsed)", verb, c.id, idem.ErrClaimLost)
}

// Begin records the intent, if the claim still holds the lease: the
// commit is durable when Begin returns nil (F1), as PostgreSQL's commits
// are with synchronous_commit on, its default.
func (c *claim) Begin(ctx context.Context, op idem.Operation) error {
	if err := c.writable("recording the intent of", op.ID); err != nil {
		return err
	}
	if c.found {
		return fmt.Errorf("pgjournal: recording the intent of %q: %w", op.ID, idem.ErrOperationExists)
	}
	if op.Created.IsZero() {
		op.Created = c.j.Now()
	}
	if err := idem.CheckIntent(op); err != nil {
		return fmt.Errorf("pgjournal: recording the intent of %q: %w", op.ID, err)
	}
	var n int64
	err := c.j.statement(ctx, func(ctx context.Context) error {
		tag, err := c.j.pool.Exec(ctx, `UPDATE idem_operations
			SET op_key = $4, fingerprint = $5, method = $6, url = $7, created_ns = $8, state = 1
			WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state = 0 AND lease_until > clock_timestamp()`,
			c.j.opt.Namespace, c.id, c.fence, op.Key, op.Fingerprint[:], op.Method, op.URL, op.Created.UnixNano())
		n = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("pgjournal: recording the intent of %q: %w", op.ID, err)
	case n == 0:
		return c.errLost("recording the intent of")
	}
	c.began = true
	return nil
}

// Complete records the outcome, unless another machine has claimed the
// operation since (F5). It gives the lease back.
func (c *claim) Complete(ctx context.Context, op idem.Operation) error {
	if err := c.writable("recording the outcome of", op.ID); err != nil {
		return err
	}
	if !c.found && !c.began {
		return fmt.Errorf("pgjournal: recording the outcome of %q: %w", op.ID, idem.ErrNoSuchOperation)
	}
	if op.Completed.IsZero() {
		op.Completed = c.j.Now()
	}
	if err := idem.CheckOutcome(op); err != nil {
		return fmt.Errorf("pgjournal: recording the outcome of %q: %w", op.ID, err)
	}
	header, err := encodeHeader(op.Header)
	if err != nil {
		return fmt.Errorf("pgjournal: recording the outcome of %q: %w", op.ID, err)
	}
	var flags int16
	if op.BodyTruncated {
		flags |= flagBodyTruncated
	}
	if op.HeaderTruncated {
		flags |= flagHeaderTruncated
	}
	var n int64
	err = c.j.statement(ctx, func(ctx context.Context) error {
		tag, err := c.j.pool.Exec(ctx, `UPDATE idem_operations
			SET state = $4, completed_ns = $5, status = $6, flags = $7, header = $8, body = $9,
				lease_owner = NULL, lease_until = NULL
			WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state = 1 AND ($10 = '' OR op_key = $10)`,
			c.j.opt.Namespace, c.id, c.fence, int16(op.State), op.Completed.UnixNano(), op.Status, flags,
			header, op.Body, op.Key)
		n = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("pgjournal: recording the outcome of %q: %w", op.ID, err)
	case n == 0:
		return c.errLost("recording the outcome of")
	}
	c.released = true
	c.stopRenewing()
	return nil
}

// writable checks that the claim may write op's records.
func (c *claim) writable(verb, id string) error {
	switch {
	case id != c.id:
		return fmt.Errorf("pgjournal: %s %q under the claim on %q: %w", verb, id, c.id, idem.ErrInvalidOperation)
	case c.done:
		return fmt.Errorf("pgjournal: %s %q: %w: it is completed", verb, id, idem.ErrOperationExists)
	case c.released:
		return c.errLost(verb)
	}
	return nil
}

// stopRenewing ends the renewal loop and waits for it.
func (c *claim) stopRenewing() {
	if c.stop != nil {
		select {
		case <-c.stop:
		default:
			close(c.stop)
		}
		c.wg.Wait()
	}
}

// Release gives the lease back: the row of an ID whose intent was never
// recorded is deleted, any other keeps its operation with no lease. A
// release that fails (the database is unreachable) is logged; the lease
// then lapses by itself after LeaseTTL.
func (c *claim) Release() {
	if !c.leased || c.released {
		c.released = true
		return
	}
	c.released = true
	c.stopRenewing()
	err := c.j.statement(context.Background(), func(ctx context.Context) error {
		var err error
		if c.found || c.began {
			_, err = c.j.pool.Exec(ctx, `UPDATE idem_operations SET lease_owner = NULL, lease_until = NULL
				WHERE namespace = $1 AND op_id = $2 AND fence = $3`, c.j.opt.Namespace, c.id, c.fence)
		} else {
			_, err = c.j.pool.Exec(ctx, `DELETE FROM idem_operations
				WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state = 0`, c.j.opt.Namespace, c.id, c.fence)
		}
		return err
	})
	if err != nil {
		c.j.log.Warn("pgjournal: releasing a lease failed; it lapses by itself", "op", c.id, "err", err)
	}
}
