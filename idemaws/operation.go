package idemaws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/uuid"
	"github.com/idemkit/idem"
)

// tokenMiddleware goes just before the SDK's own token middleware: it
// notes which field holds the token, and the token the caller set, before
// the SDK fills it.
type tokenMiddleware struct {
	o   *Operations
	sdk middleware.InitializeMiddleware // the SDK's token middleware; nil if the operation takes no token
}

func (*tokenMiddleware) ID() string { return tokenID }

// operationMiddleware goes last in the Initialize step, once the SDK has
// validated the input: it claims the operation, journals its intent, sets
// its token, and records how the call ended.
type operationMiddleware struct{ o *Operations }

func (*operationMiddleware) ID() string { return operationID }

// call is one call of a named operation, shared by the middlewares and the
// attempts it makes.
type call struct {
	o      *Operations
	id     string
	field  int    // the input's token field
	caller string // the token the caller set, "" if none

	claim idem.Claim
	op    idem.Operation // the operation, its intent journaled
	// replay is the recorded outcome of a completed operation, answered
	// in place of sending.
	replay *idem.Operation
	lost   <-chan struct{}

	attempts int
	resp     *http.Response // the last attempt's response; nil if it got none
	body     []byte         // its first bytes, up to the recording limit
	fits     bool           // body is the whole of it
}

type callKey struct{}

func (m *tokenMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, md middleware.Metadata, err error,
) {
	id, named := idem.OperationFrom(ctx)
	if !named {
		return next.HandleInitialize(ctx, in)
	}
	if m.sdk == nil {
		return out, md, fmt.Errorf("%w: %s.%s (operation %q)", ErrNoClientToken,
			awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx), id)
	}
	field, err := m.o.fields.field(ctx, m.sdk, in.Parameters)
	if err != nil {
		return out, md, err
	}
	c := &call{o: m.o, id: id, field: field, caller: token(in.Parameters, field)}
	return next.HandleInitialize(context.WithValue(ctx, callKey{}, c), in)
}

func (m *operationMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, md middleware.Metadata, err error,
) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok || c.claim != nil {
		return next.HandleInitialize(ctx, in)
	}
	if err := c.start(ctx, in.Parameters); err != nil {
		return out, md, err
	}
	defer c.claim.Release()

	// No attempt goes on once the claim lapses: the next holder may be
	// sending the operation.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.lost != nil {
		go func() {
			select {
			case <-c.lost:
				cancel(idem.ErrClaimLost)
			case <-ctx.Done():
			}
		}()
	}
	out, md, err = next.HandleInitialize(ctx, in)
	return out, md, c.end(ctx, err)
}

// start claims the call's operation, finds or mints its token and journals
// its intent, durably, and sets the token on input, in place of the one
// the SDK filled.
func (c *call) start(ctx context.Context, input any) error {
	what := awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx)
	fp, err := fingerprint(what, input, c.field)
	if err != nil {
		return err
	}
	claim, err := c.o.journal.Claim(ctx, c.id)
	if err != nil {
		return fmt.Errorf("idemaws: operation %q: claiming it in the journal: %w", c.id, err)
	}
	c.claim, c.lost = claim, claim.Lost()
	if err := c.admit(ctx, fp, what); err != nil {
		claim.Release()
		return err
	}
	setToken(input, c.field, c.op.Key)
	return nil
}

// admit finds the operation in the journal, or mints its token and
// journals its intent, and judges what it finds as Do does: another input
// is a mismatch, an old pending token has expired, a completed operation
// is answered from the journal.
func (c *call) admit(ctx context.Context, fp idem.Fingerprint, what string) error {
	held, found := c.claim.Operation()
	if !found {
		if c.caller != "" {
			return fmt.Errorf("%w: operation %q: the input's token is %q", ErrTokenSet, c.id, c.caller)
		}
		c.op = idem.Operation{ID: c.id, Key: uuid.NewString(), Fingerprint: fp, Method: "AWS", URL: what,
			Created: c.o.journal.Now(), State: idem.StatePending}
		err := c.claim.Begin(ctx, c.op)
		if err == nil {
			return nil
		}
		// A shared journal's claim on a new ID races with other machines'
		// until Begin: the loser's claim holds what the winner began,
		// judged below like any operation found in the journal.
		if held, found = c.claim.Operation(); !found || !errors.Is(err, idem.ErrOperationExists) {
			return fmt.Errorf("idemaws: operation %q: journaling intent: %w", c.id, err)
		}
	}
	switch {
	case held.Fingerprint != fp:
		return fmt.Errorf("idemaws: operation %q (token %s): %w: the input of %s differs from the one journaled",
			c.id, held.Key, idem.ErrMismatch, what)
	case c.caller != "" && c.caller != held.Key:
		return fmt.Errorf("%w: operation %q: the input's token is %q, the operation's %s", ErrTokenSet, c.id, c.caller, held.Key)
	case held.State == idem.StatePending && held.Expired(c.o.journal.Now(), c.o.ttl):
		return fmt.Errorf("idemaws: operation %q (token %s, minted %s): %w",
			c.id, held.Key, held.Created.Format(time.RFC3339), idem.ErrKeyExpired)
	case held.State == idem.StatePending:
		c.op = held
	case held.BodyTruncated:
		return &idem.OutcomeError{ID: c.id, Key: held.Key, Outcome: outcomeOf(held.State),
			Recorded: true, Status: held.Status, Header: held.Header, HeaderTruncated: held.HeaderTruncated, BodyTruncated: true,
			Err: fmt.Errorf("idemaws: operation %q is %s, and its response was not recorded whole, so the SDK cannot read it again: %w",
				c.id, held.State, idem.ErrBodyNotRecorded)}
	default:
		c.op, c.replay = held, &held
	}
	return nil
}

// end records how the call ended, and returns the call's error: err, or an
// *idem.OutcomeError wrapping it.
func (c *call) end(ctx context.Context, err error) error {
	switch {
	case c.replay != nil:
		if err == nil {
			return nil
		}
		return &idem.OutcomeError{ID: c.op.ID, Key: c.op.Key, Outcome: outcomeOf(c.replay.State), Recorded: true,
			Status: c.replay.Status, Header: c.replay.Header, Body: c.replay.Body, HeaderTruncated: c.replay.HeaderTruncated, Err: err}
	case c.attempts == 0:
		return err // nothing was sent (the request could not be built, say): the operation stays as it was
	}
	state := c.judge(err)
	if state == idem.StatePending {
		oe := c.outcomeError(idem.OutcomeUnknown, err)
		if errors.Is(context.Cause(ctx), idem.ErrClaimLost) && !errors.Is(err, idem.ErrClaimLost) {
			oe.Err = fmt.Errorf("%w: %w", idem.ErrClaimLost, err)
		}
		return oe
	}
	op := c.op
	op.State, op.Completed = state, c.o.journal.Now()
	op.Status, op.Header, op.Body, op.BodyTruncated = c.resp.StatusCode, c.resp.Header, c.body, !c.fits
	if !c.fits {
		op.Body = nil
	}
	// As with Do, the completion is not waited for: were it lost, the next
	// call would send again under the same token and get the API's replay.
	if cerr := c.claim.Complete(context.WithoutCancel(ctx), op); cerr != nil {
		c.o.log.Error("idemaws: recording outcome", "op", op.ID, "key", op.Key, "err", cerr)
	}
	if state == idem.StateRejected {
		return c.outcomeError(idem.OutcomeRejected, err)
	}
	return err
}

// judge returns the state a call that sent its operation ends in: Done,
// Rejected, or Pending for an unknown outcome (see Outcomes in the package
// documentation).
func (c *call) judge(err error) idem.State {
	if c.resp == nil {
		return idem.StatePending // no answer: a broken connection, the context ending, a lapsed claim
	}
	switch c.o.dialect.Read(c.resp, c.body) {
	case idem.AnswerKeyReused, idem.AnswerInFlight:
		return idem.StatePending
	case idem.AnswerApplied:
		return idem.StateDone
	case idem.AnswerRefused:
		return idem.StateRejected
	}
	switch status := c.resp.StatusCode; {
	case err == nil:
		return idem.StateDone
	case retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary:
		return idem.StatePending
	case status >= 400 && status < 500:
		return idem.StateRejected
	}
	return idem.StatePending
}

func (c *call) outcomeError(outcome idem.Outcome, err error) *idem.OutcomeError {
	oe := &idem.OutcomeError{ID: c.op.ID, Key: c.op.Key, Outcome: outcome, Attempts: c.attempts, Err: err}
	if outcome == idem.OutcomeUnknown && c.answer() == idem.AnswerKeyReused {
		oe.Err = fmt.Errorf("%w: %w", idem.ErrKeyReused, err)
	}
	if c.resp != nil {
		oe.Status, oe.Header, oe.Body, oe.BodyTruncated = c.resp.StatusCode, c.resp.Header, c.body, !c.fits
	}
	return oe
}

func (c *call) answer() idem.Answer {
	if c.resp == nil {
		return 0
	}
	return c.o.dialect.Read(c.resp, c.body)
}

func outcomeOf(s idem.State) idem.Outcome {
	if s == idem.StateRejected {
		return idem.OutcomeRejected
	}
	return idem.OutcomeDone
}
