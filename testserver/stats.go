package testserver

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
)

// counters are the server's own per-process counters behind Stats; the
// layer keeps the others (idemserver.Stats).
type counters struct {
	requests atomic.Int64
	faults   [numFaultKinds]atomic.Int64
}

func (c *counters) fault(k faultKind) { c.faults[k].Add(1) }

// Stats is the body of GET /stats: what a test needs to prove that every
// operation took effect exactly once.
//
// The request counters (Requests to Faults) count since this process
// started. Effects, GatewayCaptures, DuplicateReferences, Keys, InFlight
// and Abandoned are read from the database and include earlier processes
// on the same file.
type Stats struct {
	// Requests counts requests to the mutating endpoints (POST /charges,
	// POST /reservations, PUT /inventory/{item_id}), valid or not, first
	// attempts and retries alike.
	Requests int64 `json:"requests"`
	// Invalid counts mutating requests refused before their key was looked
	// at (400, 401, 413, 415): nothing was changed or stored for them.
	Invalid int64 `json:"invalid"`
	// Replays counts answers sent from a stored key.
	Replays int64 `json:"replays"`
	// Conflicts counts 409 answers for a request in flight.
	Conflicts int64 `json:"conflicts"`
	// Mismatches counts 422 answers for a key reused with another request.
	Mismatches int64 `json:"mismatches"`
	// Resumed counts charges taken over from an unfinished key row.
	//
	// Replays, Conflicts, Mismatches and Resumed are the layer's counters
	// (idemserver.Stats: Replays, InFlight, Mismatches, Resumed).
	Resumed int64 `json:"resumed"`
	// Retries counts transactions (the server's and its gateway's) run
	// again after PostgreSQL aborted them with a serialization failure or
	// a deadlock, or after a request's business row met a concurrent
	// request's under the same key (see serveAtomic): the layer's Reruns
	// and the gateway's. Always 0 on SQLite; left out of the JSON when 0.
	Retries int64 `json:"retries,omitempty"`
	// Faults counts injected faults that fired, by kind:
	// error_before_commit, hang_up_after_commit, bad_gateway_after_commit,
	// crash_before_commit, crash_after_commit, crash_after_gateway, delay,
	// gateway_failure, gateway_lost_response. Kinds that never fired are
	// left out.
	Faults map[string]int64 `json:"faults"`

	// Effects counts the business rows: each is one effect.
	Effects Effects `json:"effects"`
	// GatewayCaptures counts the money the gateway really captured. With
	// exactly-once charging it equals Effects.Charges once every request
	// has finished.
	GatewayCaptures int64 `json:"gateway_captures"`
	// DuplicateReferences counts references (per client, charges and
	// reservations apart) that have more than one effect: operations that
	// took effect twice, for a client that sent each operation under a
	// stable reference. Exactly-once means 0.
	DuplicateReferences int64 `json:"duplicate_references"`
	// Keys counts stored idempotency keys.
	Keys int64 `json:"keys"`
	// InFlight counts keys whose request holds a claim (live or lapsed).
	InFlight int64 `json:"in_flight"`
	// Abandoned counts unfinished keys (POST /charges stopped before its
	// last phase) at least Config.Retention old and with no live lock: the
	// client has given up on them, since its key TTL is the retention
	// window. The sweeper keeps them, because forgetting one would let a
	// retry capture again under a new downstream key. Each may hold money
	// captured without a charge: reconcile it against the gateway by the
	// row's downstream key ("idem-" + seed + "-gateway") and the recovery
	// point recorded for the step gateway (the gateway's charge ID, in
	// idempotency_keys_steps), then finish or delete the row by hand.
	Abandoned int64 `json:"abandoned"`
}

// Effects counts business rows by table.
type Effects struct {
	Charges      int64 `json:"charges"`
	Reservations int64 `json:"reservations"`
}

// Stats returns the server's counters. After Close it returns ErrClosed.
func (s *Server) Stats(ctx context.Context) (Stats, error) {
	if !s.enter() {
		return Stats{}, ErrClosed
	}
	defer s.inflight.Done()
	return s.readStats(ctx)
}

// readStats is Stats for a caller that has entered the server already.
func (s *Server) readStats(ctx context.Context) (Stats, error) {
	ks := s.keys.Stats()
	if s.unkeyed != nil {
		ks.Invalid += s.unkeyed.Stats().Invalid
	}
	st := Stats{
		Requests:   s.stats.requests.Load(),
		Invalid:    ks.Invalid,
		Replays:    ks.Replays,
		Conflicts:  ks.InFlight,
		Mismatches: ks.Mismatches,
		Resumed:    ks.Resumed,
		Retries:    ks.Reruns + s.db.retries.Load() + s.gateway.db.retries.Load(),
		Faults:     map[string]int64{},
	}
	for k := faultKind(1); k < numFaultKinds; k++ {
		if n := s.stats.faults[k].Load() + s.gateway.injected(k); n > 0 {
			st.Faults[k.String()] = n
		}
	}
	captures, err := s.gateway.CountCaptures(ctx)
	if err != nil {
		return Stats{}, err
	}
	st.GatewayCaptures = captures
	counts, err := s.keys.Count(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("testserver: reading stats: %w", err)
	}
	st.Keys, st.InFlight, st.Abandoned = counts.Keys, counts.Locked, counts.Abandoned
	err = s.db.queryRow(ctx, `
		SELECT
			(SELECT COUNT(*) FROM charges),
			(SELECT COUNT(*) FROM reservations),
			(SELECT COUNT(*) FROM (SELECT 1 FROM charges WHERE reference IS NOT NULL
			                       GROUP BY client_id, reference HAVING COUNT(*) > 1) AS c)
			+ (SELECT COUNT(*) FROM (SELECT 1 FROM reservations WHERE reference IS NOT NULL
			                         GROUP BY client_id, reference HAVING COUNT(*) > 1) AS r)`).
		Scan(&st.Effects.Charges, &st.Effects.Reservations, &st.DuplicateReferences)
	if err != nil {
		return Stats{}, fmt.Errorf("testserver: reading stats: %w", err)
	}
	return st, nil
}

// getStats serves GET /stats.
func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.readStats(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, r, s, http.StatusOK, st)
}
