package idemaws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// end records how the call ended, and returns the call's error: err, or
// the answer it stands for (an *idem.OutcomeError, an *AppliedError, a
// *TokenReusedError, or ErrNoOutput). result is the SDK's output.
func (c *call) end(ctx context.Context, result any, err error) error {
	switch {
	case c.replay != nil:
		return c.replayed(result, err)
	case c.attempts == 0:
		return err // nothing was sent (the request could not be built, say): the operation stays as it was
	}
	v := c.judge(err)
	if v.state == journal.StatePending {
		oe := c.outcomeError(idem.OutcomeUnknown, v.resp, err)
		switch {
		case v.why != nil:
			oe.Err = fmt.Errorf("%w: %w", v.why, err)
		case errors.Is(context.Cause(ctx), journal.ErrClaimLost) && !errors.Is(err, journal.ErrClaimLost):
			oe.Err = fmt.Errorf("%w: %w", journal.ErrClaimLost, err)
		}
		return oe
	}
	op := c.op
	op.State, op.Completed = v.state, c.o.journal.Now()
	op.Status = v.resp.StatusCode
	// How idemaws read the answer is in the marks, not in the header: a
	// server's field of a mark's name is not a mark.
	switch {
	case v.applied:
		op.Applied = true
	case v.reused:
		op.KeyReused = v.code
	}
	op.Header, op.Unrecorded, op.HeaderTruncated = journal.RecordedHeader(v.resp.Header, c.o.maxHead)
	if c.fits {
		op.Body = c.body
	} else {
		op.BodyTruncated = true
	}
	// As with Do, the completion is not waited for: were it lost, the next
	// call would send again under the same token and get the API's replay.
	if cerr := c.claim.Complete(context.WithoutCancel(ctx), op); cerr != nil {
		c.o.log.Error("idemaws: recording outcome", "op", op.ID, "key", op.Key, "err", cerr)
	}
	switch {
	case v.applied:
		return c.appliedError(err, false)
	case v.reused:
		return &TokenReusedError{ID: c.op.ID, Key: c.op.Key, Code: v.code, Status: op.Status, Err: err}
	case v.state == journal.StateRejected:
		return c.outcomeError(idem.OutcomeRejected, v.resp, err)
	}
	return err
}

// replayed returns the answer of a completed operation, read by the SDK
// from the journal's record: its output, the API's "already exists" again
// (a record marked applied), the rejection again, or ErrNoOutput for a
// done operation whose record holds no output the SDK can read (V3): an
// error of a record not marked applied, or an output of unset members
// from a record without a body.
func (c *call) replayed(result any, err error) error {
	op := c.replay
	switch {
	case op.State == journal.StateDone && err != nil && op.Applied:
		return c.appliedError(err, true)
	case op.State == journal.StateDone && (err != nil || len(op.Body) == 0 && emptyOutput(result)):
		how := ""
		if op.Settled {
			how = ", settled by hand"
			if note := op.SettledNote; note != "" {
				how += ": " + note
			}
		}
		e := fmt.Errorf("idemaws: operation %q (token %s) is done (%d%s): %w; find what it made by its token",
			op.ID, op.Key, op.Status, how, ErrNoOutput)
		if err != nil {
			e = fmt.Errorf("%w: %w", e, err)
		}
		return e
	case err == nil:
		return nil
	}
	return &idem.OutcomeError{ID: op.ID, Key: op.Key, Outcome: idem.OutcomeRejected, Recorded: true,
		Status: op.Status, Header: op.Header, Body: op.Body, HeaderTruncated: op.HeaderTruncated, Err: err}
}

// appliedError is the answer of an operation the API applied before,
// answered with err.
func (c *call) appliedError(err error, recorded bool) *AppliedError {
	id, _ := appliedBefore(c.api, c.op.Key, err)
	return &AppliedError{ID: c.op.ID, Key: c.op.Key, Code: apiCode(err), ResourceID: id, Recorded: recorded, Err: err}
}

// emptyOutput reports whether result, an SDK output, holds no member the
// API fills although its type has some: what the SDK reads from a
// response without a body.
func emptyOutput(result any) bool {
	v := reflect.ValueOf(result)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	v = v.Elem()
	members := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Type == metadataType {
			continue
		}
		members++
		if !v.Field(i).IsZero() {
			return false
		}
	}
	return members > 0
}

var metadataType = reflect.TypeFor[middleware.Metadata]()

// verdict is how a call that sent its operation ended.
type verdict struct {
	state journal.State
	resp  *http.Response // the final response; nil if none ended the call
	why   error          // for a pending one, a reason to wrap
	// applied: done by an answer that is not the output ("already
	// exists"); reused: rejected, the token held for another request,
	// with the API's code.
	applied, reused bool
	code            string
}

// judge returns how a call that sent its operation ended, read from how
// the SDK ended it: Done, Rejected, or Pending for an unknown outcome (see
// Outcomes in the package documentation), with the final response. An
// error that carries no response of this call's last attempt (the context
// ending during a wait, a lapsed claim, a step that failed before sending)
// is unknown, whatever an earlier attempt was answered.
func (c *call) judge(err error) verdict {
	if err == nil {
		return verdict{state: journal.StateDone, resp: c.resp}
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response != c.resp || c.resp == nil {
		return verdict{state: journal.StatePending}
	}
	resp := c.resp
	code := apiCode(err)
	answer := c.o.dialect.Read(resp, c.body)
	_, existed := appliedBefore(c.api, c.op.Key, err)
	var exhausted *retry.MaxAttemptsError
	switch {
	case answer == idem.AnswerKeyReused || slices.Contains(keyReusedCodes, code):
		return verdict{state: journal.StateRejected, resp: resp, reused: true, code: code}
	case answer == idem.AnswerInFlight:
		return verdict{state: journal.StatePending, resp: resp}
	case answer == idem.AnswerApplied, existed:
		return verdict{state: journal.StateDone, resp: resp, applied: true}
	case answer == idem.AnswerRefused:
		return verdict{state: journal.StateRejected, resp: resp}
	case errors.As(err, &exhausted),
		retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary:
		return verdict{state: journal.StatePending, resp: resp} // the retryer would have sent again
	case slices.Contains(unauthenticatedCodes, code) || strings.HasSuffix(code, "SignatureException"):
		// Refused before the API looked at the request; an earlier attempt
		// may still have been applied, so the next call sends again.
		return verdict{state: journal.StatePending, resp: resp}
	case resp.StatusCode == http.StatusConflict:
		return verdict{state: journal.StatePending, resp: resp} // a request with the token may be in progress
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return verdict{state: journal.StateRejected, resp: resp}
	}
	return verdict{state: journal.StatePending, resp: resp}
}

// keyReusedCodes are AWS's error codes for a token sent again with other
// parameters, whatever the protocol (EC2's XML carries no header the
// dialect could read).
var keyReusedCodes = []string{"ClientTokenConflictException", "IdempotentParameterMismatch", "IdempotentParameterMismatchException",
	"IdempotencyParameterMismatchException"}

// unauthenticatedCodes are AWS's error codes for a request refused before
// the API read it: its signature or credentials.
var unauthenticatedCodes = []string{
	"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
	"SignatureDoesNotMatch", "IncompleteSignature", "MissingAuthenticationToken", "RequestExpired",
	"InvalidAccessKeyId", "AuthFailure",
}

func (c *call) outcomeError(outcome idem.Outcome, resp *http.Response, err error) *idem.OutcomeError {
	oe := &idem.OutcomeError{ID: c.op.ID, Key: c.op.Key, Outcome: outcome, Attempts: c.attempts, Err: err}
	if resp != nil {
		oe.Status, oe.Body, oe.BodyTruncated = resp.StatusCode, c.body, !c.fits
		oe.Header, _, oe.HeaderTruncated = journal.RecordedHeader(resp.Header, c.o.maxHead)
	}
	return oe
}
