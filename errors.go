package idem

import (
	"errors"
	"fmt"
	"net/http"

	"strings"

	"github.com/idemkit/idem/internal/journalkit"
)

// Errors of Client.Do and New, wrapped with what was being done; test for
// them with errors.Is.
var (
	// ErrMismatch is returned when the operation ID is known with a
	// different method, URL or body. Use a new operation ID for a new
	// request.
	ErrMismatch = errors.New("operation ID reused with a different request")
	// ErrKeyExpired is returned when the pending operation's key may be
	// forgotten by the server before an attempt ends (see Keys and expiry).
	ErrKeyExpired = errors.New("pending operation's key has outlived the server's retention")
	// ErrInvalidRequest is returned when the request or operation ID cannot
	// be sent as an operation (no URL, an unsupported scheme, an empty ID...).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrInvalidConfig is returned when New is given a Config it cannot use.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrBodyTooLarge is returned when a body without GetBody is larger
	// than Config.MaxBufferedBody. It also matches ErrInvalidRequest.
	ErrBodyTooLarge = fmt.Errorf("%w: body without GetBody is larger than Config.MaxBufferedBody", ErrInvalidRequest)
	// ErrBodyNotRecorded is returned when the body of a recorded response
	// was not kept.
	ErrBodyNotRecorded = errors.New("response body not recorded")
	// ErrTooManyOperations is returned when a Client without a Journal
	// holds Config.MaxOperations operations (see Config.Journal).
	ErrTooManyOperations = errors.New("too many operations remembered without a journal")
	// ErrKeyReused is returned, in an unknown *OutcomeError, when the API
	// holds the key for a different request (AnswerKeyReused).
	ErrKeyReused = errors.New("the API holds the key for a different request")
	// ErrBodyNotObject is returned when the body cannot carry
	// Dialect.KeyField. It also matches ErrInvalidRequest.
	ErrBodyNotObject = fmt.Errorf("%w: the dialect puts the key in the body, which must be a JSON object without the key's field", ErrInvalidRequest)
	// ErrCannotResend is returned when a Resend option chose an operation
	// the Journal cannot forget (it is not a journal.Forgetter).
	ErrCannotResend = errors.New("journal cannot forget a refusal to send it again")
	// ErrRejected is matched by an OutcomeRejected *OutcomeError.
	ErrRejected = errors.New("operation rejected")
	// ErrUnknown is matched by an OutcomeUnknown *OutcomeError.
	ErrUnknown = errors.New("operation outcome unknown")
)

// Outcome is what became of an operation (see Outcomes).
type Outcome uint8

const (
	OutcomeDone     Outcome = iota + 1 // a final answer that applied the operation
	OutcomeRejected                    // a final answer that did not apply it
	OutcomeUnknown                     // no final answer yet: the operation stays pending
)

// String returns "done", "rejected" or "unknown".
func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeRejected:
		return "rejected"
	case OutcomeUnknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// OutcomeError reports an operation that did not end done: rejected, or
// unknown (see ErrRejected and ErrUnknown). Unwrap returns Err.
type OutcomeError struct {
	ID      string  // the caller's operation ID ("" for a request without one)
	Key     string  // the idempotency key every attempt carried
	Outcome Outcome // OutcomeRejected or OutcomeUnknown
	// Attempts counts the attempts this Do made, a lower bound on what
	// reached the server (net/http may resend on a fresh connection).
	Attempts int
	Recorded bool        // the rejection was answered from the journal
	Status   int         // the last response's status code; 0 if none
	Header   http.Header // the last response's header; nil if none
	// Body is the last response's body, or its first bytes (see
	// Config.MaxRecordedBody).
	Body            []byte
	BodyTruncated   bool  // the body was longer than Body
	HeaderTruncated bool  // Header lacks fields (see Operation.HeaderTruncated)
	Err             error // the last error, or why retrying stopped; nil for a rejection
}

// Error describes the outcome, attempts, last status or error, and key.
func (e *OutcomeError) Error() string {
	msg := fmt.Sprintf("idem: operation %s %s after %d attempt(s) (key %s)", journalkit.QuoteID(e.ID), e.Outcome, e.Attempts, e.Key)
	if e.Status != 0 {
		msg += fmt.Sprintf(": last status %d", e.Status)
		if loc := e.Header.Get("Location"); loc != "" && unfollowedRedirect(e.Status) {
			msg += fmt.Sprintf(", a redirect to %q, not followed", truncateForMessage([]byte(loc)))
		}
		if len(e.Body) > 0 {
			msg += fmt.Sprintf(" %q", truncateForMessage(e.Body))
		}
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the last error.
func (e *OutcomeError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRejected or ErrUnknown and matches.
func (e *OutcomeError) Is(target error) bool {
	switch target {
	case ErrRejected:
		return e.Outcome == OutcomeRejected
	case ErrUnknown:
		return e.Outcome == OutcomeUnknown
	}
	return false
}

// wrapf returns err with what was being done in front (format and args),
// the package's "idem: " prefix said once: err's own is left out of the
// message. The result unwraps to err.
func wrapf(err error, format string, args ...any) error {
	return &wrapError{"idem: " + fmt.Sprintf(format, args...) + ": " + strings.TrimPrefix(err.Error(), "idem: "), err}
}

type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

// truncateForMessage keeps error messages to one readable line.
func truncateForMessage(b []byte) string {
	const max = 200
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// notRetryable is an error of the RoundTripper that the code around it must
// not retry: idem retried already, or refused to send. Its RetryableError
// method is how an SDK's retry loop learns that (the AWS SDK for Go's
// retryer asks every error in the chain), so that an SDK over
// StandardClient does not multiply idem's attempts by its own. It unwraps
// to the error, and says what it says.
type notRetryable struct{ error }

func (e notRetryable) Unwrap() error { return e.error }

// RetryableError returns false: see notRetryable.
func (notRetryable) RetryableError() bool { return false }
