package idemaws

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
)

// Errors of a call refused before anything was sent.
var (
	// ErrNoClientToken: the call names an operation (idem.WithOperation),
	// but the AWS operation takes no client token, so its API cannot tell
	// a retry from a new request.
	ErrNoClientToken = errors.New("idemaws: the AWS operation takes no client token")

	// ErrTokenSet: the input already carries a client token, and it is not
	// the operation's. idemaws sets the token; leave it unset.
	ErrTokenSet = errors.New("idemaws: the input carries a client token of its own")
)

// Options configures Operations. The zero value of every field but Journal
// is its default.
type Options struct {
	// Journal keeps each operation's token and outcome. Required: a file
	// journal (filejournal.Open) or a shared one (pgjournal).
	Journal idem.Journal

	// Dialect reads the API's answers: which errors mean the token was
	// reused with other parameters. Default idem.AWSCloudControl. Its key
	// placement is not used: the SDK places the token.
	Dialect *idem.Dialect

	// KeyTTL is how long the API keeps a token: a pending operation whose
	// token is older is refused with idem.ErrKeyExpired rather than sent
	// again. Default: the dialect's Retention, else the journal's KeyTTL.
	// AWS APIs keep tokens from minutes to days: set the API's own.
	KeyTTL time.Duration

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
	journal idem.Journal
	dialect idem.Dialect
	ttl     time.Duration
	maxBody int64
	maxHead int64
	log     *slog.Logger
	fields  tokenFields
}

// New returns Operations configured by o. It refuses, with an error
// matching idem.ErrInvalidConfig, a nil Journal or a negative limit.
func New(o Options) (*Operations, error) {
	switch {
	case o.Journal == nil:
		return nil, fmt.Errorf("idemaws: %w: Options.Journal is required", idem.ErrInvalidConfig)
	case o.KeyTTL < 0:
		return nil, fmt.Errorf("idemaws: %w: Options.KeyTTL %v is negative", idem.ErrInvalidConfig, o.KeyTTL)
	case o.MaxRecordedBody < 0:
		return nil, fmt.Errorf("idemaws: %w: Options.MaxRecordedBody %d is negative", idem.ErrInvalidConfig, o.MaxRecordedBody)
	case o.MaxRecordedHeader < 0:
		return nil, fmt.Errorf("idemaws: %w: Options.MaxRecordedHeader %d is negative", idem.ErrInvalidConfig, o.MaxRecordedHeader)
	}
	ops := &Operations{journal: o.Journal, dialect: idem.AWSCloudControl, ttl: o.KeyTTL,
		maxBody: o.MaxRecordedBody, maxHead: o.MaxRecordedHeader, log: o.Logger}
	if o.Dialect != nil {
		ops.dialect = *o.Dialect
	}
	if ops.ttl == 0 {
		ops.ttl = ops.dialect.Retention
	}
	if ops.ttl == 0 {
		ops.ttl = o.Journal.KeyTTL()
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
// Options.APIOptions, so that every operation of the client gets it.
//
// Four middlewares: in the Initialize step, one just before the SDK's own
// token middleware notes the caller's token, and one last, once the SDK
// has validated the input, claims the operation, journals its intent and
// sets its token, before the input is serialized and signed and outside
// the retry loop; in the Deserialize step, one first keeps the SDK's
// retryer from retrying a recorded answer, and one last, next to the
// transport, sees every attempt.
func (o *Operations) Install(stack *middleware.Stack) error {
	// The middlewares of this stack find their call under a key of their
	// own, so that an SDK call made inside it (a credentials provider's,
	// say) is not taken for one of its attempts.
	key := new(callKey)
	sdk, takesToken := stack.Initialize.Get(sdkTokenMiddleware)
	tm := &tokenMiddleware{o: o, sdk: sdk, key: key}
	var err error
	if takesToken {
		err = stack.Initialize.Insert(tm, sdkTokenMiddleware, middleware.Before)
	} else {
		err = stack.Initialize.Add(tm, middleware.After)
	}
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
