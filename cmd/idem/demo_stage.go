package main

// A stage of the demo: the reference server on its own SQLite file, and
// the fault-injecting proxy in front of it, both in the demo's process.
// Each client of the demo gets a fresh stage, so that every count the demo
// shows belongs to one client.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idemkit/idem/testserver"
	"github.com/idemkit/idem/testserver/chaos"
)

// demoStage is a server and the proxy in front of it.
type demoStage struct {
	db      string // the server's SQLite file
	server  *testserver.Instance
	proxy   *chaos.Server
	stopped bool
}

// stageReport is what a stage tells once its batch is over: the proxy's
// counts, the server's /stats, and the server's database.
type stageReport struct {
	proxy  chaos.Counts
	stats  testserver.Stats
	ledger ledger
	keys   chargeKeys // the keys of each invoice's charges
}

// startStage starts a server on the database file db and a proxy in front
// of it that faults the given fraction of requests, spread over every
// fault kind, drawn from seed.
func startStage(db string, faults float64, seed int64) (*demoStage, error) {
	srv, err := testserver.Listen(testserver.Config{Path: db}, "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the server: %w", err)
	}
	upstream, err := url.Parse(srv.URL)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("starting the proxy: %w", err)
	}
	proxy, err := chaos.Listen(chaos.Config{
		Upstream: upstream,
		Seed:     seed,
		Rate:     faults,
		MaxStall: demoMaxStall,
	})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("starting the proxy: %w", err)
	}
	return &demoStage{db: db, server: srv, proxy: proxy}, nil
}

// URL is where clients send their requests: the proxy.
func (s *demoStage) URL() string { return s.proxy.URL }

// finish reads the server's /stats, stops the proxy and the server, and
// reads the server's database. The stage cannot be used afterwards.
func (s *demoStage) finish(ctx context.Context, charges []demoCharge) (stageReport, error) {
	var r stageReport
	stats, statsErr := getStats(ctx, s.server)
	r.stats = stats
	r.proxy = s.proxy.Counts()
	if err := errors.Join(statsErr, s.stop()); err != nil {
		return r, err
	}
	var err error
	r.ledger, r.keys, err = readLedger(ctx, s.db, charges)
	return r, err
}

// stop stops the proxy, then the server (waiting for the requests it is
// still working on, so that the database is final when stop returns). A
// second stop does nothing.
func (s *demoStage) stop() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	perr := s.proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(perr, s.server.Shutdown(ctx))
}

// getStats reads GET /stats from the server itself, not through the
// proxy.
func getStats(ctx context.Context, srv *testserver.Instance) (testserver.Stats, error) {
	var st testserver.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return st, fmt.Errorf("reading /stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("reading /stats: status %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("reading /stats: %w", err)
	}
	return st, nil
}
