package pgjournal

import (
	"context"
	"fmt"
)

// Pending returns the number of the namespace's pending operations whose
// key has not expired: as many as List(ctx, journal.ListPending) returns,
// judged by the database's clock, in one query that reads no operation.
func (j *Journal) Pending(ctx context.Context) (int, error) {
	if err := j.usable(); err != nil {
		return 0, err
	}
	now := j.Now().UnixNano() // a key created key_ttl_ns or more before it: expired
	var n int64
	err := j.statement(ctx, func(ctx context.Context) error {
		return j.pool.QueryRow(ctx, `SELECT count(*) FROM idem_operations
			WHERE namespace = $1 AND state = 1 AND created_ns > $2 - key_ttl_ns`, j.opt.Namespace, now).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("pgjournal: counting pending operations: %w", err)
	}
	return int(n), nil
}
