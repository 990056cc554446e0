package testserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/idemserver"
)

// The idempotency layer is package idemserver: the key (S1), its scope
// (S2), the fingerprint, the stored answer and the verdicts of a retry
// (S4), the transaction of an atomic endpoint and its reruns on
// PostgreSQL (S3, S9), the claim, recovery points, takeover and fencing
// of POST /charges (S5), and the sweeper (S6). This file maps the
// server's Config onto it and adds what is the server's own: the checks
// of a request's body before its key is looked at (S7), the Dialect's
// answers, and the injected faults (S8), drawn and delayed here, fired
// inside the handler before the commit and around the layer after it.

// keysTable is the table the layer keeps the keys in.
const keysTable = "idempotency_keys"

// downstreamStep names the step of POST /charges that calls the gateway;
// its downstream key is the layer's for that step.
const downstreamStep = "gateway"

// openKeys opens the layer on the server's database. keyHeader is the
// dialect's, or for the unkeyed layer of Config.DisableIdempotency a
// header no client sends.
func (s *Server) openKeys(ctx context.Context, keyHeader, keyField string) (*idemserver.Keys, error) {
	d := s.cfg.Dialect
	keys, err := idemserver.New(ctx, idemserver.Config{
		DB:            s.db.write,
		Table:         keysTable,
		Principal:     func(r *http.Request) (string, error) { return clientScope(r.Header) },
		Accepts:       func(contentType string) bool { return checkJSONMediaType(contentType) == nil },
		KeyHeader:     keyHeader,
		KeyField:      keyField,
		MaxKeyLength:  d.maxKeyLength(),
		Retention:     s.cfg.Retention,
		SweepInterval: s.cfg.SweepInterval,
		LockTimeout:   s.cfg.LockTimeout,
		MaxBodyBytes:  s.cfg.MaxBodyBytes,
		Reruns:        maxTxAttempts,
		Answers:       s.answers(),
		Forget:        s.forget,
		Now:           s.cfg.Now,
		Logger:        s.log.With("component", "idemserver"),
	})
	if errors.Is(err, idemserver.ErrUnavailable) {
		return nil, fmt.Errorf("%w: %w", ErrDatabaseUnavailable, err)
	}
	return keys, err
}

// answers are the layer's answers in the server's Dialect and problem
// types.
func (s *Server) answers() idemserver.Answers {
	d := s.cfg.Dialect
	return idemserver.Answers{
		MissingKey: func(w http.ResponseWriter, _ *http.Request, detail string) {
			writeProblem(w, problem(http.StatusBadRequest, ProblemMissingKey, d.keyTitle()+" required", detail))
		},
		InvalidKey: func(w http.ResponseWriter, _ *http.Request, detail string) {
			writeProblem(w, problem(http.StatusBadRequest, ProblemInvalidKey, "Invalid "+d.keyTitle(), detail))
		},
		Mismatch: func(w http.ResponseWriter, _ *http.Request, _ string) {
			detail := "this " + d.keyTitle() + " was used for a different request (method, path, query or body differ); use a new key for a new request"
			d.Mismatch.render(problem(http.StatusUnprocessableEntity, ProblemKeyMismatch, d.keyTitle()+" reused", detail), detail, "").write(w, false)
		},
		InFlight: func(w http.ResponseWriter, _ *http.Request, _ string) {
			s.inFlight(w, inFlightDetail(d))
		},
		Replay: func(w http.ResponseWriter, _ *http.Request, stored idemserver.Response) {
			resp := response(stored)
			if d.Applied.Status != 0 && resp.Status/100 == 2 {
				detail := "a request with this " + d.keyTitle() + " was already applied; it is not applied again"
				def := problem(d.Applied.Status, ProblemAlreadyApplied, d.keyTitle()+" already used", detail)
				d.Applied.render(def, detail, storedID(resp.Body)).write(w, false)
				return
			}
			resp.write(w, !d.UnmarkedReplays)
		},
		Refused: func(w http.ResponseWriter, r *http.Request, status int, detail string) {
			_, scopeErr := clientScope(r.Header)
			switch {
			case status == http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", "Bearer")
				writeProblem(w, problem(status, ProblemUnauthorized, "Unauthorized", detail))
			case status == http.StatusBadRequest && scopeErr != nil:
				writeProblem(w, problem(status, ProblemInvalidClient, "Invalid client", detail))
			case status == http.StatusUnsupportedMediaType:
				writeProblem(w, checkJSONMediaType(r.Header.Get("Content-Type")))
			case status == http.StatusRequestEntityTooLarge:
				writeProblem(w, problem(status, ProblemBodyTooLarge, "Request body too large", detail))
			case status == http.StatusRequestTimeout:
				writeProblem(w, problem(status, ProblemRequestTimeout, "Request body too slow", detail))
			default:
				writeProblem(w, badRequest(detail))
			}
		},
		Failed: func(w http.ResponseWriter, r *http.Request, status int, detail string) {
			if wk := workOf(r.Context()); wk != nil && wk.keyLost {
				writeKeyLost(w)
				return
			}
			if status == http.StatusServiceUnavailable {
				writeProblem(w, problem(status, ProblemUnavailable, "Database unavailable", detail))
				return
			}
			writeProblem(w, problem(status, ProblemInternal, "Internal error", detail))
		},
	}
}

// inFlight answers a request whose key's first request still runs, in the
// dialect's words; Retry-After is 1 unless the layer set it.
func (s *Server) inFlight(w http.ResponseWriter, detail string) {
	if w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	def := problem(http.StatusConflict, ProblemInFlight, "Request in flight", detail)
	s.cfg.Dialect.InFlight.render(def, detail, "").write(w, false)
}

// storedID returns the "id" member of a stored JSON answer, or "".
func storedID(body []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &v) // an answer that is no object has no ID
	return v.ID
}

// requestKey is whose a mutation is and the key it came under ("" for
// none).
type requestKey struct{ scope, key string }

// keyOf returns the scope and key of a mutation: the layer's, or under
// Config.DisableIdempotency the client's scope and the key header as sent.
func (s *Server) keyOf(r *http.Request) requestKey {
	if principal, key, ok := idemserver.Key(r.Context()); ok {
		return requestKey{principal, key}
	}
	scope, _ := clientScope(r.Header)
	return requestKey{scope, strings.Trim(r.Header.Get(s.cfg.Dialect.keyHeader()), " \t")}
}

// forget clears the keys the sweeper deletes from the business rows, in
// its transaction, so that the UNIQUE constraint lets a key be used again
// as a new request (S6).
func (s *Server) forget(ctx context.Context, tx *sql.Tx, swept []idemserver.Swept) error {
	t := &txn{tx: tx, d: s.db.flavor}
	for _, k := range swept {
		for _, table := range []string{"reservations", "charges"} {
			if _, err := t.ExecContext(ctx, `UPDATE `+table+` SET idempotency_key = NULL WHERE client_id = ? AND idempotency_key = ?`,
				k.Principal, k.Key); err != nil {
				return fmt.Errorf("testserver: sweeping keys from %s: %w", table, err)
			}
		}
	}
	return nil
}

// work is what the server knows of one mutating request beside the layer:
// its decoded body, the fault it drew, and the status its handler last
// answered (0 if the handler did not run: a replay or a refusal).
type work struct {
	in      any
	fault   fault
	handled int
	keyLost bool // the key row vanished under the request (see keyRowGone)
}

type workKey struct{}

func workOf(ctx context.Context) *work {
	wk, _ := ctx.Value(workKey{}).(*work)
	return wk
}

// endpoint is a mutating endpoint: decode reads and validates its body
// (before the key is looked at; a problem changes nothing and consumes no
// key) and serve does its work, in idemserver.Tx (atomic) or in phases.
type endpoint struct {
	route  idemserver.Route
	decode func(r *http.Request, body []byte) (any, *Problem)
	serve  func(w http.ResponseWriter, r *http.Request, wk *work)
}

// mutating returns the handler of a mutating endpoint: the layer around
// serve, with e.decode as the route's Check (run once the key and the
// body are read, before the key is looked up: a problem consumes no key),
// which also draws the request's fault and applies a delay; the faults
// that act after the commit wrap the layer. Under
// Config.DisableIdempotency an atomic endpoint goes through the unkeyed
// layer instead: the same checks and transaction, no key looked up or
// stored.
func (s *Server) mutating(e endpoint) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wk := workOf(r.Context())
		wk.handled = 0
		rec := &statusRecorder{ResponseWriter: w}
		e.serve(rec, r, wk)
		wk.handled = rec.status
	})
	route := e.route
	// The handlers' transactions run at SERIALIZABLE (rule S3): a read a
	// handler writes from is then rerun on a conflict, not lost.
	route.Serializable = true
	route.Check = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		in, p := e.decode(r, body)
		if p != nil {
			writeProblem(w, p)
			return false
		}
		wk := workOf(r.Context())
		wk.in, wk.fault = in, s.dice.draw()
		return s.delayed(r.Context(), w, wk)
	}
	keys := s.keys
	if s.cfg.DisableIdempotency && !route.Phased {
		keys, route.Optional = s.unkeyed, true
	}
	layered := keys.Handle(route, inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.stats.requests.Add(1)
		wk := &work{}
		layered.ServeHTTP(&afterCommit{ResponseWriter: w, s: s, wk: wk}, r.WithContext(context.WithValue(r.Context(), workKey{}, wk)))
	})
}

// txOf returns the transaction a handler writes in.
func (s *Server) txOf(ctx context.Context) *txn {
	return &txn{tx: idemserver.Tx(ctx), d: s.db.flavor}
}

// afterCommit fires the faults that act once the request's answer is
// committed (a hang-up, a 502, a crash): when the layer sends the answer
// the handler gave, unstored answers and replays aside.
type afterCommit struct {
	http.ResponseWriter
	s       *Server
	wk      *work
	dropped bool
}

func (a *afterCommit) WriteHeader(code int) {
	if a.dropped {
		return
	}
	if a.wk.handled == 0 || a.wk.handled >= 500 || code != a.wk.handled || a.Header().Get(HeaderReplayed) != "" {
		a.ResponseWriter.WriteHeader(code)
		return
	}
	switch a.wk.fault.kind {
	case faultHangUpAfterCommit:
		a.dropped = true
		a.s.stats.fault(faultHangUpAfterCommit)
		hangUp(a.ResponseWriter)
	case faultBadGatewayAfterCommit:
		a.dropped = true
		a.s.stats.fault(faultBadGatewayAfterCommit)
		for k := range a.Header() {
			a.Header().Del(k)
		}
		writeProblem(a.ResponseWriter, problem(http.StatusBadGateway, ProblemInjectedFault, "Injected fault",
			"the request was committed but its answer was replaced by 502 (injected); retry with the same Idempotency-Key"))
	case faultCrashAfterCommit:
		a.dropped = true
		a.s.crash(a.ResponseWriter, faultCrashAfterCommit, CrashPointAfterCommit)
	default:
		a.ResponseWriter.WriteHeader(code)
	}
}

func (a *afterCommit) Write(b []byte) (int, error) {
	if a.dropped {
		return len(b), nil
	}
	return a.ResponseWriter.Write(b)
}

func (a *afterCommit) Unwrap() http.ResponseWriter { return a.ResponseWriter }
