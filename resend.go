package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/journal"
)

// resend forgets op, a refusal found in the journal, when the call's
// CallOptions.Resend chooses it and RefusedWithoutEffect holds, so that
// the next Do of its ID mints a new key. It reports whether op was
// forgotten. Another machine that resent op first, under a new key,
// keeps its outcome: op is then not forgotten, and the call goes on
// with what the journal holds.
func (c *Client) resend(ctx context.Context, op journal.Operation) (bool, error) {
	o, _ := ctx.Value(callOptionsKey{}).(CallOptions)
	if o.Resend == nil || !op.RefusedWithoutEffect() || !o.Resend(op) {
		return false, nil
	}
	f, ok := c.journal.(journal.Forgetter)
	if !ok {
		return false, fmt.Errorf("idem: operation %q: %w (%T)", op.ID, ErrCannotResend, c.journal)
	}
	switch err := f.ForgetCompleted(ctx, op.ID, op.Key); {
	case errors.Is(err, journal.ErrNoSuchOperation):
		return false, nil
	case err != nil:
		return false, wrapf(err, "operation %q: forgetting its refusal to send it again", op.ID)
	}
	c.log.Info("idem: sending a refusal again under a new key", "op", op.ID, "old_key", op.Key, "status", op.Status)
	return true, nil
}

// resendBeforeClaim is resend for Do and a batch: it looks id up only
// when the call has CallOptions.Resend, and reports whether it forgot a
// refusal.
func (c *Client) resendBeforeClaim(ctx context.Context, id string) (bool, error) {
	if o, _ := ctx.Value(callOptionsKey{}).(CallOptions); o.Resend == nil {
		return false, nil
	}
	op, ok, err := c.journal.Lookup(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	return c.resend(ctx, op)
}
