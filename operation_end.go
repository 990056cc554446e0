package idem

import (
	"context"
	"errors"
	"time"
)

// OperationEnd describes how one call of an operation ended, for
// Config.OnOperation.
type OperationEnd struct {
	ID  string // the operation ID ("" for a request without one)
	Key string // the key the operation carries; "" if refused before it was known
	// Outcome is zero when the call was refused before anything was sent;
	// Err then says why.
	Outcome  Outcome
	Recorded bool            // the outcome was answered from the journal
	Attempts int             // attempts this call made
	Status   int             // the final status, or the last one for Unknown; 0 if none
	Err      error           // for Unknown, why retrying stopped; for a refusal, the error
	Elapsed  time.Duration   // how long the call took
	Context  context.Context // as Config.OnOperationStart returned it
}

// endOf describes how a call of operation id ended, with res and err,
// after took.
func endOf(id string, res result, err error, took time.Duration) OperationEnd {
	e := OperationEnd{ID: id, Key: res.op.Key, Elapsed: took}
	var oe *OutcomeError
	switch {
	case err == nil:
		e.Outcome, e.Recorded, e.Attempts, e.Status = res.outcome, res.n == 0, res.n, res.resp.StatusCode
	case errors.As(err, &oe):
		e.Key, e.Outcome, e.Attempts, e.Status, e.Err = oe.Key, oe.Outcome, oe.Attempts, oe.Status, oe.Err
	default:
		e.Err = err
	}
	return e
}
