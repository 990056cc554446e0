package testserver

import (
	"context"
	"fmt"
	"time"
)

// Sweep deletes the keys at least Config.Retention old (rule S6) and returns
// how many it deleted. A key whose request holds a live lock is kept until
// the lock is released or goes stale. The business rows created under a
// deleted key keep everything but the key: their idempotency_key is set to
// NULL in the same transaction, so the UNIQUE constraint lets the key be
// used again, as a new request.
//
// A charge key that never finished (its client gave up after a crash) is
// deleted like any other; if the gateway had captured, that capture stays
// without a charge, and Stats shows it as GatewayCaptures above
// Effects.Charges.
//
// The background sweeper calls Sweep every Config.SweepInterval; tests may
// call it directly.
func (s *Server) Sweep(ctx context.Context) (int64, error) {
	now := s.cfg.Now()
	expired := now.Add(-s.cfg.Retention).UnixNano()
	stale := now.Add(-s.cfg.LockTimeout).UnixNano()
	tx, err := s.db.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	defer tx.Rollback()
	const doomed = `created_at <= ?1 AND (locked_at IS NULL OR locked_at <= ?2)`
	for _, table := range []string{"reservations", "charges"} {
		if _, err := tx.ExecContext(ctx, `
			UPDATE `+table+` SET idempotency_key = NULL
			WHERE idempotency_key IS NOT NULL AND EXISTS (
				SELECT 1 FROM idempotency_keys k
				WHERE k.client_id = `+table+`.client_id AND k.key = `+table+`.idempotency_key AND `+doomed+`)`,
			expired, stale); err != nil {
			return 0, fmt.Errorf("testserver: sweeping keys from %s: %w", table, err)
		}
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE `+doomed, expired, stale)
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	return n, nil
}

// sweepEvery runs Sweep every interval until the server closes.
func (s *Server) sweepEvery(interval time.Duration) {
	defer close(s.sweeperDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.Sweep(s.ctx)
		switch {
		case err != nil && s.ctx.Err() == nil:
			s.log.Error("sweeping expired keys", "err", err)
		case n > 0:
			s.log.Info("swept expired keys", "deleted", n)
		}
	}
}
