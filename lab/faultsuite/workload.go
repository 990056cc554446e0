package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Workload is the operations of a run against the reference server:
// operation i is a charge when i is even and a reservation of the item
// Item when i is odd, each carrying its operation ID as its reference, so
// that the server's rows can be counted per operation. The request of an
// operation is the same, byte for byte, in every process that builds it.
type Workload struct {
	// BaseURL is where requests go: the server, or a proxy in front of it.
	BaseURL string
	// ClientID is sent as X-Client-ID: the scope of the keys.
	ClientID string
	// Ops is the number of operations.
	Ops int
}

// Item is the inventory item reservations take from; PrepareInventory
// stocks it with InitialStock.
const (
	Item         = "faultsuite-sku"
	InitialStock = 1_000_000_000
)

// IsCharge reports whether operation i is a charge; the others are
// reservations.
func IsCharge(i int) bool { return i%2 == 0 }

// Quantity is how much of Item the reservation of operation i takes.
func Quantity(i int) int { return 1 + i%3 }

// StockTaken is how much of Item the workload's reservations take when
// each takes effect as many times as effects says.
func (w Workload) StockTaken(effects map[string]int) int64 {
	var n int64
	for i := range w.Ops {
		if !IsCharge(i) {
			n += int64(Quantity(i) * effects[OperationID(i)])
		}
	}
	return n
}

// OperationID returns the ID of operation i.
func OperationID(i int) string { return fmt.Sprintf("op-%07d", i) }

// IDs returns the IDs of every operation, in order.
func (w Workload) IDs() []string {
	ids := make([]string, w.Ops)
	for i := range ids {
		ids[i] = OperationID(i)
	}
	return ids
}

// Request builds the request of operation i.
func (w Workload) Request(ctx context.Context, i int) (*http.Request, error) {
	id := OperationID(i)
	var path string
	var body any
	if IsCharge(i) {
		path = "/charges"
		body = map[string]any{"customer": "cus-" + strconv.Itoa(i%97), "amount": 100 + i%1000, "currency": "usd", "reference": id}
	} else {
		path = "/reservations"
		body = map[string]any{"item_id": Item, "quantity": Quantity(i), "reference": id}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("faultsuite: encoding %s: %w", id, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.BaseURL+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("faultsuite: building %s: %w", id, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-ID", w.ClientID)
	return req, nil
}

// PrepareInventory stocks Item on the server at baseURL with InitialStock,
// far more than any run reserves, retrying under one key until the server answers
// 200 or ctx ends.
func PrepareInventory(ctx context.Context, hc *http.Client, baseURL, clientID string) error {
	key := uuid.NewString()
	body := []byte(fmt.Sprintf(`{"available": %d}`, InitialStock))
	var last error
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, baseURL+"/inventory/"+Item, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("faultsuite: stocking %s: %w", Item, err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Client-ID", clientID)
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("faultsuite: stocking %s: %w (last: %v)", Item, ctx.Err(), last)
}

// newPooledClient returns an HTTP client with a connection pool of its
// own, sized for a few dozen concurrent workers against one host.
func newPooledClient() *http.Client {
	return &http.Client{Transport: NewTransport()}
}

// NewTransport returns a transport of its own (so that closing its idle
// connections touches nobody else's), without environment proxies, with
// enough idle connections per host for a few dozen workers.
func NewTransport() *http.Transport {
	return &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
}

// FetchStock reads the stock of Item left on the server at baseURL.
func FetchStock(ctx context.Context, hc *http.Client, baseURL string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/inventory/"+Item, nil)
	if err != nil {
		return 0, fmt.Errorf("faultsuite: reading stock: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("faultsuite: reading stock: %w", err)
	}
	defer resp.Body.Close()
	var item struct {
		Available int64 `json:"available"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("faultsuite: reading stock: status %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&item); err != nil {
		return 0, fmt.Errorf("faultsuite: decoding stock: %w", err)
	}
	return item.Available, nil
}
