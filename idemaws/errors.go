package idemaws

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/aws/smithy-go"
	"github.com/idemkit/idem"
)

// Errors of a call refused before anything was sent.
var (
	// ErrNoClientToken: the call names an operation (idem.WithOperation),
	// but idemaws knows no idempotency token member of the AWS operation:
	// the AWS models it carries give it none, the SDK fills none, and
	// Config.Tokens names none.
	ErrNoClientToken = errors.New("idemaws: the AWS operation takes no client token idemaws knows")

	// ErrTokenSet: the input already carries a client token, and it is not
	// the operation's. idemaws sets the token; leave it unset.
	ErrTokenSet = errors.New("idemaws: the input carries a client token of its own")
)

// Answers of an operation that ended without an output.
var (
	// ErrAlreadyApplied matches an *AppliedError.
	ErrAlreadyApplied = errors.New("idemaws: the API applied the operation before, and answered it with an error")

	// ErrNoOutput: the operation is done, but the journal holds no answer
	// the SDK can read as its output: it was settled by hand, or its
	// response was not recorded whole. Find what it made by its token.
	ErrNoOutput = errors.New("idemaws: the operation is done, but the journal holds no output of it")
)

// AppliedError is the answer of an operation the API says it applied
// before under its token, with an error instead of the operation's output:
// "already exists" (EFS's FileSystemAlreadyExists, Route 53's
// HostedZoneAlreadyExists), or an answer Config.Dialect reads as applied.
// The operation is done: the journal records it so, and answers every
// later call with this error again, Recorded. errors.Is(err,
// ErrAlreadyApplied) holds, and errors.As reaches the SDK's own error (a
// *types.FileSystemAlreadyExists, say). Neither idem.ErrRejected nor
// idem.ErrUnknown matches it.
type AppliedError struct {
	ID  string // the operation ID
	Key string // the token the operation was sent with, the API's name for what it made

	// Code is the API's error code ("FileSystemAlreadyExists").
	Code string
	// ResourceID is the ID of what the operation made, when the API's
	// answer carries it (EFS's FileSystemId); "" when it does not (Route
	// 53's HostedZoneAlreadyExists): find it by Key.
	ResourceID string

	Recorded bool  // answered from the journal
	Err      error // the SDK's error
}

// Error names the operation, its token, the API's code and the resource's
// ID when known.
func (e *AppliedError) Error() string {
	msg := fmt.Sprintf("idemaws: operation %q (token %s) was applied before: the API answers %s", e.ID, e.Key, e.Code)
	if e.ResourceID != "" {
		msg += " for " + e.ResourceID
	}
	if e.Recorded {
		msg += " (from the journal)"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the SDK's error.
func (e *AppliedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrAlreadyApplied.
func (e *AppliedError) Is(target error) bool { return target == ErrAlreadyApplied }

// TokenReusedError is the final answer of an operation whose token the
// API holds for another request (IdempotentParameterMismatch,
// ClientTokenConflictException): the API will not apply this one under
// it, and a request sent under it may have been applied. idemaws records
// it and sends the operation no more: every later call is answered with
// this error again, Recorded. errors.Is(err, idem.ErrKeyReused) holds;
// neither idem.ErrRejected nor idem.ErrUnknown matches it. A person
// resolves it: see docs/vendor-sdks.md.
type TokenReusedError struct {
	ID   string // the operation ID
	Key  string // its token
	Code string // the API's error code

	Status   int   // the answer's status code
	Recorded bool  // answered from the journal
	Err      error // the SDK's error; nil when answered from the journal
}

// Error names the operation, its token and the API's code.
func (e *TokenReusedError) Error() string {
	msg := fmt.Sprintf("idemaws: operation %q (token %s): the API holds the token for another request (%s, %d); it is not sent again",
		e.ID, e.Key, e.Code, e.Status)
	if e.Recorded {
		msg += " (from the journal)"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the SDK's error.
func (e *TokenReusedError) Unwrap() error { return e.Err }

// Is reports whether target is idem.ErrKeyReused.
func (e *TokenReusedError) Is(target error) bool { return target == idem.ErrKeyReused }

// apiCode returns the AWS error code err carries, "" if none.
func apiCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// apiField returns the string field name of the AWS error err carries,
// "" if it has none.
func apiField(err error, name string) string {
	var api smithy.APIError
	if name == "" || !errors.As(err, &api) {
		return ""
	}
	v := reflect.ValueOf(api)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return ""
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || !isStringPointer(f.Type()) || f.IsNil() {
		return ""
	}
	return f.Elem().String()
}
