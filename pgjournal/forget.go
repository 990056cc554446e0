package pgjournal

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/filejournal"
)

// Forget deletes operation id from the journal, so that the next Do of id,
// on any machine, mints a NEW key: if the server applied the operation,
// sending it again under the new key may apply it twice. It claims the
// operation first, as Do does, so it waits for a machine running it; a
// pending operation's row is deleted under the lease taken (fenced, F5), a
// completed one's (only when completed is true) only if it is still
// completed. It returns an error matching idem.ErrNoSuchOperation if the
// journal does not hold id, and idem.ErrAlreadyCompleted for a completed
// operation when completed is false. idem.Settle with Settlement.Forget is
// the checked way in.
func (j *Journal) Forget(ctx context.Context, id string, completed bool) error {
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
		return fmt.Errorf("pgjournal: forgetting %s: %w", filejournal.QuoteID(id), idem.ErrNoSuchOperation)
	case stateLeased:
		query = `DELETE FROM idem_operations WHERE namespace = $1 AND op_id = $2 AND fence = $3 AND state = 1`
		args = append(args, c.fence)
	case stateCompleted:
		if !completed {
			return fmt.Errorf("pgjournal: forgetting %s: %w: it is %s with status %d", filejournal.QuoteID(id), idem.ErrAlreadyCompleted, c.op.State, c.op.Status)
		}
		query = `DELETE FROM idem_operations WHERE namespace = $1 AND op_id = $2 AND state >= 2`
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
		return fmt.Errorf("pgjournal: forgetting %s: %w", filejournal.QuoteID(id), err)
	case n == 0:
		return c.errLost("forgetting")
	}
	if c.state == stateLeased {
		c.stopRenewing()
	}
	c.state = stateReleased
	return nil
}
