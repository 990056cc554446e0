package idemaws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idemkit/idem"
)

// end records how the call ended, and returns the call's error: err, or an
// *idem.OutcomeError wrapping it.
func (c *call) end(ctx context.Context, err error) error {
	switch {
	case c.replay != nil:
		if err == nil {
			return nil
		}
		return &idem.OutcomeError{ID: c.op.ID, Key: c.op.Key, Outcome: idem.OutcomeRejected, Recorded: true,
			Status: c.replay.Status, Header: c.replay.Header, Body: c.replay.Body, HeaderTruncated: c.replay.HeaderTruncated, Err: err}
	case c.attempts == 0:
		return err // nothing was sent (the request could not be built, say): the operation stays as it was
	}
	state, resp, why := c.judge(err)
	if state == idem.StatePending {
		oe := c.outcomeError(idem.OutcomeUnknown, resp, err)
		switch {
		case why != nil:
			oe.Err = fmt.Errorf("%w: %w", why, err)
		case errors.Is(context.Cause(ctx), idem.ErrClaimLost) && !errors.Is(err, idem.ErrClaimLost):
			oe.Err = fmt.Errorf("%w: %w", idem.ErrClaimLost, err)
		}
		return oe
	}
	op := c.op
	op.State, op.Completed = state, c.o.journal.Now()
	op.Status = resp.StatusCode
	op.Header, op.HeaderTruncated = idem.RecordedHeader(resp.Header, c.o.maxHead)
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
	if state == idem.StateRejected {
		return c.outcomeError(idem.OutcomeRejected, resp, err)
	}
	return err
}

// judge returns the state a call that sent its operation ends in, read from
// how the SDK ended it: Done, Rejected, or Pending for an unknown outcome
// (see Outcomes in the package documentation), with the final response and,
// for a pending one, a reason to wrap (ErrKeyReused). An error that carries
// no response of this call's last attempt (the context ending during a
// wait, a lapsed claim, a step that failed before sending) is unknown,
// whatever an earlier attempt was answered.
func (c *call) judge(err error) (idem.State, *http.Response, error) {
	if err == nil {
		return idem.StateDone, c.resp, nil
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response != c.resp || c.resp == nil {
		return idem.StatePending, nil, nil
	}
	resp := c.resp
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	answer := c.o.dialect.Read(resp, c.body)
	var exhausted *retry.MaxAttemptsError
	switch {
	case answer == idem.AnswerKeyReused || slices.Contains(keyReusedCodes, code):
		return idem.StatePending, resp, idem.ErrKeyReused
	case answer == idem.AnswerInFlight:
		return idem.StatePending, resp, nil
	case answer == idem.AnswerApplied:
		return idem.StateDone, resp, nil
	case answer == idem.AnswerRefused:
		return idem.StateRejected, resp, nil
	case errors.As(err, &exhausted),
		retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary:
		return idem.StatePending, resp, nil // the retryer would have sent again
	case slices.Contains(unauthenticatedCodes, code) || strings.HasSuffix(code, "SignatureException"):
		// Refused before the API looked at the request; an earlier attempt
		// may still have been applied, so the next call sends again.
		return idem.StatePending, resp, nil
	case resp.StatusCode == http.StatusConflict:
		return idem.StatePending, resp, nil // a request with the token may be in progress
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return idem.StateRejected, resp, nil
	}
	return idem.StatePending, resp, nil
}

// keyReusedCodes are AWS's error codes for a token sent again with other
// parameters, whatever the protocol (EC2's XML carries no header the
// dialect could read).
var keyReusedCodes = []string{"ClientTokenConflictException", "IdempotentParameterMismatch", "IdempotentParameterMismatchException"}

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
		oe.Header, oe.HeaderTruncated = idem.RecordedHeader(resp.Header, c.o.maxHead)
	}
	return oe
}
