package idem

// Settling an operation by hand: a person checked the server and records
// what it found.

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/journal"
)

// Settlement is what a person found on the server for a pending operation,
// for Settle: an outcome, or Forget.
type Settlement struct {
	State  journal.State // Done or Rejected; zero with Forget
	Status int           // the status code the server answered
	Note   string        // recorded with the outcome; optional

	// Forget drops the operation instead of recording an outcome. The
	// next Do of its ID mints a new key, and may apply it a second time.
	Forget          bool
	ForgetCompleted bool // allows Forget of a completed operation
}

// Settle resolves operation id, which a person reconciled with the server:
// it records s's outcome, marked as settled by hand, or with s.Forget drops the
// operation. It claims the operation as Do does.
//
// Settle returns an error matching ErrNoSuchOperation for an ID the journal
// does not hold, ErrAlreadyCompleted for a completed operation (unless
// s.ForgetCompleted), and ErrInvalidOperation for a Settlement that is neither
// one outcome nor Forget, or a journal that cannot forget.
func Settle(ctx context.Context, j journal.Journal, id string, s Settlement) error {
	if err := s.check(); err != nil {
		return wrapf(err, "settling %q", id)
	}
	if s.Forget {
		return forget(ctx, j, id, s)
	}
	claim, err := j.Claim(ctx, id)
	if err != nil {
		return wrapf(err, "settling %q", id)
	}
	defer claim.Release()
	op, ok := claim.Operation()
	switch {
	case !ok:
		return fmt.Errorf("idem: settling %q: %w", id, journal.ErrNoSuchOperation)
	case final(op.State):
		return fmt.Errorf("idem: settling %q: %w: it is %s with status %d", id, journal.ErrAlreadyCompleted, op.State, op.Status)
	}
	out := journal.Operation{
		ID: op.ID, Key: op.Key, Fingerprint: op.Fingerprint, Method: op.Method, URL: op.URL,
		Created: op.Created, State: s.State, Status: s.Status, Settled: true, SettledNote: s.Note,
	}
	if err := claim.Complete(ctx, out); err != nil {
		return wrapf(err, "settling %q", id)
	}
	return nil
}

func forget(ctx context.Context, j journal.Journal, id string, s Settlement) error {
	f, ok := j.(journal.Forgetter)
	if !ok {
		return fmt.Errorf("idem: settling %q: %w: the journal (%T) cannot forget an operation", id, journal.ErrInvalidOperation, j)
	}
	err := f.Forget(ctx, id)
	if errors.Is(err, journal.ErrAlreadyCompleted) && s.ForgetCompleted {
		var op journal.Operation
		var ok bool
		if op, ok, err = j.Lookup(ctx, id); err == nil {
			err = journal.ErrNoSuchOperation
			if ok {
				err = f.ForgetCompleted(ctx, id, op.Key)
			}
		}
	}
	if err != nil {
		return wrapf(err, "settling %q: forgetting", id)
	}
	return nil
}

// check returns why s is not a settlement, or nil.
func (s Settlement) check() error {
	if s.Forget {
		if s.State != 0 || s.Status != 0 || s.Note != "" {
			return fmt.Errorf("%w: a settlement that forgets records no outcome", journal.ErrInvalidOperation)
		}
		return nil
	}
	switch {
	case s.ForgetCompleted:
		return fmt.Errorf("%w: ForgetCompleted without Forget", journal.ErrInvalidOperation)
	case !final(s.State):
		return fmt.Errorf("%w: a settlement is done, rejected or forget, not %s", journal.ErrInvalidOperation, s.State)
	case s.Status < 0 || s.Status > 999:
		return fmt.Errorf("%w: status %d is outside 0..999", journal.ErrInvalidOperation, s.Status)
	}
	for _, r := range s.Note {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return fmt.Errorf("%w: the note has a control character %q", journal.ErrInvalidOperation, r)
		}
	}
	return nil
}

// final reports whether s is an outcome: Done or Rejected.
func final(s journal.State) bool { return s == journal.StateDone || s == journal.StateRejected }
