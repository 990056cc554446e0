package faultsuite

import (
	"errors"

	"github.com/idemkit/idem"
)

// Result is how one Do of an operation ended, as the client saw it.
type Result uint8

// The results of a Do.
const (
	// ResultDone: Do returned the server's final response.
	ResultDone Result = iota + 1
	// ResultRejected: the server refused the operation (an OutcomeError
	// matching idem.ErrRejected).
	ResultRejected
	// ResultUnknown: retrying stopped without a final answer (an
	// OutcomeError matching idem.ErrUnknown); the operation stays pending.
	ResultUnknown
	// ResultRefused: the client refused before sending: an expired key,
	// a mismatch, a journal failure.
	ResultRefused
)

var resultNames = [...]string{ResultDone: "done", ResultRejected: "rejected", ResultUnknown: "unknown", ResultRefused: "refused"}

// String returns "done", "rejected", "unknown" or "refused".
func (r Result) String() string {
	if int(r) < len(resultNames) && resultNames[r] != "" {
		return resultNames[r]
	}
	return "invalid"
}

// parseResult is the inverse of String.
func parseResult(s string) (Result, bool) {
	for r, name := range resultNames {
		if name != "" && name == s {
			return Result(r), true
		}
	}
	return 0, false
}

// ResultOf classifies the error of a Do: nil is done.
func ResultOf(err error) Result {
	switch {
	case err == nil:
		return ResultDone
	case errors.Is(err, idem.ErrUnknown):
		return ResultUnknown
	case errors.Is(err, idem.ErrRejected):
		return ResultRejected
	}
	return ResultRefused
}

// Recorder receives what a client observes of its operations. A *Checker
// records them; an EventWriter forwards them from a child process to the
// Checker of its parent.
type Recorder interface {
	// Attempt is one attempt of op carrying key, as Config.OnAttempt
	// reports it.
	Attempt(op, key string)
	// Failure is one failed attempt, by cause (see CauseOf and
	// ObserveFailures).
	Failure(cause string)
	// Replayed is one response the server replayed from a stored key
	// (Idempotent-Replayed: true), as it reached the client.
	Replayed()
	// Outcome is how one Do of op ended.
	Outcome(op string, r Result)
	// Final is the answer a Do of op ended done with: its status, and
	// whether the API said it had applied op before without replaying
	// its answer (idem.AlreadyApplied).
	Final(op string, status int, applied bool)
	// Resumed says op was pending in the journal when a client that had
	// been killed started again: its outcome was unknown.
	Resumed(op string)
}

// Instrument sets cfg up to report to rec: every attempt through
// OnAttempt (chained after one already set) and every failed exchange
// through the transport of cfg.HTTPClient (see ObserveFailures), which it
// replaces by a copy.
func Instrument(cfg *idem.Config, rec Recorder) {
	prev := cfg.OnAttempt
	cfg.OnAttempt = func(a idem.Attempt) {
		rec.Attempt(a.ID, a.Key)
		if prev != nil {
			prev(a)
		}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = newPooledClient()
	}
	observed := *hc
	observed.Transport = ObserveFailures(hc.Transport, rec)
	cfg.HTTPClient = &observed
}
