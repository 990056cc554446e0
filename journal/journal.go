package journal

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Journal is where a Client keeps each operation's key and outcome. Its
// methods are safe for concurrent use.
type Journal interface {
	// Claim waits until no other Do holds operation id, on any machine
	// sharing the journal, and returns the claim, which the caller must
	// Release. When ctx ends first, it returns an error matching ctx's
	// error (a *HeldError for a shared journal).
	Claim(ctx context.Context, id string) (Claim, error)

	// TryClaim is Claim without the wait: when another Do holds id, it
	// returns a *HeldError at once.
	TryClaim(ctx context.Context, id string) (Claim, error)

	// Lookup returns what the journal holds for id, without claiming it.
	Lookup(ctx context.Context, id string) (Operation, bool, error)

	// List returns the operations the listing selects, by Created then ID.
	List(ctx context.Context, which Listing) ([]Operation, error)

	// Now is the journal's clock, by which keys are minted and judged
	// expired. A shared journal's clock is its database's.
	Now() time.Time
}

// ClaimBeginner is a Journal that claims an operation and journals a new
// intent in one step; a Client uses it when it can.
type ClaimBeginner interface {
	// ClaimBegin is Claim of op.ID then, if the journal holds nothing for
	// it, Begin of op. The claim's Operation returns what was journaled.
	ClaimBegin(ctx context.Context, op Operation) (Claim, error)
}

// Claim is the right to run one operation, from Journal.Claim until Release.
// One Do holds it: its methods are not safe for concurrent use.
type Claim interface {
	// Operation returns what the journal holds for the operation, and
	// false if nothing.
	Operation() (Operation, bool)

	// Begin journals a new operation's intent (State Pending) durably:
	// once it returns nil, no crash can lose it. An ID that has an intent
	// is refused with ErrOperationExists, and Operation then returns it;
	// if another machine began it, Begin first waits as Claim does (under
	// TryClaim, it returns a *HeldError). Nothing is sent before Begin.
	Begin(ctx context.Context, op Operation) error

	// Complete records the outcome (State Done or Rejected, Key the
	// journaled key), maybe not yet durably. A lapsed claim is refused with
	// ErrClaimLost, so it never overwrites the next holder's record.
	Complete(ctx context.Context, op Operation) error

	// Lost returns a channel closed if the claim lapses before Release,
	// or nil for a claim that cannot lapse.
	Lost() <-chan struct{}

	// Release ends the claim. A second Release does nothing.
	Release()
}

// Forgetter is a Journal that can drop an operation. Both methods claim the
// operation as a Client does. Programs call idem.Settle, which checks what
// it is asked before it forgets; a Client calls ForgetCompleted to send a
// refusal again under a new key.
type Forgetter interface {
	// Forget drops the pending operation id (ErrNoSuchOperation,
	// ErrAlreadyCompleted).
	Forget(ctx context.Context, id string) error
	// ForgetCompleted drops the completed operation id if its key is key
	// (ErrNoSuchOperation otherwise).
	ForgetCompleted(ctx context.Context, id, key string) error
}

// Listing selects the operations Journal.List returns.
type Listing uint8

// The listings of a journal.
const (
	ListAll       Listing = iota + 1 // every operation
	ListPending                      // pending, key not expired
	ListExpired                      // pending, key expired: for a person to reconcile
	ListCompleted                    // Done or Rejected
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

// Selects reports whether the listing selects op at now, judging its key
// by its own KeyTTL.
func (l Listing) Selects(op Operation, now time.Time) bool {
	switch l {
	case ListAll:
		return true
	case ListPending:
		return op.State == StatePending && !op.Expired(now)
	case ListExpired:
		return op.Expired(now)
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

// Operation is what the journal knows of one operation. Times read back in
// UTC without a monotonic reading; an empty header or body reads back as nil.
type Operation struct {
	ID          string        // the caller's operation ID
	Key         string        // the Idempotency-Key minted for it
	Fingerprint Fingerprint   // identifies the request
	Method, URL string        // the request's, for people reading the journal
	Created     time.Time     // when the key was minted; zero: the journal's clock
	KeyTTL      time.Duration // how long the server keeps the key; positive
	State       State         // Pending after Begin, Done or Rejected after Complete

	// The outcome, set once State is Done or Rejected.

	Completed       time.Time   // when it was recorded; zero: the journal's clock
	Status          int         // the response status code
	Header          http.Header // the response header as recorded
	Body            []byte      // the response body, up to the recording limit
	BodyTruncated   bool        // the body is not kept; Body is nil
	HeaderTruncated bool        // some header fields are not kept
	Summarized      bool        // compaction kept no header or body

	// The marks of the outcome, set by whoever records it. No response
	// header carries them.

	Applied     bool     // the answer says an earlier request applied it (Done only)
	KeyReused   string   // the server's code refusing a key it holds for another request (Rejected only)
	Settled     bool     // a person recorded the outcome (idem.Settle)
	SettledNote string   // the person's note (Settled only)
	Unrecorded  []string // header fields left out by the secrets rule
}

// Expired reports whether o is pending and its key is at least its KeyTTL
// old at now, so that sending it again could apply it twice. Every reader
// judges an operation by the KeyTTL it was begun under, never by a
// lifetime of its own.
func (o Operation) Expired(now time.Time) bool {
	return o.State == StatePending && now.Sub(o.Created) >= o.KeyTTL
}
