package testserver

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Recovery points: how far the request under a key has got. Each is
// recorded by the transaction that completes the step, so after a crash the
// row says exactly which steps are done.
const (
	pointStarted       = "started"        // key claimed; nothing else done
	pointGatewayCalled = "gateway_called" // money captured; gateway charge ID recorded
	pointFinished      = "finished"       // effect and response stored; lock released
)

// keyRow is one row of idempotency_keys.
type keyRow struct {
	id              int64
	fingerprint     []byte
	createdAt       int64
	lockedAt        sql.NullInt64
	lockToken       sql.NullString
	recoveryPoint   string
	downstreamKey   string
	gatewayChargeID sql.NullString
	response        response // set when recoveryPoint is finished
}

// querier is what loadKey needs: a transaction or a database.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// loadKey reads the row for (scope, key); found is false if there is none.
func loadKey(ctx context.Context, q querier, scope, key string) (row keyRow, found bool, err error) {
	var status sql.NullInt64
	var header sql.NullString
	var body []byte
	err = q.QueryRowContext(ctx, `
		SELECT id, fingerprint, created_at, locked_at, lock_token, recovery_point,
		       downstream_key, gateway_charge_id, response_status, response_header, response_body
		FROM idempotency_keys WHERE client_id = ? AND key = ?`, scope, key).
		Scan(&row.id, &row.fingerprint, &row.createdAt, &row.lockedAt, &row.lockToken, &row.recoveryPoint,
			&row.downstreamKey, &row.gatewayChargeID, &status, &header, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return keyRow{}, false, nil
	}
	if err != nil {
		return keyRow{}, false, fmt.Errorf("testserver: loading key: %w", err)
	}
	if row.recoveryPoint == pointFinished {
		h, err := decodeHeader(header.String)
		if err != nil {
			return keyRow{}, false, err
		}
		row.response = response{Status: int(status.Int64), Header: h, Body: body}
	}
	return row, true, nil
}

// verdict is what a request learns from an existing key row.
type verdict uint8

const (
	verdictReplay   verdict = iota + 1 // finished: send the stored answer
	verdictMismatch                    // another request under this key: 422
	verdictInFlight                    // the first request still holds the lock: 409
	verdictResume                      // unfinished and unlocked (or stale): take over
)

// judge decides what to do with a request whose key already has a row
// (rule S4). A different fingerprint is refused whatever the row's state:
// the key belongs to another request.
func (s *Server) judge(row keyRow, m *mutation, now time.Time) verdict {
	switch {
	case !bytes.Equal(row.fingerprint, m.fingerprint[:]):
		return verdictMismatch
	case row.recoveryPoint == pointFinished:
		return verdictReplay
	case row.lockedAt.Valid && now.Sub(time.Unix(0, row.lockedAt.Int64)) < s.cfg.LockTimeout:
		return verdictInFlight
	default:
		return verdictResume
	}
}

// answerExisting answers a request from its key row for the verdicts that
// need no further work: replay, mismatch, in flight.
func (s *Server) answerExisting(w http.ResponseWriter, r *http.Request, v verdict, row keyRow, now time.Time) {
	d := s.cfg.Dialect
	switch v {
	case verdictReplay:
		s.stats.replays.Add(1)
		s.log.DebugContext(r.Context(), "replaying stored answer", "status", row.response.Status)
		if d.Applied.Status != 0 && row.response.Status/100 == 2 {
			detail := "a request with this " + d.keyTitle() + " was already applied; it is not applied again"
			def := problem(d.Applied.Status, ProblemAlreadyApplied, d.keyTitle()+" already used", detail)
			d.Applied.render(def, detail, storedID(row.response.Body)).write(w, false)
			return
		}
		row.response.write(w, !d.UnmarkedReplays)
	case verdictMismatch:
		s.stats.mismatches.Add(1)
		s.log.DebugContext(r.Context(), "refused: key reused for a different request")
		detail := "this " + d.keyTitle() + " was used for a different request (method, path, query or body differ); use a new key for a new request"
		d.Mismatch.render(problem(http.StatusUnprocessableEntity, ProblemKeyMismatch, d.keyTitle()+" reused", detail), detail, "").write(w, false)
	case verdictInFlight:
		s.stats.conflicts.Add(1)
		wait := time.Unix(0, row.lockedAt.Int64).Add(s.cfg.LockTimeout).Sub(now)
		secs := max(int64((wait+time.Second-1)/time.Second), 1)
		s.log.DebugContext(r.Context(), "refused: request in flight", "retry_after", secs)
		s.inFlight(w, secs, inFlightDetail(d))
	}
}

// inFlight answers a request whose key's first request still runs, in the
// dialect's words, with Retry-After: secs.
func (s *Server) inFlight(w http.ResponseWriter, secs int64, detail string) {
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	def := problem(http.StatusConflict, ProblemInFlight, "Request in flight", detail)
	s.cfg.Dialect.InFlight.render(def, detail, "").write(w, false)
}

// storedID returns the "id" member of a stored JSON answer, or "".
func storedID(body []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &v) // an answer that is no object has no ID
	return v.ID
}

// insertKey inserts the row for a new key and returns it. A finished row
// carries its response; an unfinished one is locked by lockToken. Each row
// gets a fresh random downstream key, the key this request passes to the
// gateway: random rather than derived from the client's key, so that two
// clients' keys, or a key reused after the sweeper forgot it, never meet
// downstream.
func insertKey(ctx context.Context, tx *txn, m *mutation, now time.Time, point string, lockToken string, resp *response) (keyRow, error) {
	row := keyRow{
		fingerprint:   m.fingerprint[:],
		createdAt:     now.UnixNano(),
		recoveryPoint: point,
		downstreamKey: "idem-testserver-" + uuid.NewString(),
	}
	var status, header any
	var body []byte
	if lockToken != "" {
		row.lockedAt = sql.NullInt64{Int64: now.UnixNano(), Valid: true}
		row.lockToken = sql.NullString{String: lockToken, Valid: true}
	}
	if resp != nil {
		row.response = *resp
		status, header, body = resp.Status, resp.encodeHeader(), resp.Body
	}
	err := tx.QueryRowContext(ctx, `
		INSERT INTO idempotency_keys (client_id, key, method, path, fingerprint, created_at, locked_at, lock_token,
		                              recovery_point, downstream_key, response_status, response_header, response_body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING id`,
		m.scope, m.key, m.method, m.path, row.fingerprint, row.createdAt, row.lockedAt, row.lockToken,
		point, row.downstreamKey, status, header, body).Scan(&row.id)
	if err != nil {
		return keyRow{}, fmt.Errorf("testserver: storing key: %w", err)
	}
	return row, nil
}

// errLockLost means another request took this request's lock over (it was
// slower than Config.LockTimeout); this request must stop.
var errLockLost = errors.New("testserver: in-flight lock taken over by a retry")

// errKeyRowGone means the key row of a running request no longer exists.
// The server never deletes an unfinished row, so something outside it did.
// Unlike a lost lock, no retry can pick the request up: it would insert a
// new row with a new downstream key and start afresh.
var errKeyRowGone = errors.New("testserver: key row deleted while its request ran")

// advance moves a locked row to the next recovery point, checking that the
// caller still holds the lock: errLockLost if another request holds it now,
// errKeyRowGone if the row is gone. finishing also stores the response and
// releases the lock; an intermediate point renews the lock (locked_at =
// now), so that a holder that spent most of Config.LockTimeout in the
// gateway does not look stale while it records the result.
func advance(ctx context.Context, tx *txn, now time.Time, id int64, lockToken, point string, gatewayChargeID string, resp *response) error {
	var res sql.Result
	var err error
	if resp != nil {
		res, err = tx.ExecContext(ctx, `
			UPDATE idempotency_keys
			SET recovery_point = ?, response_status = ?, response_header = ?, response_body = ?,
			    locked_at = NULL, lock_token = NULL
			WHERE id = ? AND lock_token = ?`,
			point, resp.Status, resp.encodeHeader(), resp.Body, id, lockToken)
	} else {
		res, err = tx.ExecContext(ctx, `
			UPDATE idempotency_keys SET recovery_point = ?, gateway_charge_id = ?, locked_at = ?
			WHERE id = ? AND lock_token = ?`,
			point, gatewayChargeID, now.UnixNano(), id, lockToken)
	}
	if err != nil {
		return fmt.Errorf("testserver: recording %s: %w", point, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("testserver: recording %s: %w", point, err)
	} else if n == 0 {
		return lockLostOrRowGone(ctx, tx, id)
	}
	return nil
}

// lockLostOrRowGone tells why a row did not match its lock token.
func lockLostOrRowGone(ctx context.Context, tx *txn, id int64) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM idempotency_keys WHERE id = ?`, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return errKeyRowGone
	case err != nil:
		return fmt.Errorf("testserver: looking for the key row: %w", err)
	}
	return errLockLost
}

// release frees a lock its holder no longer needs because it stopped early
// (a gateway failure, an error answered before commit). The row keeps its
// recovery point, so the retry resumes from there at once instead of
// waiting out the lock timeout. The caller must not hold a transaction:
// on SQLite there is one write connection.
func (s *Server) release(ctx context.Context, id int64, lockToken string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.BusyTimeout)
	defer cancel()
	err := s.db.inTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx,
			`UPDATE idempotency_keys SET locked_at = NULL, lock_token = NULL WHERE id = ? AND lock_token = ?`, id, lockToken)
		return err
	})
	if err != nil {
		s.log.ErrorContext(ctx, "releasing lock", "err", err)
	}
}
