package journal

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idem/internal/journalkit"
)

// CheckIntent returns an error matching ErrInvalidOperation if a journal
// must refuse op as an intent (Claim.Begin), or nil. Every Journal applies it.
func CheckIntent(op Operation) error { return checked(checkIntent(op)) }

// CheckOutcome returns an error matching ErrInvalidOperation if a journal
// must refuse op as an outcome (Claim.Complete), or nil. Every Journal applies
// it.
func CheckOutcome(op Operation) error { return checked(checkOutcome(op)) }

// checked returns err, the refusal of a check, in the package's words, or
// nil.
func checked(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("journal: %w", err)
}

// checkIntent is CheckIntent's refusal, without the package's name.
func checkIntent(op Operation) error {
	if err := journalkit.CheckIDKey(op.ID, op.Key, true); err != nil {
		return err
	}
	switch {
	case op.State != 0 && op.State != StatePending:
		return fmt.Errorf("%w: state is %s, want pending", ErrInvalidOperation, op.State)
	case !op.Completed.IsZero() || op.Status != 0 || op.Header != nil || op.Body != nil ||
		op.BodyTruncated || op.HeaderTruncated || op.Summarized ||
		op.Applied || op.KeyReused != "" || op.Settled || op.SettledNote != "" || op.Unrecorded != nil:
		return fmt.Errorf("%w: outcome fields are set on an intent", ErrInvalidOperation)
	}
	if err := journalkit.CheckKeyTTL(op.KeyTTL); err != nil {
		return err
	}
	return journalkit.CheckTime("created", op.Created)
}

// checkOutcome is CheckOutcome's refusal, without the package's name.
func checkOutcome(op Operation) error {
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
	case op.Applied && op.State != StateDone:
		return fmt.Errorf("%w: an outcome marked applied is %s, want done", ErrInvalidOperation, op.State)
	case op.KeyReused != "" && op.State != StateRejected:
		return fmt.Errorf("%w: an outcome marked key reused is %s, want rejected", ErrInvalidOperation, op.State)
	case op.SettledNote != "" && !op.Settled:
		return fmt.Errorf("%w: a settled note on an outcome not settled", ErrInvalidOperation)
	}
	for _, name := range op.Unrecorded {
		if !journalkit.ValidHeaderName(name) {
			return fmt.Errorf("%w: unrecorded header name %q is not a header field name", ErrInvalidOperation, name)
		}
	}
	return journalkit.CheckTime("completed", op.Completed)
}

// RefusedWithoutEffect reports whether o is a refusal that applied
// nothing, so that sending it again under a new key cannot apply it twice:
// a 4xx rejection but 408, 409 and 429, neither settled by hand nor a
// refusal of a key held for another request. A 3xx never qualifies: a
// redirect may answer a request that was applied.
func (o Operation) RefusedWithoutEffect() bool {
	switch {
	case o.State != StateRejected || o.Status < 400 || o.Status > 499:
		return false
	case o.Status == http.StatusRequestTimeout, o.Status == http.StatusConflict, o.Status == http.StatusTooManyRequests:
		return false
	}
	return !o.Settled && o.KeyReused == ""
}
