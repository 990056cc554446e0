package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// inventoryRequest is the body of PUT /inventory/{item_id}.
type inventoryRequest struct {
	Available *int64 `json:"available"`
}

// Item is an inventory item as the API returns it.
type Item struct {
	ItemID    string `json:"item_id"`
	Available int64  `json:"available"`
}

func (in inventoryRequest) validate() *Problem {
	switch {
	case in.Available == nil:
		return badRequest(`field "available" is required`)
	case *in.Available < 0:
		return badRequest(fmt.Sprintf(`field "available" must not be negative, not %d`, *in.Available))
	case *in.Available > maxAvailable:
		return badRequest(fmt.Sprintf(`field "available" must be at most %d`, maxAvailable))
	}
	return nil
}

// putInventory serves PUT /inventory/{item_id}: set the stock of an item,
// creating it if needed. Setting an absolute value is idempotent by nature
// (RFC 9110, section 9.2.2), but like every mutating endpoint here it takes
// an Idempotency-Key and goes through the same path, so that a replay is
// recognisable and a key reused for another value is refused.
func (s *Server) putInventory() endpoint {
	return endpoint{
		route: idemserver.Route{},
		decode: func(r *http.Request, body []byte) (any, *Problem) {
			itemID := r.PathValue("item_id")
			if p := optionalText("item_id", &itemID); p != nil {
				return nil, p
			}
			var in inventoryRequest
			return &in, s.decodeRequest(body, &in)
		},
		serve: func(w http.ResponseWriter, r *http.Request, wk *work) {
			s.serveAtomic(w, r, wk, func(ctx context.Context, tx *txn, now time.Time) (response, error) {
				return s.setStock(ctx, tx, r.PathValue("item_id"), *wk.in.(*inventoryRequest), now)
			})
		},
	}
}

// setStock sets the stock of an item, creating it if needed.
func (s *Server) setStock(ctx context.Context, tx *txn, itemID string, in inventoryRequest, now time.Time) (response, error) {
	_, err := tx.ExecContext(ctx, `
			INSERT INTO inventory (item_id, available, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (item_id) DO UPDATE SET available = excluded.available, updated_at = excluded.updated_at`,
		itemID, *in.Available, now.UnixNano())
	if err != nil {
		return response{}, fmt.Errorf("testserver: setting stock: %w", err)
	}
	return jsonResponse(http.StatusOK, Item{ItemID: itemID, Available: *in.Available})
}

// getInventory serves GET /inventory/{item_id}. Stock is shared by all
// clients.
func (s *Server) getInventory(w http.ResponseWriter, r *http.Request) {
	item := Item{ItemID: r.PathValue("item_id")}
	err := s.db.queryRow(r.Context(),
		`SELECT available FROM inventory WHERE item_id = ?`, item.ItemID).Scan(&item.Available)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		writeProblem(w, problem(http.StatusNotFound, ProblemUnknownItem, "Unknown item",
			fmt.Sprintf("there is no item %q in the inventory", item.ItemID)))
	case err != nil:
		s.internalError(w, r, err)
	default:
		writeJSON(w, r, s, http.StatusOK, item)
	}
}
