package idemaws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// tokenMiddleware goes first in the Initialize step: it finds which
// member holds the token, notes the token the caller set, and holds the
// place of an empty one until the operation's token is set.
type tokenMiddleware struct {
	o   *Operations
	sdk middleware.InitializeMiddleware // the SDK's token middleware; nil if it fills none
	key *callKey
}

func (*tokenMiddleware) ID() string { return tokenID }

// operationMiddleware goes last in the Initialize step, once the SDK has
// validated the input: it claims the operation, journals its intent, sets
// its token, and records how the call ended.
type operationMiddleware struct{ key *callKey }

func (*operationMiddleware) ID() string { return operationID }

// call is one call of a named operation, shared by the middlewares and the
// attempts it makes.
type call struct {
	o      *Operations
	id     string
	api    string // "ServiceID.Operation"
	spec   tokenSpec
	ttl    time.Duration // how long the API keeps the operation's token
	path   tokenPath     // where the input's token is
	caller string        // the token the caller set, "" if none
	// placeholder: the caller left the token unset, and tokenMiddleware
	// holds its place; tokenSet: start set the operation's token.
	placeholder, tokenSet bool

	claim journal.Claim
	op    journal.Operation // the operation, its intent journaled
	// replay is the recorded outcome of a completed operation, answered
	// in place of sending.
	replay *journal.Operation
	lost   <-chan struct{}

	attempts int
	resp     *http.Response // the last attempt's response; nil if it got none
	body     []byte         // its first bytes, up to the recording limit
	fits     bool           // body is the whole of it
}

// callKey is the context key under which one stack's middlewares find
// their call: a pointer of each stack's own.
type callKey struct{ _ byte }

func (m *tokenMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, md middleware.Metadata, err error,
) {
	id, named := idem.OperationFrom(ctx)
	if !named {
		return next.HandleInitialize(ctx, in)
	}
	service, operation := middleware.GetServiceID(ctx), middleware.GetOperationName(ctx)
	if service == "" {
		service = awsmiddleware.GetServiceID(ctx)
	}
	api := service + "." + operation
	spec, callers, err := m.o.spec(ctx, m.sdk, api, in.Parameters)
	if err != nil {
		return out, md, fmt.Errorf("%w (operation %q)", err, id)
	}
	path, err := m.o.fields.path(in.Parameters, spec.member)
	if err != nil {
		return out, md, fmt.Errorf("idemaws: %w: %s (operation %q): its token member %s: %w; name it in Config.Tokens",
			ErrNoClientToken, api, id, spec.member, err)
	}
	c := &call{o: m.o, id: id, api: api, spec: spec, ttl: m.o.resolvedTTL(service, spec, callers),
		path: path, caller: token(in.Parameters, path)}
	// An empty token member holds a placeholder until the operation's
	// token is set, so that the SDK's validation takes an input whose
	// token it requires (Route 53's CallerReference) and its own token
	// middleware fills none. An input the SDK refuses gets its member
	// back as it was, and journals nothing.
	if f, ok := path.field(in.Parameters); ok && f.IsNil() {
		setToken(in.Parameters, path, "")
		c.placeholder = true
	}
	out, md, err = next.HandleInitialize(context.WithValue(ctx, m.key, c), in)
	if c.placeholder && !c.tokenSet {
		clearToken(in.Parameters, path)
	}
	return out, md, err
}

// spec returns what is known of the token of operation api: the caller's
// Config.Tokens entry (callers), else the AWS models', else the member the
// SDK's token middleware fills.
func (o *Operations) spec(ctx context.Context, sdk middleware.InitializeMiddleware, api string, input any) (s tokenSpec, callers bool, err error) {
	if t, ok := o.tokens[api]; ok {
		return specOf(t), true, nil
	}
	if s, ok := sdkTokens[api]; ok {
		return s, false, nil
	}
	if sdk == nil {
		return tokenSpec{}, false, fmt.Errorf("%w: %s", ErrNoClientToken, api)
	}
	member, err := o.fields.probe(ctx, sdk, input)
	return tokenSpec{member: member, filled: true}, false, err
}

func (m *operationMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, md middleware.Metadata, err error,
) {
	c, ok := ctx.Value(m.key).(*call)
	if !ok {
		return next.HandleInitialize(ctx, in)
	}
	if err := c.start(ctx, in.Parameters); err != nil {
		return out, md, err
	}
	defer c.claim.Release()
	// The operation is this call's alone: an SDK call made inside it (a
	// credentials provider's) or an idem StandardClient below it must
	// not take it for theirs.
	ctx = idem.WithOperation(ctx, "")

	// No attempt goes on once the claim lapses: the next holder may be
	// sending the operation.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.lost != nil {
		go func() {
			select {
			case <-c.lost:
				cancel(journal.ErrClaimLost)
			case <-ctx.Done():
			}
		}()
	}
	out, md, err = next.HandleInitialize(ctx, in)
	return out, md, c.end(ctx, out.Result, err)
}

// start claims the call's operation, finds or mints its token and journals
// its intent, durably, and sets the token on input, in place of the one
// the SDK filled.
func (c *call) start(ctx context.Context, input any) error {
	// What the operation is, for the fingerprint and for people reading
	// the journal: the service, the operation and the region.
	what := awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx) + " in " + awsmiddleware.GetRegion(ctx)
	if _, ok := c.path.field(input); !ok {
		return fmt.Errorf("idemaws: %w: operation %q: the input of %s has no %s to hold its token",
			idem.ErrInvalidRequest, c.id, what, c.spec.member)
	}
	fp, err := fingerprint(what, input, c.path)
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
	setToken(input, c.path, c.op.Key)
	c.tokenSet = true
	return nil
}

// admit finds the operation in the journal, or mints its token and
// journals its intent, and judges what it finds as Do does: another input
// is a mismatch, an old pending token has expired, a completed operation
// is answered from the journal.
func (c *call) admit(ctx context.Context, fp journal.Fingerprint, what string) error {
	held, found := c.claim.Operation()
	if !found {
		if c.caller != "" {
			return fmt.Errorf("%w: operation %q: the input's token is %q", ErrTokenSet, c.id, c.caller)
		}
		key, err := mint(c.spec)
		if err != nil {
			return fmt.Errorf("idemaws: %w: operation %q: minting a token for %s: %w", idem.ErrInvalidConfig, c.id, c.api, err)
		}
		c.op = journal.Operation{ID: c.id, Key: key, Fingerprint: fp, Method: "AWS", URL: what,
			Created: c.o.journal.Now(), KeyTTL: c.ttl, State: journal.StatePending}
		err = c.claim.Begin(ctx, c.op)
		if err == nil {
			return nil
		}
		// A shared journal's claim on a new ID races with other machines'
		// until Begin: the loser's claim holds what the winner began,
		// judged below like any operation found in the journal.
		if held, found = c.claim.Operation(); !found || !errors.Is(err, journal.ErrOperationExists) {
			return fmt.Errorf("idemaws: operation %q: journaling intent: %w", c.id, err)
		}
	}
	switch {
	case held.Fingerprint != fp:
		return fmt.Errorf("idemaws: operation %q (token %s): %w: the input of %s differs from the one journaled",
			c.id, held.Key, idem.ErrMismatch, what)
	case c.caller != "" && c.caller != held.Key:
		return fmt.Errorf("%w: operation %q: the input's token is %q, the operation's %s", ErrTokenSet, c.id, c.caller, held.Key)
	case held.State == journal.StatePending && !usable(c.o.journal.Now(), held.Created, held.KeyTTL):
		return fmt.Errorf("idemaws: operation %q (token %s, minted %s): %w",
			c.id, held.Key, held.Created.Format(time.RFC3339), idem.ErrKeyExpired)
	case held.State == journal.StatePending:
		c.op = held
	case held.State == journal.StateRejected && held.KeyReused != "":
		return &TokenReusedError{ID: c.id, Key: held.Key, Code: held.KeyReused, Status: held.Status, Recorded: true}
	case held.BodyTruncated && held.State == journal.StateRejected:
		return &idem.OutcomeError{ID: c.id, Key: held.Key, Outcome: idem.OutcomeRejected,
			Recorded: true, Status: held.Status, Header: held.Header, HeaderTruncated: held.HeaderTruncated, BodyTruncated: true,
			Err: fmt.Errorf("idemaws: operation %q was rejected with %d, and its response was not recorded whole, so the SDK cannot read it again: %w",
				c.id, held.Status, idem.ErrBodyNotRecorded)}
	case held.BodyTruncated:
		return fmt.Errorf("idemaws: operation %q (token %s) is done (%d), and its response was not recorded whole, so the SDK cannot read it again: %w: %w",
			c.id, held.Key, held.Status, ErrNoOutput, idem.ErrBodyNotRecorded)
	default:
		c.op, c.replay = held, &held
	}
	return nil
}

// usable reports whether a token minted at created may still be sent at
// now: the API keeps it for ttl, the lifetime its operation records, and
// an attempt needs time to reach it (attemptAllowance).
func usable(now, created time.Time, ttl time.Duration) bool {
	return now.Add(attemptAllowance(ttl)).Sub(created) < ttl
}

// attemptAllowance is how long before the key TTL ends a token is no longer
// sent: a minute, or a tenth of a shorter TTL.
func attemptAllowance(ttl time.Duration) time.Duration { return min(time.Minute, ttl/10) }
