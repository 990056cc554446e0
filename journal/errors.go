package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

// The errors a journal returns, wrapped with context; test for them with
// errors.Is.
var (
	// ErrInvalidOperation is returned when Begin or Complete refuses an
	// Operation (see CheckIntent and CheckOutcome). Nothing is written.
	ErrInvalidOperation = journalkit.ErrInvalidOperation

	// ErrOperationExists is returned when Begin is given an ID the journal
	// holds.
	ErrOperationExists = journalkit.ErrOperationExists

	// ErrNoSuchOperation is returned when an operation ID is not in the
	// journal.
	ErrNoSuchOperation = journalkit.ErrNoSuchOperation

	// ErrCorrupt is returned when a stored record fails a check a torn
	// write cannot explain.
	ErrCorrupt = journalkit.ErrCorrupt

	// ErrClosed is returned when a Journal is used after Close.
	ErrClosed = journalkit.ErrClosed

	// ErrUnavailable is returned when a journal's database did not answer
	// in time. A Client returns it before sending anything.
	ErrUnavailable = errors.New("journal unavailable")

	// ErrClaimLost is returned when a claim lapsed while held (see
	// Claim.Lost); the operation stays pending under its key.
	ErrClaimLost = errors.New("claim on operation lost")

	// ErrClaimed is returned when another caller holds the operation; the
	// error is a *HeldError.
	ErrClaimed = errors.New("operation claimed elsewhere")

	// ErrAlreadyCompleted is returned when Forget is given a completed
	// operation.
	ErrAlreadyCompleted = errors.New("operation already completed")

	// ErrOutcomeForgotten is returned when a journal no longer holds the
	// outcome of an operation it completed. It never reads as absent, so
	// that the operation is not sent again under a new key.
	ErrOutcomeForgotten = errors.New("operation completed earlier, its outcome no longer held")
)

// HeldError reports an operation another caller held: from Journal.Claim
// when the caller's context ended first, and from Journal.TryClaim.
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
	s := fmt.Sprintf("journal: operation %s is being run by %s", journalkit.QuoteID(e.ID), holder)
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
