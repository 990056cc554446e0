package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sweep deletes the finished keys at least Config.Retention old (rule S6)
// and returns how many it deleted. The business rows created under a
// deleted key keep everything but the key: their idempotency_key is set to
// NULL in the same transaction, so the UNIQUE constraint lets the key be
// used again, as a new request.
//
// A key whose request has not finished is never deleted, however old: its
// request may still be running (a live lock, or one that went stale while
// the gateway was slow), or it may have crashed between the gateway's
// capture and the final commit. Forgetting it would turn the retry it
// invites into a new request with a new downstream key, and the gateway
// would capture the money a second time. Such keys are kept, logged by the
// background sweeper, and counted in Stats.Abandoned once no live lock
// holds them, for a person to reconcile.
//
// The background sweeper calls Sweep every Config.SweepInterval; tests may
// call it directly. After Close it returns ErrClosed.
func (s *Server) Sweep(ctx context.Context) (int64, error) {
	if !s.enter() {
		return 0, ErrClosed
	}
	defer s.inflight.Done()
	return s.sweep(ctx)
}

// sweepBatch is how many keys one transaction of the sweeper deletes at
// most: short transactions hold their locks briefly.
const sweepBatch = 500

// sweep is Sweep for a caller that has entered the server already, or that
// Close waits for on its own (the background sweeper). It deletes in
// batches, each its own transaction, until a batch finds fewer than
// sweepBatch keys.
//
// On PostgreSQL several replicas may sweep at once. A batch selects its
// keys FOR UPDATE SKIP LOCKED, at READ COMMITTED: a key another sweeper
// is deleting is skipped, not waited for and not deleted twice, so every
// expired key is counted by exactly one sweeper.
func (s *Server) sweep(ctx context.Context) (int64, error) {
	expired := s.cfg.Now().Add(-s.cfg.Retention).UnixNano()
	var total int64
	for {
		var n int64
		err := s.db.inTxLevel(ctx, sql.LevelReadCommitted, func(tx *txn) error {
			var err error
			n, err = s.sweepOnce(ctx, tx, expired)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < sweepBatch {
			return total, nil
		}
	}
}

// sweepOnce deletes one batch of expired keys in tx and returns how many.
func (s *Server) sweepOnce(ctx context.Context, tx *txn, expired int64) (int64, error) {
	// A finished row holds no lock, so its age alone decides.
	rows, err := tx.QueryContext(ctx, `
		SELECT id FROM idempotency_keys WHERE recovery_point = 'finished' AND created_at <= ?
		ORDER BY id LIMIT `+strconv.Itoa(sweepBatch)+s.db.dialect.skipLocked(), expired)
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := "(" + strings.Repeat("?, ", len(ids)-1) + "?)"
	for _, table := range []string{"reservations", "charges"} {
		if _, err := tx.ExecContext(ctx, `
			UPDATE `+table+` SET idempotency_key = NULL
			WHERE idempotency_key IS NOT NULL AND EXISTS (
				SELECT 1 FROM idempotency_keys k
				WHERE k.client_id = `+table+`.client_id AND k.key = `+table+`.idempotency_key AND k.id IN `+in+`)`,
			ids...); err != nil {
			return 0, fmt.Errorf("testserver: sweeping keys from %s: %w", table, err)
		}
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE id IN `+in, ids...)
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("testserver: sweeping keys: %w", err)
	}
	return n, nil
}

// abandoned selects the unfinished key rows the sweeper keeps and
// Stats.Abandoned counts: at least Config.Retention old (?1, a cut-off in
// Unix nanoseconds) and not locked by a live request (?2, the cut-off of
// Config.LockTimeout).
const abandoned = `recovery_point <> 'finished' AND created_at <= ?1 AND (locked_at IS NULL OR locked_at <= ?2)`

// abandonedArgs returns the cut-offs the abandoned condition takes.
func (s *Server) abandonedArgs() []any {
	now := s.cfg.Now()
	return []any{now.Add(-s.cfg.Retention).UnixNano(), now.Add(-s.cfg.LockTimeout).UnixNano()}
}

// reportAbandoned logs the abandoned keys, if any, for reconciliation.
func (s *Server) reportAbandoned(ctx context.Context) {
	var n int64
	err := s.db.queryRow(ctx, `SELECT COUNT(*) FROM idempotency_keys WHERE `+abandoned, s.abandonedArgs()...).Scan(&n)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.ErrorContext(ctx, "counting abandoned keys", "err", err)
	case n > 0:
		s.log.WarnContext(ctx, "unfinished keys past retention kept for reconciliation; see Stats.Abandoned", "abandoned", n)
	}
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
		n, err := s.sweep(s.ctx)
		switch {
		case err != nil && s.ctx.Err() == nil:
			s.log.Error("sweeping expired keys", "err", err)
			continue
		case err != nil:
			return
		case n > 0:
			s.log.Info("swept expired keys", "deleted", n)
		}
		s.reportAbandoned(s.ctx)
	}
}
