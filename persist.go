package idem

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Journal is where a Client keeps each operation's key and outcome:
// filejournal.Journal, the PostgreSQL journal of package pgjournal, or, when
// Config.Journal is nil, the Client's own memory. Journals in the package
// documentation says how a Client uses one. Every method is safe for
// concurrent use.
type Journal interface {
	// Claim waits until no other Do of operation id holds it, in this
	// process or, for a shared journal, on any machine, and then returns
	// the claim on it, which the caller must Release. When ctx ends first,
	// Claim returns an error matching ctx's error; for a shared journal, a
	// *HeldError that names the holder. A journal that cannot be reached
	// returns an error matching ErrJournalUnavailable.
	Claim(ctx context.Context, id string) (Claim, error)

	// TryClaim is Claim without the wait: when another Do holds operation
	// id, in this process or on another machine, it returns at once a
	// *HeldError (matching ErrClaimed) whose Err is nil. A batch uses it to
	// take other work rather than wait for it.
	TryClaim(ctx context.Context, id string) (Claim, error)

	// Lookup returns what the journal holds for operation id, without
	// claiming it.
	Lookup(ctx context.Context, id string) (Operation, bool, error)

	// List returns the operations the listing selects, ordered by Created
	// time and then by ID.
	List(ctx context.Context, which Listing) ([]Operation, error)

	// KeyTTL is how long the journal takes a key to live on the server,
	// for its listings (a pending operation older than it is expired) and
	// its compaction: a step of Config.KeyTTL's default.
	KeyTTL() time.Duration

	// Now is the journal's clock, by which keys are minted and judged
	// expired: the Client's when Config.Now is nil. A shared journal's
	// clock is its database's, so machines whose clocks disagree
	// still agree on which keys have expired.
	Now() time.Time
}

// ClaimBeginner is a Journal that can claim an operation and journal a new
// one's intent in one step, as a shared journal does in one statement
// (pgjournal.Journal). A Client whose Journal is one uses it for every Do
// of an operation ID, minting the key first.
type ClaimBeginner interface {
	// ClaimBegin is Claim of op.ID followed, when the journal holds
	// nothing for it, by Begin of op (a new operation's intent, as Begin
	// takes it). The claim's Operation returns op when its intent was
	// journaled, and otherwise what the journal held, as Begin's loser of
	// a race finds it. Errors are Claim's and Begin's.
	ClaimBegin(ctx context.Context, op Operation) (Claim, error)
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
	// (or of the database) cannot lose it. An operation is never
	// sent before its Begin returned nil. Begin refuses an ID that already
	// has an intent with an error matching ErrOperationExists. A shared
	// journal may find that another machine began the ID after the claim
	// was taken: its Begin then waits for that machine as Claim waits,
	// takes the operation over, and returns ErrOperationExists with the
	// operation the other machine began in Operation; under a claim taken
	// by TryClaim, it returns the *HeldError TryClaim would have.
	Begin(ctx context.Context, op Operation) error

	// Complete records the outcome of the claimed operation (State Done or
	// Rejected, with Key its journaled key). It may return before the
	// record is durable. A claim that lapsed is refused with an error
	// matching ErrClaimLost, so that it never overwrites what the next
	// holder recorded.
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

// The listings of a journal.
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

// State is where an operation stands in the journal.
type State uint8

// The states of an operation. The zero State is not valid.
const (
	// Pending: the intent is recorded; no final outcome is known. The
	// operation may or may not have reached the server.
	StatePending State = 1
	// Done: a final response was received and recorded.
	StateDone State = 2
	// Rejected: the server answered with a response that is not retried;
	// it did not apply the operation.
	StateRejected State = 3
)

// String returns "pending", "done" or "rejected", or "State(n)" for a value
// that is none of them.
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateDone:
		return "done"
	case StateRejected:
		return "rejected"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// final reports whether s is an outcome: Done or Rejected.
func (s State) final() bool { return s == StateDone || s == StateRejected }

// Operation is what the journal knows of one operation.
//
// Times are stored as Unix nanoseconds and read back in UTC, so an Operation
// read from the journal (in this process or after reopening) carries its
// times in UTC without a monotonic reading. A header with no names, a name
// with no values and an empty body all read back as nil.
type Operation struct {
	// ID is the caller's operation ID: 1 to 4096 bytes.
	ID string
	// Key is the Idempotency-Key minted for the operation: 1 to 4096 bytes.
	Key string
	// Fingerprint identifies the request the operation sends.
	Fingerprint Fingerprint
	// Method and URL are the request's, for people reading the journal.
	Method, URL string
	// Created is when the key was minted. Begin uses the journal's clock
	// when it is zero.
	Created time.Time
	// State is Pending after Begin, Done or Rejected after Complete.
	State State

	// The outcome, set once State is Done or Rejected.

	// Completed is when the outcome was recorded. Complete uses the
	// journal's clock when it is zero.
	Completed time.Time
	// Status is the response status code, 0 to 999.
	Status int
	// Header is the response header as recorded.
	Header http.Header
	// Body is the response body, up to the client's recording limit.
	Body []byte
	// BodyTruncated says the body is not kept, because it was larger than
	// the limit or compaction summarized the operation: Body is nil then.
	BodyTruncated bool
	// HeaderTruncated says some header fields are not kept, because the
	// header was larger than the client's limit (Config.MaxRecordedHeader)
	// or compaction summarized the operation.
	HeaderTruncated bool
	// Summarized says compaction kept only a summary of the operation
	// once its outcome was KeyTTL old: ID, key, fingerprint, state and
	// status, without the header and body (see package filejournal).
	Summarized bool
}

// Expired reports whether o is pending and its key is at least ttl old at
// now: the server has forgotten the key, so sending the operation again
// could apply it twice.
func (o Operation) Expired(now time.Time, ttl time.Duration) bool {
	return o.State == StatePending && now.Sub(o.Created) >= ttl
}
