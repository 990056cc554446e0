package main

// What the server's own database says happened: the charges it recorded,
// the keys it stored and the money its payment gateway captured. The demo
// reads it after the server has stopped, so the numbers are final.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // the driver "sqlite", which the server uses too
)

// ledger is the effects of one client's batch, read from the server's
// database.
type ledger struct {
	Keys       int64 // idempotency keys the server stored for the client
	Charges    int64 // charges recorded for the client
	Charged    int64 // invoices of the batch with at least one charge
	Duplicates int64 // charges beyond the first of an invoice
	Lost       int64 // invoices of the batch without a charge
	Foreign    int64 // charges whose reference is no invoice of the batch
	// Overcharged is the sum, in cents, of the duplicate charges.
	Overcharged int64
	// Captures counts the gateway's captures, and Captured their sum in
	// cents. The gateway serves only the demo's client.
	Captures, Captured int64
}

// chargeKeys maps an invoice to the idempotency keys of its charges, in
// the order the server recorded them: more than one key, more than one
// charge.
type chargeKeys map[string][]string

// readLedger reads the ledger of the demo's client from the SQLite file
// db, for the batch of charges, and the keys of each invoice's charges.
func readLedger(ctx context.Context, db string, charges []demoCharge) (l ledger, keys chargeKeys, err error) {
	q := url.Values{}
	q.Add("_pragma", "query_only(1)")
	q.Add("_pragma", "busy_timeout(5000)")
	path := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(db)
	conn, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return l, nil, fmt.Errorf("opening the server's database: %w", err)
	}
	defer func() {
		if cerr := conn.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the server's database: %w", cerr))
		}
	}()
	scope := "client:" + demoClientID
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM idempotency_keys WHERE principal = ?`, scope).Scan(&l.Keys); err != nil {
		return l, nil, fmt.Errorf("counting keys: %w", err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM gateway_captures`).Scan(&l.Captures, &l.Captured); err != nil {
		return l, nil, fmt.Errorf("counting gateway captures: %w", err)
	}
	keys, err = chargesByReference(ctx, conn, scope, &l)
	if err != nil {
		return l, nil, err
	}
	seen := map[string]int64{}
	for ref, ks := range keys {
		seen[ref] = int64(len(ks))
	}
	for _, ch := range charges {
		if seen[ch.ID] == 0 {
			l.Lost++
		} else {
			l.Charged++
		}
		delete(seen, ch.ID)
	}
	for _, n := range seen {
		l.Foreign += n
	}
	return l, keys, nil
}

// chargesByReference counts the client's charges in l (Charges,
// Duplicates, Overcharged) and returns the keys of each reference's
// charges.
func chargesByReference(ctx context.Context, conn *sql.DB, scope string, l *ledger) (chargeKeys, error) {
	rows, err := conn.QueryContext(ctx, `SELECT COALESCE(reference, ''), amount, COALESCE(idempotency_key, '') FROM charges WHERE client_id = ? ORDER BY created_at, id`, scope)
	if err != nil {
		return nil, fmt.Errorf("reading charges: %w", err)
	}
	defer rows.Close()
	keys := chargeKeys{}
	for rows.Next() {
		var ref, key string
		var amount int64
		if err := rows.Scan(&ref, &amount, &key); err != nil {
			return nil, fmt.Errorf("reading charges: %w", err)
		}
		l.Charges++
		if len(keys[ref]) > 0 {
			l.Duplicates++
			l.Overcharged += amount
		}
		keys[ref] = append(keys[ref], key)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading charges: %w", err)
	}
	return keys, nil
}
