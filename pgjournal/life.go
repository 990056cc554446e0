package pgjournal

// The liveness of a Journal, apart from the leases of its
// operations.
//
// A Journal that takes a lease first starts a life: a row of idem_lives
// with a random ID, its owner's name and alive_until, set by the
// database's clock Options.Liveness ahead. One background statement
// renews it every third of Options.Liveness, whatever the number of
// claims the Journal holds, and every lease the Journal takes names the
// life (lease_life) and the fence it was taken at (lease_life_fence). A
// lease is free to another machine when its own lease_until has passed,
// as before, or when the life it names has ended: its row lapsed, was
// declared dead, or is gone. A machine killed with its operations in
// flight thus frees them Options.Liveness after its last renewal, however
// long its leases.
//
// A life that lapsed is declared dead by the claim that takes one of its
// leases, in the statement that takes the lease (leaseSQL), and its
// renewal only moves a life that is neither dead nor lapsed. Both are
// writes of the life's row, so the database orders them: a renewal that
// came first leaves the life alive to the claim, which then waits, and a
// declaration that came first refuses the renewal. No life that another
// machine judged dead is renewed; a life, once over, never comes back,
// and the Journal starts another for its next claim.
//
// The Journal keeps its own deadline for its life by its monotonic clock,
// as a claim does for its lease (localLease): nine tenths of
// Options.Liveness after it sent the statement that started or last
// renewed the life. When the deadline passes, or a renewal finds the life
// over, every claim taken under the life is lost (Lost is closed, and the
// client sends no further attempt) before any other machine may judge the
// life lapsed. A claim whose statement returns once its life is over is
// lost at once, so a lease taken under a life that lapsed on the way is
// never sent under.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// life is one life of a Journal. Its fields but id are guarded by the
// Journal's mu.
type life struct {
	id       string
	deadline time.Time   // local monotonic time after which the life may have lapsed in the database
	over     bool        // lapsed by the deadline, refused by the database, or ended by Close
	timer    *time.Timer // fires at the deadline (check)
}

// startLifeSQL starts a life, and deletes a few lives that lapsed long
// ago (no lease names them any more as held: a life that lapsed frees its
// leases whether or not its row remains).
const startLifeSQL = `WITH gone AS (
		DELETE FROM idem_lives WHERE id IN (SELECT id FROM idem_lives
			WHERE alive_until < clock_timestamp() - interval '1 hour' LIMIT 16 FOR UPDATE SKIP LOCKED))
	INSERT INTO idem_lives (id, owner, alive_until)
	SELECT $1::text, $2::text, clock_timestamp() + $3 * interval '1 microsecond' WHERE ` + durableSQL

// renewLifeSQL moves a life's end, unless it is over: lapsed, or declared
// dead by a claim that took one of its leases.
const renewLifeSQL = `UPDATE idem_lives SET alive_until = clock_timestamp() + $2 * interval '1 microsecond'
	WHERE id = $1 AND NOT dead AND alive_until > clock_timestamp() AND ` + durableSQL

// endLifeSQL ends a life at Close: every lease it holds is free at once.
const endLifeSQL = `DELETE FROM idem_lives WHERE id = $1 AND ` + durableSQL

// live returns the Journal's current life, starting one if it has none
// or its last is over.
func (j *Journal) live(ctx context.Context) (*life, error) {
	j.mu.Lock()
	l := j.life
	j.mu.Unlock()
	if l != nil && !l.isOver(j) {
		return l, nil
	}
	j.starting.Lock()
	defer j.starting.Unlock()
	j.mu.Lock()
	l = j.life
	j.mu.Unlock()
	if l != nil && !l.isOver(j) {
		return l, nil // started meanwhile
	}
	var b [16]byte
	rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
	l = &life{id: hex.EncodeToString(b[:])}
	w := j.opt.Liveness
	sent := time.Now()
	err := j.statement(ctx, func(ctx context.Context) error {
		_, err := j.pool.Exec(ctx, startLifeSQL, l.id, j.opt.Owner, w.Microseconds())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgjournal: starting this journal's liveness: %w", err)
	}
	j.lives.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, j.usableLocked()
	}
	l.deadline = sent.Add(localLease(w))
	j.life = l
	j.watch(l)
	if j.beat == nil {
		j.beat = make(chan struct{})
		j.beating.Add(1)
		go j.heartbeat()
	}
	return l, nil
}

// isOver reports whether l is over.
func (l *life) isOver(j *Journal) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return l.over
}

// watch arms l's timer for its deadline. j.mu is held.
func (j *Journal) watch(l *life) {
	l.timer = time.AfterFunc(time.Until(l.deadline), func() { j.check(l) })
}

// check ends l if its deadline has passed, and watches it again if a
// renewal moved the deadline since the timer was armed.
func (j *Journal) check(l *life) {
	j.mu.Lock()
	if l.over {
		j.mu.Unlock()
		return
	}
	if time.Now().Before(l.deadline) {
		j.watch(l)
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.end(l, "pgjournal: this journal's liveness lapsed before it could be renewed; its claims are lost")
}

// end ends l, if it is not over yet: every claim taken under it is lost.
// An empty why logs nothing (Close).
func (j *Journal) end(l *life, why string) {
	j.mu.Lock()
	if l.over {
		j.mu.Unlock()
		return
	}
	l.over = true
	if l.timer != nil {
		l.timer.Stop()
	}
	var lost []*claim
	for c := range j.held {
		if c.life == l {
			lost = append(lost, c)
		}
	}
	j.mu.Unlock()
	if why != "" {
		j.log.Warn(why, "owner", j.opt.Owner, "claims", len(lost))
	}
	for _, c := range lost {
		c.lose()
	}
}

// heartbeat renews the current life every third of Options.Liveness
// until Close, each renewal bounded by the deadline it tries to move. The
// renewals are sent a third of Liveness apart whatever each takes, so a
// database slow to answer keeps the life as long as a renewal returns
// within about half of Liveness. A renewal that fails is tried again
// sooner; one the database refuses ends the life.
//
// The renewals keep a connection of the pool to themselves, once they
// got one, unless the pool has only one: a pool that every caller is
// waiting for must not make the renewal wait behind them until the life
// lapses. A connection that failed is given back, and another taken.
func (j *Journal) heartbeat() {
	defer j.beating.Done()
	var conn *pgxpool.Conn
	keep := j.pool.Config().MaxConns > 1
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	w := j.opt.Liveness
	tick := time.NewTimer(w / 3)
	defer tick.Stop()
	for {
		select {
		case <-j.beat:
			return
		case <-tick.C:
		}
		j.mu.Lock()
		l := j.life
		over, deadline := l.over, l.deadline
		j.mu.Unlock()
		if over {
			tick.Reset(w / 3) // the next claim starts another life
			continue
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var n int64
		err := j.statement(ctx, func(ctx context.Context) error {
			if conn == nil {
				c, err := j.pool.Acquire(ctx)
				if err != nil {
					return err
				}
				conn = c
			}
			tag, err := conn.Exec(ctx, renewLifeSQL, l.id, w.Microseconds())
			n = tag.RowsAffected()
			return err
		})
		cancel()
		if conn != nil && (err != nil || !keep) {
			conn.Release()
			conn = nil
		}
		switch {
		case err != nil:
			j.log.Debug("pgjournal: renewing this journal's liveness failed", "owner", j.opt.Owner, "err", err)
			tick.Reset(w / 10)
			continue
		case n == 0:
			j.end(l, "pgjournal: this journal's liveness was declared over; its claims are lost")
			tick.Reset(w / 3)
			continue
		}
		j.renewals.Add(1)
		j.mu.Lock()
		if !l.over {
			l.deadline = sent.Add(localLease(w))
		}
		j.mu.Unlock()
		tick.Reset(max(time.Until(sent.Add(w/3)), 0))
	}
}

// stopLiving is Close's part: the heartbeat stops, the current life ends
// and its row is deleted, so that every lease taken under it is free to
// other machines at once.
func (j *Journal) stopLiving() {
	j.mu.Lock()
	beat, l := j.beat, j.life
	j.mu.Unlock()
	if beat == nil {
		return
	}
	close(beat)
	j.beating.Wait()
	j.end(l, "")
	err := j.statement(context.Background(), func(ctx context.Context) error {
		_, err := j.pool.Exec(ctx, endLifeSQL, l.id)
		return err
	})
	if err != nil {
		j.log.Warn("pgjournal: ending this journal's liveness at Close failed; its leases are free to others when it lapses",
			"owner", j.opt.Owner, "err", err)
	}
}
