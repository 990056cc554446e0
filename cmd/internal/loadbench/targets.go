package loadbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"

	"github.com/idemkit/idem/testserver"
)

// requestBody is what every request sends, to either target.
var requestBody = []byte(`{"item_id":"sku-1","quantity":1}`)

// trivialAnswer is the trivial handler's response body: about the size of
// the reference server's answer.
var trivialAnswer = []byte(`{"id":"rsv_2f1c8e4a-8a5b-4c3d-9e7f-0a1b2c3d4e5f","item_id":"sku-1","quantity":1,"created_at":"2026-01-02T03:04:05Z"}`)

// serverStock is the stock of sku-1 on the reference server: more than any
// run can reserve.
const serverStock = 1_000_000_000

// endpoint is a running target.
type endpoint struct {
	url   string // POST requests go here
	keyed bool   // the plain clients send an Idempotency-Key
	close func()
}

// startTarget starts a fresh instance of t; a reference server gets a new
// database file in dir, or a new database on the PostgreSQL server at
// pgDSN, named after seq.
func startTarget(ctx context.Context, t Target, dir, pgDSN string, seq int) (*endpoint, error) {
	switch t {
	case TargetServerPostgres, TargetServerPostgresUnkeyed:
		return startPostgresServers(ctx, pgDSN, seq, 1, t == TargetServerPostgresUnkeyed)
	case TargetServerPostgres3:
		return startPostgresServers(ctx, pgDSN, seq, postgresReplicas, false)
	case TargetTrivial:
		srv := httptest.NewServer(http.HandlerFunc(trivialHandler))
		return &endpoint{url: srv.URL + "/reservations", keyed: true, close: srv.Close}, nil
	case TargetServer, TargetServerUnkeyed:
		return startReferenceServer(ctx, filepath.Join(dir, "server-"+strconv.Itoa(seq)+".db"), t == TargetServerUnkeyed)
	}
	return nil, fmt.Errorf("loadbench: unknown target %q", t)
}

// trivialHandler reads the request and answers 201 with a fixed body.
func trivialHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(trivialAnswer))}
	w.WriteHeader(http.StatusCreated)
	w.Write(trivialAnswer)
}

// startReferenceServer serves the reference server on a new database file
// at path, stocked for the run.
func startReferenceServer(ctx context.Context, path string, unkeyed bool) (*endpoint, error) {
	s, err := testserver.New(testserver.Config{Path: path, DisableIdempotency: unkeyed})
	if err != nil {
		return nil, fmt.Errorf("loadbench: starting the reference server: %w", err)
	}
	srv := httptest.NewServer(s)
	ep := &endpoint{url: srv.URL + "/reservations", keyed: !unkeyed, close: func() {
		srv.Close()
		s.Close()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(path + suffix)
		}
	}}
	if err := stock(ctx, srv); err != nil {
		ep.close()
		return nil, err
	}
	return ep, nil
}

// stock stocks sku-1 on the reference server srv for the run.
func stock(ctx context.Context, srv *httptest.Server) error {
	body := []byte(`{"available": ` + strconv.Itoa(serverStock) + `}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/inventory/sku-1", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("loadbench: stocking the reference server: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(testserver.HeaderIdempotencyKey, "loadbench-stock")
	resp, err := srv.Client().Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	if err != nil {
		return fmt.Errorf("loadbench: stocking the reference server: %w", err)
	}
	return nil
}
