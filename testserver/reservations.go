package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idem/idemserver"
)

// Limits on request fields.
const (
	maxQuantity  = 1_000_000
	maxAvailable = 1_000_000_000
	maxAmount    = 100_000_000_000 // in minor units: a billion dollars
	maxTextField = 255
)

// reservationRequest is the body of POST /reservations.
type reservationRequest struct {
	ItemID    *string `json:"item_id"`
	Quantity  *int64  `json:"quantity"`
	Reference *string `json:"reference"`
}

// Reservation is a stock reservation as the API returns it.
type Reservation struct {
	ID        string `json:"id"`
	ItemID    string `json:"item_id"`
	Quantity  int64  `json:"quantity"`
	Reference string `json:"reference,omitempty"`
	CreatedAt string `json:"created_at"`
}

func (in reservationRequest) validate() *Problem {
	if p := requireText("item_id", in.ItemID); p != nil {
		return p
	}
	switch {
	case in.Quantity == nil:
		return badRequest(`field "quantity" is required`)
	case *in.Quantity <= 0:
		return badRequest(fmt.Sprintf(`field "quantity" must be positive, not %d`, *in.Quantity))
	case *in.Quantity > maxQuantity:
		return badRequest(fmt.Sprintf(`field "quantity" must be at most %d`, maxQuantity))
	}
	return optionalText("reference", in.Reference)
}

// requireText checks a required string field: present, 1 to 255 bytes.
func requireText(name string, v *string) *Problem {
	if v == nil {
		return badRequest(fmt.Sprintf("field %q is required", name))
	}
	return optionalText(name, v)
}

// optionalText checks a string field that may be absent; if present it
// must be 1 to 255 bytes.
func optionalText(name string, v *string) *Problem {
	switch {
	case v == nil:
		return nil
	case *v == "":
		return badRequest(fmt.Sprintf("field %q must not be empty", name))
	case len(*v) > maxTextField:
		return badRequest(fmt.Sprintf("field %q must be at most %d bytes", name, maxTextField))
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// nullable turns "" into SQL NULL.
func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// postReservation serves POST /reservations: reserve stock, exactly once
// per key.
func (s *Server) postReservation() endpoint {
	return endpoint{
		route: idemserver.Route{},
		decode: func(_ *http.Request, body []byte) (any, *Problem) {
			var in reservationRequest
			return &in, s.decodeRequest(body, &in)
		},
		serve: func(w http.ResponseWriter, r *http.Request, wk *work) {
			s.serveAtomic(w, r, wk, func(ctx context.Context, tx *txn, now time.Time) (response, error) {
				return s.reserve(ctx, tx, s.keyOf(r), *wk.in.(*reservationRequest), now)
			})
		},
	}
}

// reserve takes the stock in a single conditional UPDATE, so that stock can
// never go negative whatever runs concurrently, and records the reservation
// under the request's key.
func (s *Server) reserve(ctx context.Context, tx *txn, m requestKey, in reservationRequest, now time.Time) (response, error) {
	item, qty := *in.ItemID, *in.Quantity
	res, err := tx.ExecContext(ctx,
		`UPDATE inventory SET available = available - ?, updated_at = ? WHERE item_id = ? AND available >= ?`,
		qty, now.UnixNano(), item, qty)
	if err != nil {
		return response{}, fmt.Errorf("testserver: reserving stock: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return response{}, fmt.Errorf("testserver: reserving stock: %w", err)
	}
	if n == 0 {
		var available int64
		err := tx.QueryRowContext(ctx, `SELECT available FROM inventory WHERE item_id = ?`, item).Scan(&available)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return problem(http.StatusNotFound, ProblemUnknownItem, "Unknown item",
				fmt.Sprintf("there is no item %q in the inventory", item)).response(), nil
		case err != nil:
			return response{}, fmt.Errorf("testserver: reading stock: %w", err)
		}
		return problem(http.StatusConflict, ProblemInsufficientStock, "Insufficient stock",
			fmt.Sprintf("item %q has %d available; %d requested", item, available, qty)).response(), nil
	}
	rsv := Reservation{
		ID:        "rsv_" + uuid.NewString(),
		ItemID:    item,
		Quantity:  qty,
		Reference: deref(in.Reference),
		CreatedAt: now.UTC().Format(time.RFC3339Nano),
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO reservations (id, client_id, idempotency_key, item_id, quantity, reference, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		rsv.ID, m.scope, nullable(m.key), item, qty, nullable(rsv.Reference), now.UnixNano()); err != nil {
		return response{}, fmt.Errorf("testserver: recording reservation: %w", err)
	}
	resp, err := jsonResponse(http.StatusCreated, rsv)
	if err != nil {
		return response{}, err
	}
	resp.Header.Set("Location", "/reservations/"+rsv.ID)
	return resp, nil
}

// getReservation serves GET /reservations/{id}: the client's own
// reservations only; another client's is not found.
func (s *Server) getReservation(w http.ResponseWriter, r *http.Request) {
	scope, p := s.readScope(w, r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	var rsv Reservation
	var ref sql.NullString
	var created int64
	err := s.db.queryRow(r.Context(), `
		SELECT id, item_id, quantity, reference, created_at FROM reservations WHERE id = ? AND client_id = ?`,
		r.PathValue("id"), scope).Scan(&rsv.ID, &rsv.ItemID, &rsv.Quantity, &ref, &created)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		writeProblem(w, problem(http.StatusNotFound, ProblemNotFound, "Not found", "no such reservation"))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	rsv.Reference = ref.String
	rsv.CreatedAt = time.Unix(0, created).UTC().Format(time.RFC3339Nano)
	writeJSON(w, r, s, http.StatusOK, rsv)
}

// readScope returns the client scope of a read request.
func (s *Server) readScope(w http.ResponseWriter, r *http.Request) (string, *Problem) {
	scope, err := clientScope(r.Header)
	switch {
	case errors.Is(err, errUnauthorized):
		w.Header().Set("WWW-Authenticate", "Bearer")
		return "", problem(http.StatusUnauthorized, ProblemUnauthorized, "Unauthorized", err.Error())
	case err != nil:
		return "", problem(http.StatusBadRequest, ProblemInvalidClient, "Invalid client", err.Error())
	}
	return scope, nil
}

// writeJSON answers a read request.
func writeJSON(w http.ResponseWriter, r *http.Request, s *Server, status int, v any) {
	resp, err := jsonResponse(status, v)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	resp.write(w, false)
}
