package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/filejournal"
)

// Errors of journals shared by many machines.
var (
	// ErrJournalUnavailable: the journal's database could not be reached
	// or did not answer in time. Do returns it before sending anything;
	// once the database answers again, so does the journal.
	ErrJournalUnavailable = errors.New("journal unavailable")

	// ErrClaimLost: the claim on an operation lapsed while it was held (a
	// lease not renewed in time, so another machine may have taken the
	// operation over). Attempts stop, and nothing the lapsed holder writes
	// is recorded; the operation stays pending under its key.
	ErrClaimLost = errors.New("claim on operation lost")

	// ErrClaimed matches a *HeldError.
	ErrClaimed = errors.New("operation claimed elsewhere")
)

// HeldError is returned by Journal.Claim (and so by Do) when the caller's
// context ended while another machine held the operation's claim, and by
// Journal.TryClaim when another Do held it.
type HeldError struct {
	// ID is the operation's ID.
	ID string
	// Holder names the machine that held the claim, as it named itself
	// (pgjournal.Options.Owner); empty for another Do of this process
	// through a journal that does not name its holders.
	Holder string
	// Until is when the holder's lease lapses unless it is renewed, by the
	// journal's clock; zero for a claim that does not lapse, or whose
	// lease was not read.
	Until time.Time
	// Err is why waiting stopped: the context's error; nil from TryClaim,
	// which does not wait.
	Err error
}

func (e *HeldError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another Do of this process"
	}
	s := fmt.Sprintf("idem: operation %s is being run by %s", filejournal.QuoteID(e.ID), holder)
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
