package idemserver

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// sweepBatch is how many keys one sweep transaction deletes at most.
const sweepBatch = 500

// Sweep deletes the finished keys whose retention has passed (the
// retention of the route that stored each), in batches of their own
// transactions, and returns how many it deleted. Config.Forget runs in
// each batch's transaction before its keys go.
//
// An unfinished key is never deleted, however old: its request may be
// running, or may have crashed between a downstream call and the final
// commit, and forgetting the key would make the retry a new request with
// new downstream keys. Unfinished keys past retention that no live claim
// holds are counted in Stats.Abandoned and logged, for a person to
// reconcile.
//
// On PostgreSQL several replicas may sweep at once: a batch selects its
// keys FOR UPDATE SKIP LOCKED at READ COMMITTED, so each key is deleted
// (and counted) by one sweeper. After Close Sweep returns ErrClosed.
func (k *Keys) Sweep(ctx context.Context) (int64, error) {
	if !k.enter() {
		return 0, ErrClosed
	}
	defer k.running.Done()
	now := k.cfg.Now().UnixNano()
	var total int64
	for {
		var n int64
		err := k.inTx(ctx, sql.LevelReadCommitted, func(tx sqlkit.Tx) error {
			var err error
			n, err = k.sweepBatch(ctx, tx, now)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		k.stats.swept.Add(n)
		if n < sweepBatch {
			break
		}
	}
	var abandoned int64
	err := k.queryRow(ctx, k.db, `SELECT COUNT(*) FROM {{t}}
		WHERE finished = 0 AND expires_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?1)`, now).Scan(&abandoned)
	if err != nil {
		return total, k.dbError("counting abandoned keys", err)
	}
	k.stats.abandoned.Store(abandoned)
	if abandoned > 0 {
		k.log.WarnContext(ctx, "idemserver: unfinished keys past retention kept for reconciliation", "abandoned", abandoned)
	}
	return total, nil
}

// sweepBatch deletes one batch of expired keys in tx and returns how many.
func (k *Keys) sweepBatch(ctx context.Context, tx sqlkit.Tx, now int64) (int64, error) {
	rows, err := k.query(ctx, tx, `
		SELECT id, principal, idem_key FROM {{t}} WHERE finished = 1 AND expires_at <= ?
		ORDER BY id LIMIT `+strconv.Itoa(sweepBatch)+`{{skip_locked}}`, now)
	if err != nil {
		return 0, k.dbError("sweeping keys", err)
	}
	var ids []any
	var swept []Swept
	for rows.Next() {
		var id int64
		var s Swept
		if err := rows.Scan(&id, &s.Principal, &s.Key); err != nil {
			rows.Close()
			return 0, k.dbError("sweeping keys", err)
		}
		ids = append(ids, id)
		swept = append(swept, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, k.dbError("sweeping keys", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if k.cfg.Forget != nil {
		sqlTx, _ := tx.Native().(*sql.Tx)
		fctx := sqlkit.WithTx(ctx, func() sqlkit.Tx { return tx })
		if err := k.cfg.Forget(fctx, sqlTx, swept); err != nil {
			return 0, k.dbError("forgetting swept keys", err)
		}
	}
	in := "(" + strings.Repeat("?, ", len(ids)-1) + "?)"
	if _, err := k.exec(ctx, tx, `DELETE FROM {{steps}} WHERE key_id IN `+in, ids...); err != nil {
		return 0, k.dbError("sweeping recovery points", err)
	}
	res, err := k.exec(ctx, tx, `DELETE FROM {{t}} WHERE id IN `+in, ids...)
	if err != nil {
		return 0, k.dbError("sweeping keys", err)
	}
	return res.RowsAffected, nil
}

// Run sweeps every Config.SweepInterval until ctx ends (it returns
// ctx.Err()) or Close (it returns nil). A failed sweep is logged and the
// next one tried.
func (k *Keys) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-k.done:
			return nil
		case <-t.C:
		}
		n, err := k.Sweep(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return nil
		case err != nil && ctx.Err() == nil:
			k.log.ErrorContext(ctx, "idemserver: sweeping expired keys", "err", err)
		case n > 0:
			k.log.InfoContext(ctx, "idemserver: swept expired keys", "deleted", n)
		}
	}
}

// Counts are what the key table holds, as Keys.Count reads it.
type Counts struct {
	Keys      int64 // rows: every key stored or claimed, until swept
	Finished  int64 // keys whose answer is stored
	Locked    int64 // unfinished keys a claim holds, its lease live or ended
	Live      int64 // claims whose lease has not ended by Config.Now
	Abandoned int64 // unfinished keys past retention that no live claim holds
}

// Count reads Counts from the key table at Config.Now, in one statement.
// Unlike Stats, it counts every replica's keys.
func (k *Keys) Count(ctx context.Context) (Counts, error) {
	var c Counts
	err := k.queryRow(ctx, k.db, `SELECT COUNT(*),
		COUNT(CASE WHEN finished = 1 THEN 1 END),
		COUNT(CASE WHEN finished = 0 AND lock_token IS NOT NULL THEN 1 END),
		COUNT(CASE WHEN finished = 0 AND lock_token IS NOT NULL AND lease_until > ?1 THEN 1 END),
		COUNT(CASE WHEN finished = 0 AND expires_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?1) THEN 1 END)
		FROM {{t}}`, k.cfg.Now().UnixNano()).Scan(&c.Keys, &c.Finished, &c.Locked, &c.Live, &c.Abandoned)
	if err != nil {
		return Counts{}, k.dbError("counting keys", err)
	}
	return c, nil
}
