package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/google/uuid"

	"github.com/idemkit/idem/idemserver"
)

// schema is the service's own tables. idemserver creates its key table
// beside them.
const schema = `
CREATE TABLE IF NOT EXISTS orders (
	id        TEXT PRIMARY KEY,
	principal TEXT NOT NULL,
	item      TEXT NOT NULL,
	amount    INTEGER NOT NULL CHECK (amount > 0),
	capture   TEXT
)`

// service is a small shop: POST /orders records an order in one
// transaction with its key (an atomic route); POST /orders/{id}/pay takes
// the money through the card gateway, outside any transaction, and then
// marks the order paid (a phased route).
type service struct {
	db      *sql.DB
	keys    *idemserver.Keys
	gateway *gateway
	log     *slog.Logger

	// afterCapture, if set, runs between the gateway's answer and the
	// final transaction of a payment; a non-nil error stops the request
	// there with 503, as a crash would stop it (a test seam).
	afterCapture func() error
}

// newService creates the tables in db and returns the service; the caller
// must close s.keys.
func newService(ctx context.Context, db *sql.DB, gw *gateway, log *slog.Logger) (*service, error) {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("payments: creating tables: %w", err)
	}
	keys, err := idemserver.New(ctx, idemserver.Config{DB: db, Principal: account, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	return &service{db: db, keys: keys, gateway: gw, log: log}, nil
}

// handler routes the service's endpoints, each mutation behind the key
// layer.
func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", s.keys.Handle(idemserver.Route{Check: checkOrder}, http.HandlerFunc(s.createOrder)))
	mux.Handle("POST /orders/{id}/pay", s.keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(s.payOrder)))
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	return mux
}

// order is an order as the API shows it.
type order struct {
	ID      string `json:"id"`
	Item    string `json:"item"`
	Amount  int64  `json:"amount"`
	Capture string `json:"capture,omitempty"`
}

// newOrder is what POST /orders takes.
type newOrder struct {
	Item   string `json:"item"`
	Amount int64  `json:"amount"`
}

// checkOrder refuses a malformed order before its key is looked up, so
// that nothing is stored under the key and the client's corrected request,
// under the same key, is served rather than refused as another request.
func checkOrder(w http.ResponseWriter, r *http.Request, body []byte) bool {
	var in newOrder
	if err := json.Unmarshal(body, &in); err != nil || in.Item == "" || in.Amount <= 0 {
		http.Error(w, `want {"item": "...", "amount": > 0}`, http.StatusBadRequest)
		return false
	}
	return true
}

// createOrder is an atomic route: its INSERT runs in the transaction that
// stores the key and the answer, so both commit or neither does. On
// PostgreSQL the transaction may run again after a serialization failure,
// so the handler does nothing outside it. checkOrder has accepted the
// body.
func (s *service) createOrder(w http.ResponseWriter, r *http.Request) {
	var in newOrder
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	principal, _, _ := idemserver.Key(r.Context())
	o := order{ID: "ord_" + uuid.NewString(), Item: in.Item, Amount: in.Amount}
	_, err := idemserver.Tx(r.Context()).ExecContext(r.Context(),
		`INSERT INTO orders (id, principal, item, amount) VALUES (?, ?, ?, ?)`, o.ID, principal, o.Item, o.Amount)
	if err != nil {
		s.fail(w, r, err) // >= 500: rolled back, nothing stored, the retry runs again
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

// payOrder is a phased route. The capture is a Step: idemserver passes it
// a downstream key stable for this request's key row, and records its
// result as a recovery point, so a retry after a failure or a crash
// between the capture and the commit gets the capture back without calling
// the gateway again. The order is marked paid in the final transaction,
// which commits only while this request still holds the key's claim.
func (s *service) payOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	principal, _, _ := idemserver.Key(ctx)
	var o order
	err := s.db.QueryRowContext(ctx, `SELECT id, item, amount FROM orders WHERE id = ? AND principal = ?`,
		r.PathValue("id"), principal).Scan(&o.ID, &o.Item, &o.Amount)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such order", http.StatusNotFound) // a final answer, stored
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	capture, err := idemserver.Step(ctx, "capture", func(ctx context.Context, downstreamKey string) ([]byte, error) {
		id, err := s.gateway.Capture(ctx, downstreamKey, o.Amount)
		return []byte(id), err
	})
	if err != nil {
		s.fail(w, r, err) // the claim is released; the retry calls the gateway again under the same key
		return
	}
	if s.afterCapture != nil {
		if err := s.afterCapture(); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	o.Capture = string(capture)
	if _, err := idemserver.Tx(ctx).ExecContext(ctx,
		`UPDATE orders SET capture = ? WHERE id = ?`, o.Capture, o.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

// account names the caller's account, whose keys and orders a request
// uses: in a real service, the one its authentication established (the
// subject of a verified token), never the token itself, which a client
// refreshes. This example trusts the X-Account header, and a caller
// without one is the anonymous account "".
func account(r *http.Request) (string, error) {
	a := r.Header.Get("X-Account")
	if len(a) > 64 {
		return "", fmt.Errorf("X-Account is longer than 64 bytes: %w", idemserver.ErrUnauthorized)
	}
	return a, nil
}

// getOrder serves GET /orders/{id}, the caller's own orders only.
func (s *service) getOrder(w http.ResponseWriter, r *http.Request) {
	principal, err := account(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var o order
	var capture sql.NullString
	err = s.db.QueryRowContext(r.Context(), `SELECT id, item, amount, capture FROM orders WHERE id = ? AND principal = ?`,
		r.PathValue("id"), principal).Scan(&o.ID, &o.Item, &o.Amount, &capture)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such order", http.StatusNotFound)
	case err != nil:
		s.fail(w, r, err)
	default:
		o.Capture = capture.String
		writeJSON(w, http.StatusOK, o)
	}
}

// fail answers 503: the request did nothing the client can see, and a
// retry under the same key is safe.
func (s *service) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.log.WarnContext(r.Context(), "request failed", "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "1")
	http.Error(w, "temporarily unavailable; retry with the same Idempotency-Key", http.StatusServiceUnavailable)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the layer buffers the answer; this cannot fail
}
