package pgjournal

import (
	"time"

	"github.com/idemkit/idem/journal"
)

// LeaseDeadline returns the time by which c, a claim of a Journal that
// holds a lease, believes its lease may lapse: when Lost is closed.
func LeaseDeadline(c journal.Claim) time.Time {
	cl := c.(*claim)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.deadline
}

// GroupHooks sets, on j's group of kind ("intent" or "outcome"), a
// function called when a row queues behind a statement in flight, and
// one called before each statement with the IDs of its rows. Set them
// before j is used.
func GroupHooks(j *Journal, kind string, queued func(id string), before func(ids []string)) {
	switch kind {
	case "intent":
		j.intents.onQueue = func(in intentIn) { queued(in.id) }
		j.intents.beforeCommit = func(batch []intentIn) {
			ids := make([]string, len(batch))
			for i, in := range batch {
				ids[i] = in.id
			}
			before(ids)
		}
	case "outcome":
		j.outcomes.onQueue = func(in outcomeIn) { queued(in.id) }
		j.outcomes.beforeCommit = func(batch []outcomeIn) {
			ids := make([]string, len(batch))
			for i, in := range batch {
				ids[i] = in.id
			}
			before(ids)
		}
	default:
		panic("GroupHooks: unknown kind " + kind)
	}
}

// SharedStatements returns the SQL of each shared statement (F10) that
// reads the table, by kind ("outcome", "release"): the form for a batch
// of several rows, then the form for one.
func SharedStatements() map[string][2]string {
	return map[string][2]string{
		"outcome": {outcomeStatement.batch, outcomeStatement.one},
		"release": {releaseStatement.batch, releaseStatement.one},
	}
}

// ReadSQL is the statement a claim reads an operation's row with.
const ReadSQL = readSQL

// LeaseSQL is the statement a claim takes a free lease with.
const LeaseSQL = leaseSQL

// Held returns the number of claims whose leases j renews.
func Held(j *Journal) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.held)
}

// Shed is shed: it closes one idle connection of pool, unless it is the
// last.
var Shed = shed

// IntentSQL is the intent statement's form for one row, and DurableSQL
// the condition in it that sets synchronous_commit for its transaction.
var IntentSQL, DurableSQL = intentStatement.one, durableSQL
