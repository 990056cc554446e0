package idemserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// keyRow is one row of the key table.
type keyRow struct {
	id          int64
	fingerprint []byte
	seed        string
	finished    bool
	lockToken   sql.NullString
	leaseUntil  sql.NullInt64
	response    Response // when finished
}

// load reads the row of (principal, key); found is false if there is none.
func (k *Keys) load(ctx context.Context, q sqlkit.Queryer, principal, key string) (row keyRow, found bool, err error) {
	var finished int64
	var status sql.NullInt64
	var header sql.NullString
	var body []byte
	err = k.queryRow(ctx, q, `
		SELECT id, fingerprint, seed, finished, lock_token, lease_until, response_status, response_header, response_body
		FROM {{t}} WHERE principal = ? AND idem_key = ?{{lock_key}}`, principal, key).
		Scan(&row.id, &row.fingerprint, &row.seed, &finished, &row.lockToken, &row.leaseUntil, &status, &header, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return keyRow{}, false, nil
	}
	if err != nil {
		return keyRow{}, false, k.dbError("loading the key", err)
	}
	if finished == 1 {
		row.finished = true
		h, err := decodeHeader(header.String)
		if err != nil {
			return keyRow{}, false, err
		}
		row.response = Response{Status: int(status.Int64), Header: h, Body: body}
	}
	return row, true, nil
}

// verdict is what a request learns from an existing key row.
type verdict uint8

const (
	verdictReplay   verdict = iota + 1 // finished: the stored answer
	verdictMismatch                    // another request under this key: 422
	verdictInFlight                    // a live claim holds it: 409
	verdictResume                      // unfinished and unclaimed (or lapsed): take over
)

// judge decides what to do with a request whose key has a row. A
// different fingerprint is refused whatever the row's state.
func judge(row keyRow, fingerprint []byte, now time.Time) verdict {
	switch {
	case !bytes.Equal(row.fingerprint, fingerprint):
		return verdictMismatch
	case row.finished:
		return verdictReplay
	case row.lockToken.Valid && row.leaseUntil.Valid && now.UnixNano() < row.leaseUntil.Int64:
		return verdictInFlight
	}
	return verdictResume
}

// newToken returns 16 random bytes in hex: a lock token or a seed.
func newToken() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// insert stores the row of a new key: finished with resp, or claimed by
// token until leaseUntil.
func (k *Keys) insert(ctx context.Context, q sqlkit.Queryer, req *request, now time.Time, resp *Response, token string, leaseUntil int64) (int64, error) {
	id, _, err := k.insertRow(ctx, q, req, now, resp, token, leaseUntil, false)
	return id, err
}

// claimAtomic inserts the row of a new key for an atomic route, unfinished
// and unclaimed, before its handler runs, unless the key has a row
// already (inserted is then false). The row is the key's lock: a
// concurrent request's insert of the same key waits for this transaction
// to end, and then finds the row committed (or gone), so that it never
// runs the handler beside this one.
func (k *Keys) claimAtomic(ctx context.Context, q sqlkit.Queryer, req *request, now time.Time) (id int64, inserted bool, err error) {
	return k.insertRow(ctx, q, req, now, nil, "", 0, true)
}

// insertRow inserts a key row: finished with resp, claimed by token (a
// phased claim), or neither (an atomic claim). With ifAbsent, a key that
// has a row already inserts nothing and inserted is false.
func (k *Keys) insertRow(ctx context.Context, q sqlkit.Queryer, req *request, now time.Time, resp *Response, token string, leaseUntil int64, ifAbsent bool) (id int64, inserted bool, err error) {
	var status, header, lock, lease any
	var body []byte
	finished := 0
	switch {
	case resp != nil:
		finished = 1
		status, header, body = resp.Status, k.encodeHeader(resp.Header), resp.Body
		if body == nil {
			body = []byte{}
		}
	case token != "":
		lock, lease = token, leaseUntil
	}
	stmt := `
		INSERT INTO {{t}} (principal, idem_key, fingerprint, seed, created_at, expires_at, finished,
		                   lock_token, lease_until, response_status, response_header, response_body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	if ifAbsent {
		stmt += `{{on_conflict_nothing}}`
	}
	args := []any{req.principal, req.key, req.fingerprint, req.seed, now.UnixNano(), now.Add(req.retention).UnixNano(), finished,
		lock, lease, status, header, body}
	if k.db.Flavor().Returning {
		err = k.queryRow(ctx, q, stmt+` RETURNING id`, args...).Scan(&id)
		inserted = err == nil
		if ifAbsent && errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	} else {
		var res sqlkit.Result
		res, err = k.exec(ctx, q, stmt, args...)
		// A row that was there already gives no new id (0), whatever the
		// row count says: MySQL's counts 1 for it under clientFoundRows.
		id, inserted = res.LastInsertID, err == nil && res.LastInsertID != 0
	}
	if err != nil {
		return 0, false, k.dbError("storing the key", err)
	}
	return id, inserted, nil
}

// finishAtomic stores resp in the key row id an atomic route claimed.
func (k *Keys) finishAtomic(ctx context.Context, tx sqlkit.Tx, id int64, resp *Response) error {
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	res, err := k.exec(ctx, tx, `
		UPDATE {{t}} SET finished = 1, response_status = ?, response_header = ?, response_body = ?
		WHERE id = ?`, resp.Status, k.encodeHeader(resp.Header), body, id)
	if err != nil {
		return k.dbError("storing the answer", err)
	}
	if res.RowsAffected != 1 {
		return errTxLost
	}
	return nil
}

// errTxLost: the key row the transaction inserted was not there to take
// the answer: the database rolled the transaction back under the handler
// (MySQL does, at a deadlock, and the connection's later statements then
// commit on their own). The transaction runs again, like a serialization
// failure.
var errTxLost = errors.New("idemserver: the key row the request's transaction claimed was gone when its answer was stored: " +
	"the database rolled the transaction back under the handler (a deadlock on MySQL)")

// storedHeaders returns the headers of h that are stored with a key.
func (k *Keys) storedHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range k.stored {
		if v := h.Values(name); len(v) > 0 {
			out[name] = append([]string(nil), v...)
		}
	}
	return out
}

// encodeHeader returns the stored headers of h as JSON.
func (k *Keys) encodeHeader(h http.Header) string {
	b, _ := json.Marshal(k.storedHeaders(h)) // a map of strings cannot fail
	return string(b)
}

func decodeHeader(s string) (http.Header, error) {
	h := http.Header{}
	if s == "" {
		return h, nil
	}
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("idemserver: stored response header: %w", err)
	}
	return h, nil
}

// fence checks, in tx, that the claim token still holds row id, and
// renews the lease to leaseUntil (or, with finish, stores resp and ends
// the claim; the row's retention still counts from its creation, as the
// client's key lifetime counts from the key's first use). Only the token is
// checked: the lease says when another request may take the row over,
// and the takeover, which changes the token, is what fences the holder
// (rule L5). ErrLockLost if the token is gone, ErrKeyRowGone if the row
// is.
func (k *Keys) fence(ctx context.Context, tx sqlkit.Tx, id int64, token string, leaseUntil int64, finish *Response) error {
	var res sqlkit.Result
	var err error
	if finish != nil {
		body := finish.Body
		if body == nil {
			body = []byte{}
		}
		res, err = k.exec(ctx, tx, `
			UPDATE {{t}} SET finished = 1, response_status = ?1, response_header = ?2, response_body = ?3,
			                 lock_token = NULL, lease_until = NULL
			WHERE id = ?4 AND lock_token = ?5`,
			finish.Status, k.encodeHeader(finish.Header), body, id, token)
	} else {
		res, err = k.exec(ctx, tx, `
			UPDATE {{t}} SET lease_until = ? WHERE id = ? AND lock_token = ?`,
			leaseUntil, id, token)
	}
	if err != nil {
		return k.dbError("checking the claim", err)
	}
	if res.RowsAffected == 1 {
		return nil
	}
	// No row counted: the token is gone, or the row is; or, on MySQL,
	// whose count is of rows changed, not matched, the renewal set the
	// lease it already had (Config.Now has not moved). The UPDATE locked
	// the row if it matched; the token tells.
	var held sql.NullString
	err = k.queryRow(ctx, tx, `SELECT lock_token FROM {{t}} WHERE id = ?{{for_update}}`, id).Scan(&held)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrKeyRowGone
	case err != nil:
		return k.dbError("looking for the key row", err)
	case finish == nil && held.Valid && held.String == token:
		return nil
	}
	return ErrLockLost
}
