package pgjournal

// Group commit.
//
// Every write of an operation's row that a caller waits for (an intent, an
// outcome, a release) goes through a group: the callers that arrive while
// the group's statement is in flight queue, and when it returns its leader
// hands the lead to the first of them, which sends one statement, and so
// one commit, for all the queued rows. There is no timer: a caller that
// finds no statement in flight leads at once and sends its row alone, as
// it would without a group. A statement that fails fails every member it
// carried, and only those: each member learns its own row's fate from the
// statement's answer (which rows it inserted or updated), and a member
// whose context ends while it is still queued leaves the queue before any
// statement carries its row, so it never has a row it does not know of.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// member is one caller's row in a group. The group's commit function
// reads in and sets err (and what else the row's statement reports in
// out); done is set before the member is woken.
type member[In, Out any] struct {
	in   In
	out  Out
	err  error
	lead bool          // handed the lead: it sends the next statement
	done bool          // its statement returned: err and out are set
	wake chan struct{} // room for one: waking never blocks the waker
}

// group is a group commit of one kind of row.
type group[In, Out any] struct {
	// commit sends one statement for batch, in one commit, and sets each
	// member's err and out. It returns the statement's error (nil when it
	// committed), for the counts.
	commit func(batch []*member[In, Out]) error

	mu      sync.Mutex
	queue   []*member[In, Out] // waiting for a statement
	leading bool               // a member leads: a statement is in flight or about to be

	statements atomic.Uint64 // statements that committed
	rows       atomic.Uint64 // rows they carried

	// onQueue, if set, is called (mu held) when a member queues behind a
	// leader; beforeCommit, before each statement, with its batch. Tests
	// set them to act at those points.
	onQueue      func(in In)
	beforeCommit func(batch []In)
}

// do queues in and returns once a statement carrying it returned: its
// error, and what the statement reported for the row. When ctx ends while
// the row is still queued, do takes it out of the queue and returns ctx's
// error; once a statement carries it, do waits for that statement, which
// Options.Timeout bounds. A ctx that has already ended queues nothing.
func (g *group[In, Out]) do(ctx context.Context, in In) (Out, error) {
	if err := ctx.Err(); err != nil {
		var zero Out
		return zero, err
	}
	m := &member[In, Out]{in: in, wake: make(chan struct{}, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, m)
	if !g.leading {
		g.leading, m.lead = true, true
	} else if g.onQueue != nil {
		g.onQueue(in)
	}
	lead := m.lead
	g.mu.Unlock()
	done := ctx.Done()
	for !lead {
		select {
		case <-m.wake:
			if m.done {
				return m.out, m.err
			}
			lead = true // woken not done: handed the lead
		case <-done:
			g.mu.Lock()
			if i := slices.Index(g.queue, m); i >= 0 && !m.lead {
				g.queue = slices.Delete(g.queue, i, i+1)
				g.mu.Unlock()
				var zero Out
				return zero, ctx.Err()
			}
			g.mu.Unlock()
			done = nil // carried, or about to lead: wait for the result
		}
	}
	g.lead(m)
	return m.out, m.err
}

// lead sends one statement for every queued member (self among them),
// wakes them, and hands the lead to the first member queued meanwhile.
func (g *group[In, Out]) lead(self *member[In, Out]) {
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	if g.beforeCommit != nil {
		ins := make([]In, len(batch))
		for i, m := range batch {
			ins[i] = m.in
		}
		g.beforeCommit(ins)
	}
	if err := g.commit(batch); err == nil {
		g.statements.Add(1)
		g.rows.Add(uint64(len(batch)))
	}
	for _, m := range batch {
		m.done = true
	}
	g.mu.Lock()
	var next *member[In, Out]
	if len(g.queue) > 0 {
		next = g.queue[0]
		next.lead = true
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	for _, m := range batch {
		if m != self {
			m.wake <- struct{}{}
		}
	}
	if next != nil {
		next.wake <- struct{}{}
	}
}

// fail sets err on every member of batch: a statement that failed carried
// none of their rows.
func fail[In, Out any](batch []*member[In, Out], err error) error {
	for _, m := range batch {
		m.err = err
	}
	return err
}
