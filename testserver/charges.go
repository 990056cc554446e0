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

	"github.com/idemkit/idem/idemserver"
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

// The recovery points of a charge, as its log names them: how far the
// request under a key had got when an attempt resumed it.
const (
	pointStarted       = "started"        // key claimed; the gateway's answer not recorded
	pointGatewayCalled = "gateway_called" // the gateway's charge ID recorded (the Step's result)
	pointFinished      = "finished"       // charge and answer stored
)

// postCharge serves POST /charges. The gateway call cannot be inside a
// database transaction, so the endpoint is a phased route of the layer
// (rule S5), in three atomic phases, each ending with a recovery point:
//
//  1. claim: the layer inserts the key row claimed, or takes over an
//     unfinished one whose claim was released or has lapsed;
//  2. the gateway: a Step, which calls the gateway with the row's
//     downstream key and records the gateway's charge ID, renewing the
//     claim, unless an earlier attempt recorded it already;
//  3. finish: the charge row, in the final transaction, which the layer
//     commits with the stored answer only while the claim holds.
//
// A crash anywhere leaves the row at the last point reached, claimed. The
// retry waits out the claim (409 with Retry-After), takes it over, and
// continues from that point: before the gateway's charge ID was recorded
// it calls the gateway again under the same downstream key, which answers
// from its own idempotency store without capturing twice; after, it does
// not call the gateway at all.
func (s *Server) postCharge() endpoint {
	return endpoint{
		route: idemserver.Route{Phased: true},
		decode: func(_ *http.Request, body []byte) (any, *Problem) {
			var in chargeRequest
			return &in, s.decodeRequest(body, &in)
		},
		serve: s.charge,
	}
}

// charge is the handler of POST /charges inside the layer.
func (s *Server) charge(w http.ResponseWriter, r *http.Request, wk *work) {
	ctx := r.Context()
	in := *wk.in.(*chargeRequest)
	var captured string // the gateway's charge ID, when this attempt called it
	called := false
	id, err := idemserver.Step(ctx, downstreamStep, func(ctx context.Context, downstreamKey string) ([]byte, error) {
		called = true
		ctx, cancel := s.untilClose(ctx)
		defer cancel()
		gatewayChargeID, err := s.gateway.Capture(ctx, downstreamKey, *in.Amount, *in.Currency)
		if err != nil {
			return nil, err
		}
		captured = gatewayChargeID
		if wk.fault.kind == faultCrashAfterGateway {
			s.crash(w, faultCrashAfterGateway, CrashPointAfterGateway)
		}
		return []byte(gatewayChargeID), nil
	})
	switch {
	case errors.Is(err, idemserver.ErrKeyRowGone):
		s.keyRowGone(w, r, captured, err)
		return
	case errors.Is(err, idemserver.ErrLockLost):
		s.log.WarnContext(ctx, "lock taken over by a retry; stopping")
		s.inFlight(w, "a retry with this "+s.cfg.Dialect.keyTitle()+" took the request over; retry after the time given in Retry-After")
		return
	case err != nil:
		s.gatewayFailed(w, r, err)
		return
	}
	if resumed, lapsed := idemserver.Resumed(ctx); resumed {
		point := pointGatewayCalled // the gateway's answer was recorded: the Step kept it
		if called {
			point = pointStarted
		}
		_, key, _ := idemserver.Key(ctx)
		s.log.InfoContext(ctx, "resuming charge", "key", key, "point", point, "stale_lock", lapsed)
	}
	if hook := s.beforeFinish.Load(); hook != nil {
		(*hook)(ctx)
	}
	now := s.cfg.Now()
	charge := Charge{
		ID:              "ch_" + uuid.NewString(),
		Customer:        *in.Customer,
		Amount:          *in.Amount,
		Currency:        *in.Currency,
		Reference:       deref(in.Reference),
		GatewayChargeID: string(id),
		Status:          ChargeSucceeded,
		CreatedAt:       now.UTC().Format(time.RFC3339Nano),
	}
	resp, err := jsonResponse(http.StatusCreated, charge)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	resp.Header.Set("Location", "/charges/"+charge.ID)
	principal, key, _ := idemserver.Key(ctx)
	res, err := s.txOf(ctx).ExecContext(ctx, `
		INSERT INTO charges (id, client_id, idempotency_key, customer, amount, currency, reference,
		                     gateway_charge_id, status, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`,
		charge.ID, principal, key, charge.Customer, charge.Amount, charge.Currency, nullable(charge.Reference),
		charge.GatewayChargeID, charge.Status, now.UnixNano())
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		err = fmt.Errorf("testserver: recording charge: %w", err)
		idemserver.Fail(ctx, err) // a serialization failure reruns the handler, its Step answered from its point
		s.internalError(w, r, err)
		return
	}
	if n == 0 {
		// The charge of this key (or of this capture) is recorded already:
		// a retry took this request's claim over and finished it. The
		// layer's fence refuses this answer too; the holder stops with 409.
		s.log.WarnContext(ctx, "lock taken over by a retry; stopping")
		s.inFlight(w, "a retry with this "+s.cfg.Dialect.keyTitle()+" took the request over; retry after the time given in Retry-After")
		return
	}
	if s.beforeCommit(w, wk) {
		return
	}
	resp.write(w, false)
}

// gatewayFailed answers a failed gateway call with 502. The layer
// releases the claim and the row keeps its recovery points, so a retry
// calls the gateway again under the same downstream key.
func (s *Server) gatewayFailed(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, ErrGatewayUnavailable) {
		s.internalError(w, r, err)
		return
	}
	s.log.WarnContext(r.Context(), "gateway failed", "err", err)
	writeProblem(w, problem(http.StatusBadGateway, ProblemGatewayFailed, "Payment gateway unavailable",
		"the payment gateway failed; retry with the same Idempotency-Key"))
}

// keyRowGone answers a charge whose key row vanished while it ran: 500
// without an invitation to retry (the money may be captured, and a retry
// would be a new request under a new downstream key). The layer answers
// it too, in the words of writeKeyLost (see Server.answers).
func (s *Server) keyRowGone(w http.ResponseWriter, r *http.Request, gatewayChargeID string, err error) {
	workOf(r.Context()).keyLost = true
	principal, key, _ := idemserver.Key(r.Context())
	s.log.ErrorContext(r.Context(), "key row deleted while its charge ran; reconcile the gateway capture",
		"key", key, "client", principal, "downstream_key", idemserver.DownstreamKey(r.Context(), downstreamStep),
		"gateway_charge_id", gatewayChargeID, "err", err)
	writeKeyLost(w)
}

// writeKeyLost is the answer of a request whose key row vanished.
func writeKeyLost(w http.ResponseWriter) {
	writeProblem(w, problem(http.StatusInternalServerError, ProblemKeyLost, "Idempotency-Key lost",
		"the server lost the record of this Idempotency-Key while the request ran; the payment may have been captured. "+
			"Do not send this request again, under this key or another: it would be a new request and could charge twice. "+
			"Ask the operator to reconcile it"))
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
	// Scope is whose charges these are: reads are scoped per client,
	// as keys are. It is AnonymousClient for a request that carries no
	// X-Client-ID.
	Scope string `json:"scope"`
	// Note, on an empty anonymous read, says that charges made under a
	// client ID are not listed, so that an empty list is not taken for
	// "nothing charged".
	Note string `json:"note,omitempty"`
}

// anonymousEmptyNote is ChargeList.Note.
const anonymousEmptyNote = "reads are scoped per client: this request carries no " +
	HeaderClientID + ", so only charges made without one are listed; send the header the charges were made with"

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
