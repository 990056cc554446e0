package idemaws

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// Config configures Operations. The zero value of every field but Journal
// is its default.
type Config struct {
	// Journal keeps each operation's token and outcome. Required: a file
	// journal (filejournal.Open) or a shared one (pgjournal).
	Journal journal.Journal

	// Dialect reads the API's answers: which errors mean the token was
	// reused with other parameters, or that the operation was applied
	// before. Default idem.AWSCloudControl(). Its key placement is not used:
	// the SDK places the token. Its Retention, when Dialect is set, is the
	// KeyTTL of an operation whose token lifetime AWS does not document.
	Dialect *idem.Dialect

	// KeyTTL bounds how long a token is sent: a pending operation whose
	// token is older is refused with idem.ErrKeyExpired rather than sent
	// again. Each operation's own is the lifetime AWS documents for its
	// token (TokenFor), which KeyTTL caps when set. An operation without
	// a documented lifetime takes KeyTTL, else the Dialect's Retention,
	// else idem.DefaultKeyTTL. The lifetime is recorded with the
	// operation's intent, and a resumed operation is judged by the one
	// it recorded.
	KeyTTL time.Duration

	// Tokens names the idempotency token member of operations, by
	// "ServiceID.Operation" ("Route 53.CreateKeySigningKey", the service
	// package's ServiceID constant): an operation the AWS models idemaws
	// carries do not know, or know wrongly. An entry takes the place of
	// what idemaws knows of the operation.
	Tokens map[string]Token

	// MaxRecordedBody is the most of a response body the journal records.
	// A completed operation whose body was larger is answered from the
	// journal with an error matching idem.ErrBodyNotRecorded. Default
	// idem.DefaultMaxRecordedBody.
	MaxRecordedBody int64

	// MaxRecordedHeader bounds the response header the journal records,
	// as idem.Config.MaxRecordedHeader does for Do. Default
	// idem.DefaultMaxRecordedHeader.
	MaxRecordedHeader int64

	// Logger receives what cannot be returned: an outcome the journal
	// failed to record. Default slog.Default().
	Logger *slog.Logger
}

// Operations makes the AWS SDK's calls that name an operation
// idempotent through a journal: see the package documentation. It is safe
// for concurrent use, by any number of clients.
type Operations struct {
	journal    journal.Journal
	dialect    idem.Dialect
	ttl        time.Duration // Config.KeyTTL; 0 unset
	defaultTTL time.Duration // for an operation without a documented lifetime
	tokens     map[string]Token
	maxBody    int64
	maxHead    int64
	log        *slog.Logger
	fields     tokenFields
}

// New returns Operations configured by o. It refuses, with an error
// matching idem.ErrInvalidConfig, a nil Journal, a negative limit, or a
// Token it cannot mint a token for.
func New(o Config) (*Operations, error) {
	switch {
	case o.Journal == nil:
		return nil, fmt.Errorf("idemaws: %w: Config.Journal is required", idem.ErrInvalidConfig)
	case o.KeyTTL < 0:
		return nil, fmt.Errorf("idemaws: %w: Config.KeyTTL %v is negative", idem.ErrInvalidConfig, o.KeyTTL)
	case o.MaxRecordedBody < 0:
		return nil, fmt.Errorf("idemaws: %w: Config.MaxRecordedBody %d is negative", idem.ErrInvalidConfig, o.MaxRecordedBody)
	case o.MaxRecordedHeader < 0:
		return nil, fmt.Errorf("idemaws: %w: Config.MaxRecordedHeader %d is negative", idem.ErrInvalidConfig, o.MaxRecordedHeader)
	}
	for key, t := range o.Tokens {
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("idemaws: %w: Config.Tokens[%q]: %w", idem.ErrInvalidConfig, key, err)
		}
	}
	ops := &Operations{journal: o.Journal, dialect: idem.AWSCloudControl(), ttl: o.KeyTTL, tokens: o.Tokens,
		maxBody: o.MaxRecordedBody, maxHead: o.MaxRecordedHeader, log: o.Logger}
	if o.Dialect != nil {
		ops.dialect = *o.Dialect
		ops.defaultTTL = o.Dialect.Retention
	}
	if ops.defaultTTL == 0 {
		ops.defaultTTL = idem.DefaultKeyTTL
	}
	if ops.maxBody == 0 {
		ops.maxBody = idem.DefaultMaxRecordedBody
	}
	if ops.maxHead == 0 {
		ops.maxHead = idem.DefaultMaxRecordedHeader
	}
	if ops.log == nil {
		ops.log = slog.Default()
	}
	return ops, nil
}

// The SDK's middleware that fills a missing client token, and the IDs of
// the four idemaws adds to a stack.
const (
	sdkTokenMiddleware = "OperationIdempotencyTokenAutoFill"
	tokenID            = "IdemToken"
	operationID        = "IdemOperation"
	replayID           = "IdemReplay"
	attemptID          = "IdemAttempt"
)

// Install adds the Operations' middlewares to an operation's stack. It is
// an API option: append it to aws.Config.APIOptions, or to a client's
// Config.APIOptions, so that every operation of the client gets it.
//
// Four middlewares: in the Initialize step, one first finds the token
// member, notes the caller's token and, when the member is empty, holds
// its place so that the SDK's own token middleware and input validation
// take the input (a required CallerReference among them); one last, once
// the SDK has validated the input, claims the operation, journals its
// intent and sets its token, before the input is serialized and signed
// and outside the retry loop; in the Deserialize step, one first keeps the
// SDK's retryer from retrying a recorded answer, and one last, next to the
// transport, sees every attempt.
func (o *Operations) Install(stack *middleware.Stack) error {
	// The middlewares of this stack find their call under a key of their
	// own, so that an SDK call made inside it (a credentials provider's,
	// say) is not taken for one of its attempts.
	key := new(callKey)
	sdk, _ := stack.Initialize.Get(sdkTokenMiddleware)
	err := stack.Initialize.Add(&tokenMiddleware{o: o, sdk: sdk, key: key}, middleware.Before)
	if err == nil {
		err = stack.Initialize.Add(&operationMiddleware{key: key}, middleware.After)
	}
	if err == nil {
		err = stack.Deserialize.Add(&replayMiddleware{key: key}, middleware.Before)
	}
	if err == nil {
		err = stack.Deserialize.Add(&attemptMiddleware{key: key}, middleware.After)
	}
	if err != nil {
		return fmt.Errorf("idemaws: installing: %w", err)
	}
	return nil
}
