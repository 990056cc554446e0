package pgjournal

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// Forget deletes the pending operation id from the journal, so that the
// next Do of id, on any machine, mints a NEW key: if the server applied
// the operation, sending it again under the new key may apply it twice. It
// claims the operation first, as Do does, so it waits for a machine
// running it, and deletes the row under the lease taken (fenced). It
// returns an error matching journal.ErrNoSuchOperation if the journal does
// not hold id, and journal.ErrAlreadyCompleted for a completed operation.
// Forget and ForgetCompleted implement journal.Forgetter, for a Client;
// programs call idem.Settle, which checks what it is asked first.
func (j *Journal) Forget(ctx context.Context, id string) error {
	return j.forget(ctx, id, "")
}

// ForgetCompleted deletes the completed operation id, as Forget deletes a
// pending one, if it is still completed under key: an operation forgotten
// and sent again meanwhile, under a new key, is kept. It returns an error
// matching journal.ErrNoSuchOperation when the journal holds no completed
// operation id under key.
func (j *Journal) ForgetCompleted(ctx context.Context, id, key string) error {
	if key == "" {
		return fmt.Errorf("pgjournal: forgetting %s: %w: no key given", journalkit.QuoteID(id), journal.ErrNoSuchOperation)
	}
	return j.forget(ctx, id, key)
}

// forget is Forget with key "", and ForgetCompleted otherwise.
func (j *Journal) forget(ctx context.Context, id, key string) error {
	completed := key != ""
	ic, err := j.Claim(ctx, id)
	if err != nil {
		return err
	}
	c := ic.(*claim)
	defer c.Release()
	var (
		query string
		args  = []any{j.opt.Namespace, id}
	)
	switch c.state {
	case stateNew:
		return fmt.Errorf("pgjournal: forgetting %s: %w", journalkit.QuoteID(id), journal.ErrNoSuchOperation)
	case stateLeased, stateCompleted:
		if completed != (c.state == stateCompleted) || completed && c.op.Key != key {
			if completed {
				return fmt.Errorf("pgjournal: forgetting %s: %w: no completed operation under key %s", journalkit.QuoteID(id), journal.ErrNoSuchOperation, key)
			}
			return fmt.Errorf("pgjournal: forgetting %s: %w: it is %s with status %d", journalkit.QuoteID(id), journal.ErrAlreadyCompleted, c.op.State, c.op.Status)
		}
	}
	switch c.state {
	case stateLeased:
		query = `DELETE FROM idem_operations WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state = 1 AND ` + durableSQL
		args = append(args, c.fence)
	case stateCompleted:
		query = `DELETE FROM idem_operations WHERE namespace = $1 AND op_id = $2 AND state >= 2 AND op_key = $3 AND ` + durableSQL
		args = append(args, key)
	default:
		return c.errLost("forgetting")
	}
	var n int64
	err = j.statement(ctx, func(ctx context.Context) error {
		tag, err := j.pool.Exec(ctx, query, args...)
		n = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("pgjournal: forgetting %s: %w", journalkit.QuoteID(id), err)
	case n == 0 && completed:
		// Forgotten since the claim read it, and perhaps begun again
		// under another key, which is kept.
		return fmt.Errorf("pgjournal: forgetting %s: %w: no completed operation under key %s", journalkit.QuoteID(id), journal.ErrNoSuchOperation, key)
	case n == 0:
		return c.errLost("forgetting")
	}
	if c.state == stateLeased {
		c.stopRenewing()
	}
	c.state = stateReleased
	return nil
}
