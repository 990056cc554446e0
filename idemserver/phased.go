package idemserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// servePhased serves a phased route:
//
//  1. claim: insert the key row claimed (a lock token and a lease of
//     Config.LockTimeout), or take over an unfinished row whose claim was
//     released or whose lease has ended; a live claim answers 409;
//  2. the handler: each Step is a recovery point in its own fenced
//     transaction, renewing the lease; Tx begins the final transaction;
//  3. finish: in the final transaction, fenced, the answer is stored and
//     the claim ended, together with the handler's writes.
//
// Fenced means: the row still carries this request's token. A claim
// lapses only when another request takes the row over, which it may do
// once the lease has ended by Config.Now; the takeover changes the token,
// and from that statement on the old holder can commit nothing (rule L5).
// A holder whose lease ended but whom nobody took over may still finish.
// The holder's context ends at its lease's end in real time (the last
// renewal plus Config.LockTimeout by time.Now), so that it never works on
// past its lease. An answer >= 500
// releases the claim, keeping the recovery points, so that the retry
// resumes at once; a panic keeps it, as a crash would, until the lease
// ends.
func (k *Keys) servePhased(w http.ResponseWriter, r *http.Request, req *request, h http.Handler) {
	if req.key == "" {
		k.serveUnkeyedPhased(w, r, req, h)
		return
	}
	ctx, cancel := workContext(r, k.cfg.WorkTimeout)
	defer cancel()
	start := time.Now()
	token := newToken()
	c, err := k.claimPhased(ctx, req, token)
	switch {
	case err != nil:
		k.fail(w, r, err)
		return
	case c.found && c.v != verdictResume:
		k.answerExisting(w, r, c.v, c.row, c.now)
		return
	case c.found:
		k.stats.resumed.Add(1)
		k.log.InfoContext(ctx, "idemserver: resuming a request", "key", req.key, "lapsed", c.row.lockToken.Valid)
	}

	l := newLease(context.WithoutCancel(r.Context()), k.cfg.LockTimeout-time.Since(start))
	defer l.end()
	st := &state{k: k, req: req, seed: c.row.seed, phased: true, id: c.row.id, token: token, lease: l,
		resumed: c.found, lapsed: c.found && c.row.lockToken.Valid}
	k.runPhased(w, r, h, st)
}

// phasedClaim is what a phased request found under its key when it
// claimed it: no row (found false: it inserted one, claimed), or a row
// judged at now (v), which it took over if v is verdictResume.
type phasedClaim struct {
	row   keyRow
	found bool
	v     verdict
	now   time.Time
}

// claimPhased claims req's key with token, in its own transaction: it
// inserts the key row claimed, or takes over a row whose claim was
// released or whose lease has ended; any other row it leaves as it is,
// judged. An insert that loses the race to another connection's claims
// again, once.
func (k *Keys) claimPhased(ctx context.Context, req *request, token string) (phasedClaim, error) {
	var c phasedClaim
	claim := func(tx sqlkit.Tx) error {
		c = phasedClaim{now: k.cfg.Now()}
		until := c.now.Add(k.cfg.LockTimeout).UnixNano()
		var err error
		if c.row, c.found, err = k.load(ctx, tx, req.principal, req.key); err != nil {
			return err
		}
		if !c.found {
			c.row = keyRow{seed: req.seed}
			c.row.id, err = k.insert(ctx, tx, req, c.now, nil, token, until)
			return err
		}
		if c.v = judge(c.row, req.fingerprint, c.now); c.v != verdictResume {
			return nil
		}
		// Take over a claim that was released or whose lease has ended:
		// the new token fences the old holder from this statement on.
		if _, err := k.exec(ctx, tx, `UPDATE {{t}} SET lock_token = ?, lease_until = ? WHERE id = ?`,
			token, until, c.row.id); err != nil {
			return k.dbError("taking the claim over", err)
		}
		return nil
	}
	err := k.inTx(ctx, sql.LevelReadCommitted, claim)
	if err != nil && k.class(err) == sqlkit.Unique {
		// Another request inserted the row first, on another connection.
		k.stats.reruns.Add(1)
		err = k.inTx(ctx, sql.LevelReadCommitted, claim)
	}
	return c, err
}

// runPhased runs the handler of a claimed phased request and answers:
// it stores the answer and ends the claim in the final transaction, or
// releases the claim for an answer it does not store, or runs the
// handler again when the final transaction is lost to a conflict.
func (k *Keys) runPhased(w http.ResponseWriter, r *http.Request, h http.Handler, st *state) {
	hctx := st.context(st.lease.ctx)
	for run := 0; ; run++ {
		buf := newBuffer(k.cfg.MaxResponseBytes)
		err := call(h, w, buf, withBody(r.WithContext(hctx), st.req.body))
		failed, answered := k.phasedRunEnded(w, r, st, buf, err)
		if answered {
			return
		}
		if failed != nil {
			st.rollback()
			err = k.dbError("the handler's work", failed)
		} else {
			err = k.finish(st, buf.response())
		}
		switch {
		case err == nil:
			k.stats.stored.Add(1)
			buf.send(w)
			return
		case k.retryable(err) && run < k.cfg.Reruns:
			// The handler runs again: its Steps answer from their
			// recovery points, its final transaction begins anew.
			k.stats.reruns.Add(1)
			if err := sqlkit.Wait(st.lease.ctx, run); err != nil {
				k.lockLost(w, r)
				return
			}
			st.reset()
			continue
		case k.retryable(err):
			err = fmt.Errorf("%w (%d runs): %w", ErrContention, run+1, err)
		case errors.Is(err, ErrLockLost):
			k.lockLost(w, r)
			return
		case errors.Is(err, ErrKeyRowGone):
			k.rowGone(w, r, st.req, err)
			return
		}
		k.release(st)
		k.fail(w, r, err)
		return
	}
}

// phasedRunEnded settles what one run of a phased handler left, err
// being what calling it returned: it answers the request (answered) when
// the run can store nothing, its work rolled back and the claim released
// or, after a panic or a lost claim, kept; otherwise it returns the
// failure the handler's final transaction met (a statement's error it
// observed, or the one the handler reported with Fail), nil if none.
func (k *Keys) phasedRunEnded(w http.ResponseWriter, r *http.Request, st *state, buf *buffer, err error) (failed error, answered bool) {
	var p *panicked
	if errors.As(err, &p) {
		st.rollback()
		k.stats.rolledBack.Add(1)
		if st.beginErr() == nil {
			k.panicked(w, r, p) // the claim is kept, as after a crash
		}
		// Most likely the nil Tx of a final transaction that
		// could not begin: answered as that failure below.
	}
	resp := buf.response()
	failed = st.failed()
	if met := st.conflicted(); met != nil {
		failed = met // the final transaction is lost, whatever the handler made of it
	}
	switch {
	case st.rowGone.Load():
		st.rollback()
		k.rowGone(w, r, st.req, ErrKeyRowGone)
	case st.lostClaim.Load() || errors.Is(context.Cause(st.lease.ctx), ErrLockLost):
		st.rollback()
		k.lockLost(w, r)
	case st.beginErr() != nil:
		k.release(st)
		k.fail(w, r, st.beginErr())
	case errors.Is(err, errAnsweredAround):
		st.rollback()
		k.release(st)
		k.answeredAround(w, r, err)
	case errors.Is(err, errNoAnswer) && failed == nil:
		st.rollback()
		k.release(st)
		k.stats.rolledBack.Add(1)
		k.noAnswer(w, r, err)
	case buf.over:
		st.rollback()
		k.release(st)
		k.fail(w, r, errResponseTooLarge)
	case failed == nil && resp.Status >= 500:
		st.rollback()
		k.release(st)
		k.stats.rolledBack.Add(1)
		buf.send(w)
	default:
		return failed, false
	}
	return nil, true
}

// finish commits the final transaction with the answer stored and the
// claim ended, fenced by the claim. Recovery points are no longer needed
// and go with it.
func (k *Keys) finish(st *state, resp Response) error {
	st.mu.Lock()
	tx := st.final
	st.final = nil
	st.holding.Store(false)
	st.mu.Unlock()
	ctx := st.lease.ctx
	if tx == nil {
		var err error
		if tx, err = k.db.Begin(ctx, st.req.level); err != nil {
			return st.lost(k.dbError("beginning the final transaction", err))
		}
	}
	defer tx.Rollback(ctx) // after Commit, a no-op
	if err := k.fence(ctx, tx, st.id, st.token, 0, &resp); err != nil {
		return st.lost(err)
	}
	if _, err := k.exec(ctx, tx, `DELETE FROM {{steps}} WHERE key_id = ?`, st.id); err != nil {
		return st.lost(k.dbError("deleting recovery points", err))
	}
	if err := tx.Commit(ctx); err != nil {
		return st.lost(k.dbError("committing", err))
	}
	return nil
}

// rollback rolls the final transaction back, if it began.
func (st *state) rollback() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.holding.Store(false)
	if st.final != nil {
		st.final.Rollback(st.lease.ctx)
		st.final = nil
	}
}

// release frees the claim of a holder that stopped early, keeping its
// recovery points, so that the retry resumes at once instead of waiting
// out the lease.
func (k *Keys) release(st *state) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(st.lease.ctx), k.cfg.WorkTimeout)
	defer cancel()
	err := k.inTx(ctx, sql.LevelReadCommitted, func(tx sqlkit.Tx) error {
		_, err := k.exec(ctx, tx, `UPDATE {{t}} SET lock_token = NULL, lease_until = NULL WHERE id = ? AND lock_token = ?`,
			st.id, st.token)
		return err
	})
	if err != nil {
		k.log.ErrorContext(ctx, "idemserver: releasing a claim", "err", err)
	}
}

// lockLost answers a holder whose claim was taken over or whose lease
// ended.
func (k *Keys) lockLost(w http.ResponseWriter, r *http.Request) {
	k.stats.lockLost.Add(1)
	k.log.WarnContext(r.Context(), "idemserver: claim taken over or its lease ended; nothing more committed")
	k.inFlight(w, r, 1, "this request's claim on its key was taken over by a retry or its lease ended; retry after the time given in Retry-After")
}

// rowGone answers a holder whose key row was deleted while it ran (by
// something outside Keys): 500, and no invitation to retry, since the
// retry would be a new request with new downstream keys.
func (k *Keys) rowGone(w http.ResponseWriter, r *http.Request, req *request, err error) {
	k.stats.failed.Add(1)
	k.log.ErrorContext(r.Context(), "idemserver: key row deleted while its request ran; reconcile its downstream calls",
		"principal", req.principal, "key", req.key, "err", err)
	k.cfg.Answers.failed(w, r, http.StatusInternalServerError,
		"the record of this key was lost while the request ran; its downstream calls may have happened. "+
			"Do not send this request again, under this key or another: ask the operator to reconcile it")
}

// serveUnkeyedPhased serves a phased route's request without a key: Steps
// just call their functions; Tx begins a transaction committed if the
// answer is < 500.
func (k *Keys) serveUnkeyedPhased(w http.ResponseWriter, r *http.Request, req *request, h http.Handler) {
	ctx, cancel := workContext(r, k.cfg.WorkTimeout)
	defer cancel()
	l := &lease{ctx: ctx, cancel: func(error) {}}
	st := &state{k: k, req: req, seed: req.seed, phased: true, lease: l}
	buf := newBuffer(k.cfg.MaxResponseBytes)
	err := call(h, w, buf, withBody(r.WithContext(st.context(ctx)), req.body))
	var p *panicked
	if errors.As(err, &p) {
		st.rollback()
		if st.beginErr() == nil {
			k.panicked(w, r, p)
		}
	}
	resp := buf.response()
	failed := st.failed()
	switch {
	case st.beginErr() != nil:
		k.fail(w, r, st.beginErr())
		return
	case errors.Is(err, errAnsweredAround):
		st.rollback()
		k.answeredAround(w, r, err)
		return
	case failed != nil:
		st.rollback()
		k.fail(w, r, k.dbError("the handler's work", failed))
		return
	case errors.Is(err, errNoAnswer):
		st.rollback()
		k.stats.rolledBack.Add(1)
		k.noAnswer(w, r, err)
		return
	case buf.over:
		st.rollback()
		k.fail(w, r, errResponseTooLarge)
		return
	case resp.Status >= 500:
		st.rollback()
		k.stats.rolledBack.Add(1)
		buf.send(w)
		return
	}
	if st.final != nil {
		if err := st.final.Commit(ctx); err != nil {
			k.fail(w, r, k.dbError("committing", err))
			return
		}
	}
	buf.send(w)
}
