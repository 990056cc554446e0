package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ChargeSucceeded is the status of every charge this server records.
const ChargeSucceeded = "succeeded"

// chargeRequest is the body of POST /charges.
type chargeRequest struct {
	Customer  *string `json:"customer"`
	Amount    *int64  `json:"amount"`
	Currency  *string `json:"currency"`
	Reference *string `json:"reference"`
}

// Charge is a card charge as the API returns it. Amount is in the
// currency's minor unit (cents).
type Charge struct {
	ID              string `json:"id"`
	Customer        string `json:"customer"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	Reference       string `json:"reference,omitempty"`
	GatewayChargeID string `json:"gateway_charge_id"`
	Status          string `json:"status"`
	CreatedAt       string `json:"created_at"`
}

func (in *chargeRequest) validate() *Problem {
	if p := requireText("customer", in.Customer); p != nil {
		return p
	}
	switch {
	case in.Amount == nil:
		return badRequest(`field "amount" is required`)
	case *in.Amount <= 0:
		return badRequest(fmt.Sprintf(`field "amount" must be positive, not %d`, *in.Amount))
	case *in.Amount > maxAmount:
		return badRequest(fmt.Sprintf(`field "amount" must be at most %d`, int64(maxAmount)))
	}
	if in.Currency == nil {
		return badRequest(`field "currency" is required`)
	}
	if !isCurrencyCode(*in.Currency) {
		return badRequest(fmt.Sprintf(`field "currency" must be a three-letter ISO 4217 code such as "usd", not %q`, *in.Currency))
	}
	lower := strings.ToLower(*in.Currency)
	in.Currency = &lower
	return optionalText("reference", in.Reference)
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		c := s[i] | 0x20 // lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// postCharge serves POST /charges. The gateway call cannot be inside a
// database transaction, so the request runs in three atomic phases, each
// ending with a recovery point (rule S5):
//
//  1. claim: insert the key row, or take over an unfinished one, locked
//     (point started, or whatever point the row had reached);
//  2. from started: call the gateway with the row's downstream key, then
//     record the gateway's charge ID (point gateway_called);
//  3. from gateway_called: insert the charge, store the answer, release
//     the lock (point finished).
//
// A crash anywhere leaves the row at the last point reached, locked. The
// retry waits out the lock (409 with Retry-After), takes it over, and
// continues from that point: after started it calls the gateway again,
// which answers from its own idempotency store without capturing twice;
// after gateway_called it does not call the gateway at all.
func (s *Server) postCharge(w http.ResponseWriter, r *http.Request) {
	s.stats.requests.Add(1)
	m, p := s.readMutation(w, r)
	if p != nil {
		s.refuse(w, p)
		return
	}
	if m.key == "" { // only under Config.DisableIdempotency, which charges do not follow
		s.refuse(w, s.cfg.Dialect.missingKey())
		return
	}
	var in chargeRequest
	if p := decodeRequest(m.body, &in); p != nil {
		s.refuse(w, p)
		return
	}
	if !s.startWork(r.Context(), w, m) {
		return
	}
	ctx, cancel := s.workContext(r)
	defer cancel()

	row, token, ok := s.claim(ctx, w, r, m)
	if !ok {
		return
	}
	if row.recoveryPoint == pointStarted {
		gatewayChargeID, err := s.gateway.Capture(ctx, row.downstreamKey, *in.Amount, *in.Currency)
		if err != nil {
			s.release(ctx, row.id, token)
			s.gatewayFailed(w, r, err)
			return
		}
		if m.fault.kind == faultCrashAfterGateway {
			s.crash(w, faultCrashAfterGateway, CrashPointAfterGateway)
			return
		}
		row.gatewayChargeID = sql.NullString{String: gatewayChargeID, Valid: true}
		if err := s.recordGatewayCall(ctx, row.id, token, gatewayChargeID); err != nil {
			s.release(ctx, row.id, token)
			s.phaseFailed(w, r, m, row, err)
			return
		}
		row.recoveryPoint = pointGatewayCalled
	}
	s.finishCharge(ctx, w, r, m, in, row, token)
}

// claim is phase 1: it returns the key row locked for this request, or
// answers the request (replay, 422, 409) and returns ok false.
func (s *Server) claim(ctx context.Context, w http.ResponseWriter, r *http.Request, m *mutation) (row keyRow, token string, ok bool) {
	var (
		found bool
		v     verdict
		now   time.Time
	)
	token = uuid.NewString()
	err := s.db.inTx(ctx, func(tx *txn) error {
		now = s.cfg.Now()
		var err error
		row, found, err = loadKey(ctx, tx, m.scope, m.key)
		if err != nil {
			return err
		}
		if !found {
			row, err = insertKey(ctx, tx, m, now, pointStarted, token, nil)
			return err
		}
		if v = s.judge(row, m, now); v != verdictResume {
			return nil
		}
		// Take the lock over: it is free (the holder released it after a
		// failure) or stale (the holder died or is too slow; its next
		// phase will find the token changed and stop).
		if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET locked_at = ?, lock_token = ? WHERE id = ?`,
			now.UnixNano(), token, row.id); err != nil {
			return fmt.Errorf("testserver: taking the lock over: %w", err)
		}
		return nil
	})
	switch {
	case err != nil:
		s.internalError(w, r, err)
		return keyRow{}, "", false
	case found && v != verdictResume:
		s.answerExisting(w, r, v, row, now)
		return keyRow{}, "", false
	case found:
		s.log.InfoContext(ctx, "resuming charge", "key", m.key, "point", row.recoveryPoint, "stale_lock", row.lockedAt.Valid)
		s.stats.resumed.Add(1)
	}
	return row, token, true
}

// recordGatewayCall is the end of phase 2: the recovery point
// gateway_called with the gateway's charge ID, and the lock renewed, in its
// own transaction.
func (s *Server) recordGatewayCall(ctx context.Context, id int64, token, gatewayChargeID string) error {
	err := s.db.inTx(ctx, func(tx *txn) error {
		return advance(ctx, tx, s.cfg.Now(), id, token, pointGatewayCalled, gatewayChargeID, nil)
	})
	if err != nil && !errors.Is(err, errLockLost) && !errors.Is(err, errKeyRowGone) {
		return fmt.Errorf("testserver: recording the gateway call: %w", err)
	}
	return err
}

// finishCharge is phase 3: the stored answer and the release of the lock
// (checking the lock token), and the charge row, in one transaction.
func (s *Server) finishCharge(ctx context.Context, w http.ResponseWriter, r *http.Request, m *mutation, in chargeRequest, row keyRow, token string) {
	if hook := s.beforeFinish.Load(); hook != nil {
		(*hook)(ctx)
	}
	var resp response
	err := s.db.inTx(ctx, func(tx *txn) error {
		now := s.cfg.Now()
		charge := Charge{
			ID:              "ch_" + uuid.NewString(),
			Customer:        *in.Customer,
			Amount:          *in.Amount,
			Currency:        *in.Currency,
			Reference:       deref(in.Reference),
			GatewayChargeID: row.gatewayChargeID.String,
			Status:          ChargeSucceeded,
			CreatedAt:       now.UTC().Format(time.RFC3339Nano),
		}
		var err error
		if resp, err = jsonResponse(http.StatusCreated, charge); err != nil {
			return err
		}
		resp.Header.Set("Location", "/charges/"+charge.ID)
		// The lock token is checked first: a holder that lost its lock must
		// stop with errLockLost before its INSERT meets the charge the new
		// holder recorded under the same key (a UNIQUE violation, a 500).
		if err := advance(ctx, tx, now, row.id, token, pointFinished, "", &resp); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO charges (id, client_id, idempotency_key, customer, amount, currency, reference,
			                     gateway_charge_id, status, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			charge.ID, m.scope, m.key, charge.Customer, charge.Amount, charge.Currency, nullable(charge.Reference),
			charge.GatewayChargeID, charge.Status, now.UnixNano()); err != nil {
			return fmt.Errorf("testserver: recording charge: %w", err)
		}
		if s.beforeCommit(w, m) {
			return errRolledBack
		}
		return nil
	})
	// On failure the transaction is rolled back (first: on SQLite there is
	// one write connection), and the lock freed so that the retry need not
	// wait, except after a crash, which frees nothing.
	switch {
	case errors.Is(err, errRolledBack):
		if m.fault.kind == faultErrorBeforeCommit {
			s.release(ctx, row.id, token)
		}
		return
	case err != nil:
		s.release(ctx, row.id, token)
		s.phaseFailed(w, r, m, row, err)
		return
	}
	s.deliver(w, m, resp)
}

// gatewayFailed answers a failed gateway call with 502. The lock has been
// released and the row is still at started, so a retry calls the gateway
// again under the same downstream key.
func (s *Server) gatewayFailed(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, ErrGatewayUnavailable) {
		s.internalError(w, r, err)
		return
	}
	s.log.WarnContext(r.Context(), "gateway failed", "err", err)
	writeProblem(w, problem(http.StatusBadGateway, ProblemGatewayFailed, "Payment gateway unavailable",
		"the payment gateway failed; retry with the same Idempotency-Key"))
}

// phaseFailed answers a phase that could not complete: 409 if a retry took
// the lock over; 500 without an invitation to retry if the key row is gone
// (the money may be captured, and a retry would be a new request); 500
// otherwise.
func (s *Server) phaseFailed(w http.ResponseWriter, r *http.Request, m *mutation, row keyRow, err error) {
	if errors.Is(err, errKeyRowGone) {
		s.log.ErrorContext(r.Context(), "key row deleted while its charge ran; reconcile the gateway capture",
			"key", m.key, "client", m.scope, "downstream_key", row.downstreamKey,
			"gateway_charge_id", row.gatewayChargeID.String, "err", err)
		writeProblem(w, problem(http.StatusInternalServerError, ProblemKeyLost, "Idempotency-Key lost",
			"the server lost the record of this Idempotency-Key while the request ran; the payment may have been captured. "+
				"Do not send this request again, under this key or another: it would be a new request and could charge twice. "+
				"Ask the operator to reconcile it"))
		return
	}
	if errors.Is(err, errLockLost) {
		s.stats.conflicts.Add(1)
		s.log.WarnContext(r.Context(), "lock taken over by a retry; stopping")
		s.inFlight(w, 1, "a retry with this "+s.cfg.Dialect.keyTitle()+" took the request over; retry after the time given in Retry-After")
		return
	}
	s.internalError(w, r, err)
}

// getCharge serves GET /charges/{id}: the client's own charges only.
func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	scope, p := s.readScope(w, r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	charges, err := s.queryCharges(r.Context(), `WHERE client_id = ? AND id = ?`, scope, r.PathValue("id"))
	switch {
	case err != nil:
		s.internalError(w, r, err)
	case len(charges) == 0:
		writeProblem(w, problem(http.StatusNotFound, ProblemNotFound, "Not found", "no such charge"))
	default:
		writeJSON(w, r, s, http.StatusOK, charges[0])
	}
}

// ChargeList is the body of GET /charges.
type ChargeList struct {
	Charges []Charge `json:"charges"`
	// Scope is whose charges these are: reads are scoped per client (S2),
	// as keys are. It is AnonymousClient for a request that carries
	// neither Authorization nor X-Client-ID.
	Scope string `json:"scope"`
	// Note, on an empty anonymous read, says that charges made under a
	// client ID or a token are not listed, so that an empty list is not
	// taken for "nothing charged".
	Note string `json:"note,omitempty"`
}

// anonymousEmptyNote is ChargeList.Note.
const anonymousEmptyNote = "reads are scoped per client: this request carries neither Authorization nor " +
	HeaderClientID + ", so only charges made without them are listed; send the header the charges were made with"

// listCharges serves GET /charges?customer=...&reference=...: the client's
// charges, oldest first, filtered by the parameters given (both: both must
// match).
func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	scope, p := s.readScope(w, r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	where, args := "WHERE client_id = ?", []any{scope}
	for name, values := range r.URL.Query() {
		if name != "customer" && name != "reference" {
			writeProblem(w, badRequest(fmt.Sprintf("unknown query parameter %q; use customer or reference", name)))
			return
		}
		if len(values) != 1 {
			writeProblem(w, badRequest(fmt.Sprintf("query parameter %q must be given once", name)))
			return
		}
		where += " AND " + name + " = ?" // name is one of two constants
		args = append(args, values[0])
	}
	charges, err := s.queryCharges(r.Context(), where+" ORDER BY created_at, id", args...)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	list := ChargeList{Charges: charges, Scope: scope}
	if len(charges) == 0 && scope == AnonymousClient {
		list.Note = anonymousEmptyNote
	}
	writeJSON(w, r, s, http.StatusOK, list)
}

func (s *Server) queryCharges(ctx context.Context, where string, args ...any) ([]Charge, error) {
	rows, err := s.db.query(ctx, `
		SELECT id, customer, amount, currency, reference, gateway_charge_id, status, created_at
		FROM charges `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("testserver: listing charges: %w", err)
	}
	defer rows.Close()
	charges := []Charge{}
	for rows.Next() {
		var c Charge
		var ref sql.NullString
		var created int64
		if err := rows.Scan(&c.ID, &c.Customer, &c.Amount, &c.Currency, &ref, &c.GatewayChargeID, &c.Status, &created); err != nil {
			return nil, fmt.Errorf("testserver: listing charges: %w", err)
		}
		c.Reference = ref.String
		c.CreatedAt = time.Unix(0, created).UTC().Format(time.RFC3339Nano)
		charges = append(charges, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("testserver: listing charges: %w", err)
	}
	return charges, nil
}
