package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

// Errors of journals shared by many machines.
var (
	// ErrJournalUnavailable: the journal's database did not answer in time.
	// Do returns it before sending anything.
	ErrJournalUnavailable = errors.New("journal unavailable")

	// ErrClaimLost: the claim lapsed while held (see Claim.Lost); the
	// operation stays pending under its key.
	ErrClaimLost = errors.New("claim on operation lost")

	// ErrClaimed matches a *HeldError.
	ErrClaimed = errors.New("operation claimed elsewhere")
)

// Errors every journal returns, wrapped with context; test with errors.Is.
var (
	// ErrInvalidOperation reports an Operation that Begin or Complete
	// refuses (see CheckIntent and CheckOutcome). Nothing is written.
	ErrInvalidOperation = journalkit.ErrInvalidOperation

	// ErrOperationExists reports a Begin for an ID the journal holds.
	ErrOperationExists = journalkit.ErrOperationExists

	// ErrNoSuchOperation reports an operation ID the journal does not hold.
	ErrNoSuchOperation = journalkit.ErrNoSuchOperation

	// ErrCorrupt reports a stored record that fails a check a torn write
	// cannot explain.
	ErrCorrupt = journalkit.ErrCorrupt

	// ErrClosed reports a use of a Journal after Close.
	ErrClosed = journalkit.ErrClosed
)

// HeldError reports an operation another Do held: from Journal.Claim when
// the caller's context ended first, and from Journal.TryClaim.
type HeldError struct {
	ID     string    // the operation's ID
	Holder string    // the holder as it named itself; "" for this process
	Until  time.Time // when the holder's lease lapses; zero if unknown
	Err    error     // the context's error; nil from TryClaim
}

// Error names the operation and its holder.
func (e *HeldError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another Do of this process"
	}
	s := fmt.Sprintf("idem: operation %s is being run by %s", journalkit.QuoteID(e.ID), holder)
	if !e.Until.IsZero() {
		s += fmt.Sprintf(" (lease until %s)", e.Until.UTC().Format(time.RFC3339Nano))
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is ErrClaimed.
func (e *HeldError) Is(target error) bool { return target == ErrClaimed }

// Unwrap returns Err.
func (e *HeldError) Unwrap() error { return e.Err }

// CheckIntent returns an error matching ErrInvalidOperation if a journal
// must refuse op as an intent (Claim.Begin), or nil. Every Journal applies it.
func CheckIntent(op Operation) error { return checkIntent(&op) }

// CheckOutcome returns an error matching ErrInvalidOperation if a journal
// must refuse op as an outcome (Claim.Complete), or nil. Every Journal applies
// it.
func CheckOutcome(op Operation) error { return checkCompletion(&op) }

// checkIntent validates op for Begin.
func checkIntent(op *Operation) error {
	if err := journalkit.CheckIDKey(op.ID, op.Key, true); err != nil {
		return err
	}
	switch {
	case op.State != 0 && op.State != StatePending:
		return fmt.Errorf("%w: state is %s, want pending", ErrInvalidOperation, op.State)
	case !op.Completed.IsZero() || op.Status != 0 || op.Header != nil || op.Body != nil ||
		op.BodyTruncated || op.HeaderTruncated || op.Summarized:
		return fmt.Errorf("%w: outcome fields are set on an intent", ErrInvalidOperation)
	}
	return journalkit.CheckTime("created", op.Created)
}

// checkCompletion validates op for Complete.
func checkCompletion(op *Operation) error {
	if err := journalkit.CheckIDKey(op.ID, op.Key, false); err != nil {
		return err
	}
	switch {
	case !op.State.final():
		return fmt.Errorf("%w: state is %s, want done or rejected", ErrInvalidOperation, op.State)
	case op.Status < 0 || op.Status > journalkit.MaxStatus:
		return fmt.Errorf("%w: status %d is outside 0..%d", ErrInvalidOperation, op.Status, journalkit.MaxStatus)
	case op.BodyTruncated && len(op.Body) > 0:
		return fmt.Errorf("%w: a truncated body is not kept, but Body has %d bytes", ErrInvalidOperation, len(op.Body))
	case op.Summarized:
		return fmt.Errorf("%w: only compaction summarizes an outcome", ErrInvalidOperation)
	}
	return journalkit.CheckTime("completed", op.Completed)
}
