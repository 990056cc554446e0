package pgjournal

// The lease and the fencing token.
//
// A claim is a lease on the operation's row: lease_owner, lease_until (set
// and compared by the database's clock) and fence, a counter that every
// new lease increments. Claim reads the row and takes the lease only when
// it is free or has lapsed; an ID with no row has no lease to take, and
// Begin inserts the row with the intent and the lease in one commit, which
// at most one machine wins (the others wait for its lease, as Claim
// would); ClaimBegin does both without reading first, and the commit may
// be shared with other rows (F10, group.go), each with its own lease. Every write the holder makes (Complete, renewals, the release)
// carries the fence it was given and changes nothing when the row holds
// another, so a holder whose lease lapsed and was taken over cannot
// overwrite what the next holder records.
//
// The holder cannot read the database's clock between its statements, so
// it keeps its own deadline by its monotonic clock: nine tenths of LeaseTTL
// after it sent the statement that took or last renewed the lease
// (localLease). The database set lease_until LeaseTTL after it ran that
// statement, which is no earlier, so the holder always believes its lease
// lapsed a tenth of LeaseTTL before the database does. When that deadline passes, Lost is closed and the client
// sends no further attempt.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
	"github.com/jackc/pgx/v5"
)

// localLease is how long after sending the statement that took or renewed
// a lease the holder believes it holds it: a tenth less than the database
// grants, so that an attempt the holder starts just before its deadline
// reaches the server before another machine can have taken the lease, and
// so that a machine's clock running a little fast against the database's
// cannot make it outlive its lease.
func localLease(ttl time.Duration) time.Duration { return ttl - ttl/10 }

// Bounds of the wait for a claim held elsewhere: polls start at the first
// and double up to the second, and never sleep past the lease's end.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// Claim waits until no other Do of operation id holds it, in this process
// or on any machine sharing the journal, and takes its lease. A completed
// operation is claimed without a lease: there is nothing left to send. An
// ID the journal does not hold is claimed without a lease too: Begin takes
// it with the intent, in one commit (see Begin). When ctx ends while
// another machine holds the lease, Claim returns a *journal.HeldError naming
// it (matching journal.ErrClaimed and ctx's error). An operation ID must be
// PostgreSQL text (valid UTF-8 without NUL bytes; the file journal takes
// any bytes) of 1 to MaxIDLen bytes; another is refused with
// journal.ErrInvalidOperation before anything is sent to the database.
func (j *Journal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	return j.claim(ctx, id, true)
}

// TryClaim is Claim without the wait: when another Do of id holds it, in
// this process or on another machine, it returns at once a
// *journal.HeldError (matching journal.ErrClaimed) with a nil Err; one that
// another machine holds names it and its lease's end.
func (j *Journal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	return j.claim(ctx, id, false)
}

// ClaimBegin is Claim of op.ID followed by Begin of op, in one step
// (journal.ClaimBeginner): it inserts the intent with the lease in one
// statement, shared with concurrent Begins, without reading the row
// first. When the journal holds the ID already, the insert takes nothing:
// a completed operation is reported by that same statement, and claimed
// with no second round trip; a pending one ClaimBegin claims as Claim
// does, waiting for another machine's lease within ctx. The claim's
// Operation then returns the operation the journal held, not op. The
// idem.Client calls it for every Do of an operation ID: a new operation,
// and the replay of a completed one, cost one round trip (for a new one,
// a share of one commit) before the first byte.
func (j *Journal) ClaimBegin(ctx context.Context, op journal.Operation) (journal.Claim, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := checkID(op.ID); err != nil {
		return nil, fmt.Errorf("pgjournal: claiming: %w", err)
	}
	unlock, err := j.running.Lock(ctx, op.ID)
	if err != nil {
		return nil, err
	}
	c := &claim{j: j, id: op.ID, unlock: unlock, wait: true, state: stateNew}
	for {
		err := c.Begin(ctx, op)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, journal.ErrOperationExists) && c.state == stateNew:
			continue // the row was there, and was forgotten since: insert again
		case errors.Is(err, journal.ErrOperationExists) && c.found:
			return c, nil // what the journal held, claimed
		}
		unlock()
		return nil, err
	}
}

// claim takes the claim on id, waiting for it within ctx or, unless wait,
// not at all.
func (j *Journal) claim(ctx context.Context, id string, wait bool) (journal.Claim, error) {
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("pgjournal: claiming: %w", err)
	}
	var unlock func()
	if wait {
		var err error
		if unlock, err = j.running.Lock(ctx, id); err != nil {
			return nil, err
		}
	} else if unlock = j.running.TryLock(id); unlock == nil {
		return nil, &journal.HeldError{ID: id, Holder: j.opt.Owner}
	}
	c := &claim{j: j, id: id, unlock: unlock, wait: wait}
	if err := c.acquire(ctx, wait); err != nil {
		unlock()
		return nil, err
	}
	return c, nil
}

// acquire waits until the operation's lease is free, then takes it (or,
// for a new or completed operation, notes that there is none to take).
// Unless wait, a lease held elsewhere ends it at once with the holder.
// A wait whose context ends is the last holder seen, whether it
// ends in a sleep or in the read that looks again. One that ends as it
// takes a lease it found free is that statement's error: the holder is
// gone, and the lease may be this Journal's until it lapses.
func (c *claim) acquire(ctx context.Context, wait bool) error {
	poll := firstPoll
	var last *journal.HeldError
	for {
		held, err := c.try(ctx)
		if err != nil && last != nil && !c.leasing && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			last.Err = ctx.Err()
			return last
		}
		if err != nil || held == nil && c.state != stateUnknown {
			return err
		}
		if held == nil { // the row changed between two statements: look again
			continue
		}
		if !wait {
			return held
		}
		last = held
		sleep := min(poll, max(held.Until.Sub(c.j.Now()), time.Millisecond))
		poll = min(2*poll, maxPoll)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			held.Err = ctx.Err()
			return held
		case <-t.C:
		}
	}
}

// readSQL reads an operation's row, its lease, the life the lease was
// taken under and the database's clock. The lease ends at its
// lease_until, or at its life's end if that is sooner: a life declared
// dead, or gone, has ended. A life is the lease's only when the lease
// was taken at the fence the row holds: a lease taken since by a writer
// that does not name lives (a previous release) is judged by its
// lease_until alone.
const readSQL = `SELECT fence, clock_timestamp(), ` + operationColumns + `,
	lease_owner, lease_end, lease_end > clock_timestamp(), life
	FROM (SELECT *, CASE WHEN lease_life_fence = fence THEN lease_life END AS life,
		CASE WHEN lease_until IS NOT NULL AND lease_life IS NOT NULL AND lease_life_fence = fence
			THEN LEAST(lease_until, COALESCE((SELECT l.alive_until FROM idem_lives AS l
				WHERE l.id = lease_life AND NOT l.dead), 'epoch'))
			ELSE lease_until END AS lease_end
		FROM idem_operations WHERE namespace = $1 AND op_id = $2) AS o`

// leaseSQL takes the lease on a row read with fence $3, under this
// Journal's life $8, unless the row changed since or its lease is held:
// its lease_until is ahead, it is not this Journal's release that failed
// (fence $6, F8), and the life it was taken under, $7 as read, is alive.
// A life that lapsed is declared dead here, by the statement that frees
// its lease, and one declared dead or gone has ended; the
// declaration, a write of the life's row, is ordered with the life's
// renewal by the database.
const leaseSQL = `WITH dead AS (
		UPDATE idem_lives SET dead = true
		WHERE id = $7::text AND NOT dead AND alive_until <= clock_timestamp() AND ` + durableSQL + `
		RETURNING id)
	UPDATE idem_operations
	SET lease_owner = $4, lease_until = clock_timestamp() + $5 * interval '1 microsecond', fence = fence + 1,
		lease_life = $8, lease_life_fence = fence + 1
	WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state < 2 AND ` + durableSQL + `
		AND (lease_until IS NULL OR lease_until <= clock_timestamp() OR (lease_owner = $4 AND fence = $6)
			OR lease_life IS NOT NULL AND lease_life_fence = fence AND (lease_life IN (SELECT id FROM dead)
				OR NOT EXISTS (SELECT 1 FROM idem_lives AS l WHERE l.id = lease_life AND NOT l.dead)))
	RETURNING fence, clock_timestamp(), ` + operationColumns

// try makes one attempt: it reads the row and, if the operation may be
// sent and its lease is free, takes the lease. It returns who holds the
// lease when another does; c.state is stateUnknown after an attempt that
// must be made again.
//
// A lease this Journal holds in the database with no claim to renew it
// (its release failed: the database was unreachable) is free to this
// Journal: the in-process lock on the ID, which the claim holds, says
// no other claim of this Journal holds it, and the fence the release left
// says no other machine took the lease since. Matching on the fence as well
// as the owner keeps two Journals given one Options.Owner apart.
func (c *claim) try(ctx context.Context) (*journal.HeldError, error) {
	j := c.j
	c.state, c.leasing = stateUnknown, false
	kept := j.keptFence(c.id)
	var held *journal.HeldError
	err := j.statement(ctx, func(ctx context.Context) error {
		rows, err := j.pool.Query(ctx, readSQL, j.opt.Namespace, c.id)
		if err != nil {
			return err
		}
		var (
			fence  int64
			owner  *string
			until  *time.Time
			live   *bool
			holder *string // the life the lease was taken under
		)
		_, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (bool, error) {
			return true, c.scan(row, &fence, &owner, &until, &live, &holder)
		})
		if err == nil && kept != 0 && (c.done || fence != kept) {
			j.forgetKept(c.id) // released by its lapse, and taken or completed since
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			j.forgetKept(c.id)
			c.state = stateNew // Begin takes the lease with the intent
			return nil
		case err != nil:
			return err
		case c.done:
			c.state = stateCompleted
			return nil
		case live != nil && *live && owner != nil && until != nil && !(*owner == j.opt.Owner && fence == kept):
			held = &journal.HeldError{ID: c.id, Holder: *owner, Until: until.UTC()}
			return nil
		}
		l, err := j.live(ctx)
		if err != nil {
			return err
		}
		sent := time.Now()
		c.leasing = true
		rows, err = j.pool.Query(ctx, leaseSQL, j.opt.Namespace, c.id, fence, j.opt.Owner, j.opt.LeaseTTL.Microseconds(), kept,
			holder, l.id)
		if err != nil {
			return err
		}
		_, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (bool, error) {
			return true, c.scan(row, &c.fence)
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows): // taken or changed meanwhile
			return nil
		case err != nil:
			return err
		}
		j.forgetKept(c.id)
		c.state, c.life = stateLeased, l
		c.lease(sent)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgjournal: claiming %s: %w", journalkit.QuoteID(c.id), err)
	}
	return held, nil
}

// keep notes the lease on id, fence fence, that a failed release left in
// the database; keptFence returns it, or 0 (fences start at 1), and
// forgetKept drops it.
func (j *Journal) keep(id string, fence int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.kept == nil {
		j.kept = make(map[string]int64)
	}
	j.kept[id] = fence
}

func (j *Journal) keptFence(id string) int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.kept[id]
}

func (j *Journal) forgetKept(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.kept, id)
}

// scan reads a row that starts with the fence, the database's clock and
// the operation's columns, then extra: it sets the clock, and what the
// claim knows of the operation.
func (c *claim) scan(row pgx.CollectableRow, fence *int64, extra ...any) error {
	var (
		dbNow time.Time
		r     opRow
	)
	if err := row.Scan(append(append([]any{fence, &dbNow}, r.dest()...), extra...)...); err != nil {
		return err
	}
	c.j.clock.set(dbNow)
	return c.settle(&r)
}

// settle sets what the claim knows of the operation from its row.
func (c *claim) settle(r *opRow) error {
	c.done = r.state >= 2
	op, err := r.operation()
	if err != nil {
		return err
	}
	c.op, c.found = op, true
	return nil
}

// The states of a claim.
const (
	stateUnknown   = iota // acquire has not settled
	stateNew              // no row: Begin takes the lease with the intent
	stateLeased           // the claim holds the lease, fence c.fence
	stateCompleted        // the operation is completed: no lease
	stateReleased         // Complete or Release gave the lease back
)

// claim is a Journal's journal.Claim.
type claim struct {
	j      *Journal
	id     string
	unlock func() // the in-process lock on id
	wait   bool   // taken by Claim, which waits for a lease held elsewhere; false for TryClaim

	state   int
	leasing bool // try's last attempt sent the statement that takes the lease
	fence   int64
	life    *life // the Journal's life the lease was taken under
	op      journal.Operation
	found   bool // an intent is recorded (Operation's second result)
	done    bool // the operation is completed

	mu       sync.Mutex
	deadline time.Time   // local monotonic time by which the lease may lapse
	lapse    *time.Timer // closes lost at the deadline

	lost     chan struct{} // closed when the deadline passes or the lease is taken
	loseOnce sync.Once
	stop     chan struct{} // closed when the lease is given back: stops the renewals
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// lease starts keeping the lease taken by a statement sent at sent: a
// timer closes lost when the deadline passes, whatever the renewals are
// doing, and a loop renews the lease every LeaseTTL/3 until it is given
// back, each renewal bounded by the deadline it tries to move.
func (c *claim) lease(sent time.Time) {
	c.lost = make(chan struct{})
	c.stop = make(chan struct{})
	c.deadline = sent.Add(localLease(c.j.opt.LeaseTTL))
	c.lapse = time.AfterFunc(time.Until(c.deadline), func() {
		c.j.log.Warn("pgjournal: lease lapsed before it could be renewed", "op", c.id, "owner", c.j.opt.Owner)
		c.lose()
	})
	c.j.hold(c)
	c.wg.Add(1)
	go c.renew()
}

// lose closes lost, once.
func (c *claim) lose() { c.loseOnce.Do(func() { close(c.lost) }) }

// renew is the renewal loop of a leased claim.
func (c *claim) renew() {
	defer c.wg.Done()
	ttl := c.j.opt.LeaseTTL
	tick := time.NewTimer(ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.lost:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		deadline := c.deadline
		c.mu.Unlock()
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var n int64
		err := c.j.statement(ctx, func(ctx context.Context) error {
			tag, err := c.j.pool.Exec(ctx, `UPDATE idem_operations
				SET lease_until = clock_timestamp() + $4 * interval '1 microsecond'
				WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND lease_owner IS NOT NULL AND `+durableSQL,
				c.j.opt.Namespace, c.id, c.fence, ttl.Microseconds())
			n = tag.RowsAffected()
			return err
		})
		cancel()
		select {
		case <-c.stop: // given back meanwhile: whatever the renewal found is moot
			return
		default:
		}
		switch {
		case err != nil:
			// Try again soon; the lapse timer still runs.
			c.j.log.Debug("pgjournal: renewing a lease failed", "op", c.id, "err", err)
			tick.Reset(ttl / 10)
			continue
		case n == 0:
			c.j.log.Warn("pgjournal: lease taken over", "op", c.id, "owner", c.j.opt.Owner)
			c.lose()
			return
		}
		c.mu.Lock()
		c.deadline = sent.Add(localLease(ttl))
		if c.lapse.Stop() { // not fired yet: move it
			c.lapse.Reset(time.Until(c.deadline))
		}
		c.mu.Unlock()
		tick.Reset(ttl / 3)
	}
}

func (c *claim) Operation() (journal.Operation, bool) { return c.op, c.found }

func (c *claim) Lost() <-chan struct{} { return c.lost }

// errLost is the error of a write refused because the lease was lost.
func (c *claim) errLost(verb string) error {
	return fmt.Errorf("pgjournal: %s %s: %w (another machine claimed it, or the lease lapsed)", verb, journalkit.QuoteID(c.id), journal.ErrClaimLost)
}

// Begin records the intent: the commit is durable when Begin returns nil,
// as PostgreSQL's commits are with synchronous_commit on, its
// default. For a new ID, the same commit inserts the row and takes its
// lease. If another machine inserted it first, Begin waits for that
// machine's lease as Claim does, takes it, and returns an error matching
// journal.ErrOperationExists; Operation then returns what the other machine
// began, which this claim now holds. Under a claim taken by TryClaim,
// Begin does not wait either: it returns a *journal.HeldError while the other
// machine holds the lease.
func (c *claim) Begin(ctx context.Context, op journal.Operation) error {
	if err := c.writable("recording the intent of", op.ID); err != nil {
		return err
	}
	if c.state != stateNew {
		return fmt.Errorf("pgjournal: recording the intent of %s: %w", journalkit.QuoteID(op.ID), journal.ErrOperationExists)
	}
	if op.Created.IsZero() {
		op.Created = c.j.Now()
	}
	if err := journal.CheckIntent(op); err != nil {
		return fmt.Errorf("pgjournal: recording the intent of %s: %w", journalkit.QuoteID(op.ID), err)
	}
	// The row rides the group's next statement with the rows of
	// concurrent Begins: one round trip and one commit for all.
	l, err := c.j.live(ctx)
	if err != nil {
		return fmt.Errorf("pgjournal: recording the intent of %s: %w", journalkit.QuoteID(op.ID), err)
	}
	out, err := c.j.intents.do(ctx, intentIn{id: c.id, op: op, life: l})
	switch {
	case err != nil:
		return fmt.Errorf("pgjournal: recording the intent of %s: %w", journalkit.QuoteID(op.ID), err)
	case out.done != nil:
		// The journal holds the operation, completed: the statement
		// that lost to it reported it.
		c.j.clock.set(out.now)
		if err := c.settle(out.done); err != nil {
			return err
		}
		c.j.forgetKept(c.id)
		c.state = stateCompleted
		return fmt.Errorf("pgjournal: recording the intent of %s: it is completed: %w", journalkit.QuoteID(op.ID), journal.ErrOperationExists)
	case !out.won:
		// Another machine began the operation since the claim read it.
		if err := c.acquire(ctx, c.wait); err != nil {
			return err
		}
		return fmt.Errorf("pgjournal: recording the intent of %s: another machine began it first: %w", journalkit.QuoteID(op.ID), journal.ErrOperationExists)
	}
	sent := out.sent
	c.state, c.fence, c.life = stateLeased, 1, l
	c.lease(sent)
	c.op, c.found = op, true
	return nil
}

// Complete records the outcome, unless another machine has claimed the
// operation since. It gives the lease back.
func (c *claim) Complete(ctx context.Context, op journal.Operation) error {
	if err := c.writable("recording the outcome of", op.ID); err != nil {
		return err
	}
	if !c.found {
		return fmt.Errorf("pgjournal: recording the outcome of %s: %w", journalkit.QuoteID(op.ID), journal.ErrNoSuchOperation)
	}
	if op.Completed.IsZero() {
		op.Completed = c.j.Now()
	}
	if err := journal.CheckOutcome(op); err != nil {
		return fmt.Errorf("pgjournal: recording the outcome of %s: %w", journalkit.QuoteID(op.ID), err)
	}
	header := encodeHeader(storedHeader(&op))
	var flags int16
	if op.BodyTruncated {
		flags |= flagBodyTruncated
	}
	if op.HeaderTruncated {
		flags |= flagHeaderTruncated
	}
	// The outcome rides the group's next statement; Complete
	// waits for it, so that when Do returns the outcome is committed and
	// the lease given back, on every machine's view of the row.
	took, err := c.j.outcomes.do(ctx, outcomeIn{id: c.id, fence: c.fence, op: op, header: header, flags: flags})
	switch {
	case err != nil:
		return fmt.Errorf("pgjournal: recording the outcome of %s: %w", journalkit.QuoteID(op.ID), err)
	case !took:
		return c.errLost("recording the outcome of")
	}
	c.state = stateReleased
	c.stopRenewing()
	return nil
}

// writable checks that the claim may write op's records.
func (c *claim) writable(verb, id string) error {
	if err := c.j.usable(); err != nil {
		return err
	}
	switch {
	case id != c.id:
		return fmt.Errorf("pgjournal: %s %s under the claim on %s: %w", verb, journalkit.QuoteID(id), journalkit.QuoteID(c.id), journal.ErrInvalidOperation)
	case c.state == stateCompleted:
		return fmt.Errorf("pgjournal: %s %s: %w: it is completed", verb, journalkit.QuoteID(id), journal.ErrOperationExists)
	case c.state == stateReleased:
		return c.errLost(verb)
	}
	return nil
}

// stopRenewing ends the renewal loop and the lapse timer, and waits for
// the loop.
func (c *claim) stopRenewing() {
	if c.stop == nil {
		return
	}
	c.stopOnce.Do(func() {
		close(c.stop)
		c.mu.Lock()
		c.lapse.Stop()
		c.mu.Unlock()
		c.j.unhold(c)
	})
	c.wg.Wait()
}

// abandon is what Journal.Close does to a claim still leased: no more
// renewals, and lost, so that its attempts stop; the lease lapses in the
// database by itself.
func (c *claim) abandon() {
	c.stopRenewing()
	c.lose()
}

// Release gives the lease back, if the claim holds one; the operation
// stays, pending, with no lease. A release that fails (the database is
// unreachable) is logged; the lease then lapses by itself after LeaseTTL
// for other machines, and this Journal's next claim of the ID takes it
// back at once. Then it unlocks the ID for this process's other Do
// calls.
func (c *claim) Release() {
	if c.unlock == nil {
		return
	}
	defer func() { c.unlock(); c.unlock = nil }()
	if c.state != stateLeased {
		c.state = stateReleased
		return
	}
	c.state = stateReleased
	c.stopRenewing()
	if _, err := c.j.releases.do(context.Background(), releaseIn{id: c.id, fence: c.fence}); err != nil {
		c.j.log.Warn("pgjournal: releasing a lease failed; this Journal takes it back at its next claim, others when it lapses",
			"op", c.id, "err", err)
		c.j.keep(c.id, c.fence)
	}
}
