package faultsuite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idem/testserver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	_ "modernc.org/sqlite" // the pure-Go driver "sqlite"
)

// EffectsInDatabase counts, in the reference server's database at path,
// the business rows (charges and reservations) per reference of the client
// that sent X-Client-ID: clientID, or of every client when clientID is "".
// Rows without a reference are counted under "". path is a SQLite file,
// opened read-only, or a PostgreSQL database's postgres:// (or
// postgresql://) URL, which the server's replicas share; the server may be
// running.
func EffectsInDatabase(ctx context.Context, path, clientID string) (map[string]int, error) {
	return EffectsInScope(ctx, path, scopeOf(clientID))
}

// EffectsInScope is EffectsInDatabase for the rows of one key scope, as the
// server names it ("client:<id>"), or of every scope
// when scope is "".
func EffectsInScope(ctx context.Context, path, scope string) (map[string]int, error) {
	db, pg, err := openReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	query := `
		SELECT COALESCE(reference, ''), COUNT(*) FROM (
			SELECT reference FROM charges WHERE ?1 = '' OR client_id = ?1
			UNION ALL
			SELECT reference FROM reservations WHERE ?1 = '' OR client_id = ?1
		) GROUP BY 1`
	if pg {
		query = `
		SELECT COALESCE(reference, ''), COUNT(*) FROM (
			SELECT reference FROM charges WHERE $1 = '' OR client_id = $1
			UNION ALL
			SELECT reference FROM reservations WHERE $1 = '' OR client_id = $1
		) AS effects GROUP BY 1`
	}
	rows, err := db.QueryContext(ctx, query, scope)
	if err != nil {
		return nil, fmt.Errorf("faultsuite: counting effects in %s: %w", place(path), err)
	}
	defer rows.Close()
	effects := map[string]int{}
	for rows.Next() {
		var ref string
		var n int
		if err := rows.Scan(&ref, &n); err != nil {
			return nil, fmt.Errorf("faultsuite: counting effects in %s: %w", place(path), err)
		}
		effects[ref] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("faultsuite: counting effects in %s: %w", place(path), err)
	}
	return effects, nil
}

// scopeOf is the server's key scope for requests with X-Client-ID: id,
// or "" for every scope.
func scopeOf(id string) string {
	if id == "" {
		return ""
	}
	return "client:" + id
}

// ReservedInDatabase sums the quantities of Item that the reservations in
// the reference server's database at path (as EffectsInDatabase takes it)
// hold, whoever made them.
func ReservedInDatabase(ctx context.Context, path string) (int64, error) {
	db, pg, err := openReadOnly(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	query := `SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE item_id = ?`
	if pg {
		query = `SELECT COALESCE(SUM(quantity), 0)::bigint FROM reservations WHERE item_id = $1`
	}
	var n int64
	if err := db.QueryRowContext(ctx, query, Item).Scan(&n); err != nil {
		return 0, fmt.Errorf("faultsuite: summing reservations in %s: %w", place(path), err)
	}
	return n, nil
}

// IsPostgres reports whether db names a PostgreSQL database (a postgres://
// or postgresql:// URL) rather than a SQLite file.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openReadOnly opens the database at path, a SQLite file read-only or a
// PostgreSQL URL in read-only transactions, and reports which it is.
func openReadOnly(path string) (*sql.DB, bool, error) {
	if IsPostgres(path) {
		cfg, err := pgx.ParseConfig(path)
		if err != nil {
			return nil, false, fmt.Errorf("faultsuite: parsing the database URL: %w", err)
		}
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
		return stdlib.OpenDB(*cfg), true, nil
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, false, fmt.Errorf("faultsuite: opening %s: %w", path, err)
	}
	return db, false, nil
}

// FetchStats reads GET /stats from the server at baseURL.
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (testserver.Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/stats", nil)
	if err != nil {
		return testserver.Stats{}, fmt.Errorf("faultsuite: reading stats: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return testserver.Stats{}, fmt.Errorf("faultsuite: reading stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return testserver.Stats{}, fmt.Errorf("faultsuite: reading stats: status %s", resp.Status)
	}
	var st testserver.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return testserver.Stats{}, fmt.Errorf("faultsuite: decoding stats: %w", err)
	}
	return st, nil
}

// place names the database at path in error messages: the SQLite file's
// path, but not a PostgreSQL URL, which may carry a password.
func place(path string) string {
	if IsPostgres(path) {
		return "the PostgreSQL database"
	}
	return path
}
