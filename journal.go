package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Journal is where a Client keeps each operation's key and outcome. Three
// implement it: FileJournal (OpenJournal), one file on one machine's disk;
// the PostgreSQL journal of package pgjournal, shared by every machine that
// opens the same database and namespace; and, when Config.Journal is nil,
// the Client's own memory. Every method is safe for concurrent use.
//
// A Client uses a Journal in one pattern (DESIGN.md's rules, cited beside
// each step, say why it is where it is):
//
//	claim := Claim(ctx, id)         // one Do of id at a time, everywhere (C11, F3)
//	op, ok := claim.Operation()     // resume, replay, or...
//	claim.Begin(ctx, op)            // ...journal a new intent, durable before sending (C2, F1)
//	claim.Complete(ctx, op)         // record the outcome (C3), fenced (F5)
//	claim.Release()
type Journal interface {
	// Claim waits until no other Do of operation id holds it, in this
	// process or, for a shared journal, on any machine, and then returns
	// the claim on it, which the caller must Release. When ctx ends first,
	// Claim returns an error matching ctx's error; for a shared journal, a
	// *HeldError that names the holder. A journal that cannot be reached
	// returns an error matching ErrJournalUnavailable.
	Claim(ctx context.Context, id string) (Claim, error)

	// Lookup returns what the journal holds for operation id, without
	// claiming it.
	Lookup(ctx context.Context, id string) (Operation, bool, error)

	// List returns the operations the listing selects, ordered by Created
	// time and then by ID (J8).
	List(ctx context.Context, which Listing) ([]Operation, error)

	// KeyTTL is how long a key lives on the server: a pending operation
	// older than it is expired (C6). It is the default of Config.KeyTTL.
	KeyTTL() time.Duration

	// Now is the journal's clock, by which keys are minted and judged
	// expired: the Client's when Config.Now is nil. A shared journal's
	// clock is its database's (F4), so machines whose clocks disagree
	// still agree on which keys have expired.
	Now() time.Time
}

// Claim is the right to run one operation, from Journal.Claim until
// Release. Its methods are not safe for concurrent use: one Do holds it.
type Claim interface {
	// Operation returns what the journal held for the operation when the
	// claim was taken, and false if it held nothing; after Begin, what
	// Begin recorded or (see Begin) found.
	Operation() (Operation, bool)

	// Begin journals a new operation's intent (Operation with State
	// Pending), durably: when Begin returns nil, a crash of this machine
	// (or of the database) cannot lose it (C2, F1). An operation is never
	// sent before its Begin returned nil. Begin refuses an ID that already
	// has an intent with an error matching ErrOperationExists. A shared
	// journal may find that another machine began the ID after the claim
	// was taken: its Begin then waits for that machine as Claim waits,
	// takes the operation over, and returns ErrOperationExists with the
	// operation the other machine began in Operation.
	Begin(ctx context.Context, op Operation) error

	// Complete records the outcome of the claimed operation (State Done or
	// Rejected, with Key its journaled key). It may return before the
	// record is durable (C3). A claim that lapsed is refused with an error
	// matching ErrClaimLost, so that it never overwrites what the next
	// holder recorded (F5).
	Complete(ctx context.Context, op Operation) error

	// Lost returns a channel that is closed if the claim lapses before
	// Release (a shared journal's lease that could not be renewed), or nil
	// for a claim that cannot lapse. No attempt is sent after it is closed.
	Lost() <-chan struct{}

	// Release ends the claim. A second Release does nothing.
	Release()
}

// Listing selects the operations Journal.List returns.
type Listing uint8

// The listings of a journal (J8).
const (
	// ListAll: every operation the journal holds.
	ListAll Listing = iota + 1
	// ListPending: the pending operations whose key has not expired; the
	// ones a batch may resume.
	ListPending
	// ListExpired: the pending operations whose key has outlived KeyTTL.
	// Sending them again could apply them twice, so a person must
	// reconcile them; a journal never drops them on its own.
	ListExpired
	// ListCompleted: the operations whose outcome is recorded, Done or
	// Rejected.
	ListCompleted
)

// String returns "all", "pending", "expired" or "completed".
func (l Listing) String() string {
	switch l {
	case ListAll:
		return "all"
	case ListPending:
		return "pending"
	case ListExpired:
		return "expired"
	case ListCompleted:
		return "completed"
	}
	return fmt.Sprintf("Listing(%d)", uint8(l))
}

// Selects reports whether the listing selects op at now, for a journal
// whose keys live ttl.
func (l Listing) Selects(op Operation, now time.Time, ttl time.Duration) bool {
	switch l {
	case ListAll:
		return true
	case ListPending:
		return op.State == StatePending && !op.Expired(now, ttl)
	case ListExpired:
		return op.Expired(now, ttl)
	case ListCompleted:
		return op.State.final()
	}
	return false
}

// Errors of journals shared by many machines (the F rules).
var (
	// ErrJournalUnavailable: the journal's database could not be reached
	// (or did not answer in time). Nothing was sent when Do returns it
	// before an attempt (F6); once the database answers again, so does
	// the journal.
	ErrJournalUnavailable = errors.New("idem: journal unavailable")

	// ErrClaimLost: the claim on an operation lapsed while it was held (a
	// lease not renewed in time, so another machine may have taken the
	// operation over). Attempts stop, and nothing the lapsed holder writes
	// is recorded (F5); the operation stays pending under its key.
	ErrClaimLost = errors.New("idem: claim on operation lost")

	// ErrClaimed matches a *HeldError.
	ErrClaimed = errors.New("idem: operation claimed elsewhere")
)

// HeldError is returned by Journal.Claim (and so by Do) when the caller's
// context ended while another machine held the operation's claim.
type HeldError struct {
	// ID is the operation's ID.
	ID string
	// Holder names the machine that held the claim, as it named itself
	// (pgjournal.Options.Owner).
	Holder string
	// Until is when the holder's lease lapses unless it is renewed, by the
	// journal's clock.
	Until time.Time
	// Err is why waiting stopped: the context's error.
	Err error
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("idem: operation %q is being run by %s (lease until %s): %v",
		e.ID, e.Holder, e.Until.UTC().Format(time.RFC3339Nano), e.Err)
}

// Is reports whether target is ErrClaimed.
func (e *HeldError) Is(target error) bool { return target == ErrClaimed }

// Unwrap returns Err.
func (e *HeldError) Unwrap() error { return e.Err }

// CheckIntent returns why a journal refuses op as an intent (Claim.Begin),
// or nil: an error matching ErrInvalidOperation for an empty or over-long ID
// or key, a state other than Pending, outcome fields set, or a Created time
// outside what a journal can store. Every Journal applies it.
func CheckIntent(op Operation) error { return checkIntent(&op) }

// CheckOutcome returns why a journal refuses op as an outcome
// (Claim.Complete), or nil: an error matching ErrInvalidOperation for a
// state other than Done or Rejected, a status outside 0..999, a body kept
// although marked truncated, or a time outside what a journal can store.
// Every Journal applies it.
func CheckOutcome(op Operation) error { return checkCompletion(&op) }
