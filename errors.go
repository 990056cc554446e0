package idem

import (
	"errors"
	"fmt"
	"net/http"

	"strings"

	"github.com/idemkit/idem/internal/journalkit"
)

// Errors of Client.Do and New, wrapped with what was being done; test for
// them with errors.Is. All but ErrBodyNotRecorded are returned before
// anything is sent.
var (
	// ErrMismatch: the operation ID is known with a different request
	// fingerprint (method, URL or body). Sending the new request under the
	// old key would be refused by the server or, worse, answered with the
	// old request's response. Use a new operation ID for a new request.
	ErrMismatch = errors.New("operation ID reused with a different request")

	// ErrKeyExpired: the operation is pending with a key the server may
	// have forgotten by the time an attempt ends, so a resend could apply
	// it twice. Nothing is sent; the operation stays in the journal for a
	// person to reconcile (see Keys and expiry in the package
	// documentation).
	ErrKeyExpired = errors.New("pending operation's key has outlived the server's retention")

	// ErrInvalidRequest: the request or operation ID cannot be sent as an
	// idempotent operation (no URL, an unsupported scheme, an empty ID...).
	ErrInvalidRequest = errors.New("invalid request")

	// ErrInvalidConfig: New was given a Config it cannot use.
	ErrInvalidConfig = errors.New("invalid config")

	// ErrBodyTooLarge: the request body has no GetBody and is larger than
	// Config.MaxBufferedBody, so it cannot be replayed on a retry without
	// holding all of it in memory. Set Request.GetBody (http.NewRequest does
	// so for *bytes.Buffer, *bytes.Reader and *strings.Reader bodies) or
	// raise the limit. It also matches ErrInvalidRequest.
	ErrBodyTooLarge = fmt.Errorf("%w: body without GetBody is larger than Config.MaxBufferedBody", ErrInvalidRequest)

	// ErrBodyNotRecorded is matched by the error of reading the body of a
	// recorded response whose body was not kept (Operation.BodyTruncated
	// or Summarized says why).
	ErrBodyNotRecorded = errors.New("response body not recorded")
)

// Outcome is what became of an operation, as far as the client can know
// (see Outcomes in the package documentation).
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

// Sentinels that an *OutcomeError matches with errors.Is, by its Outcome.
var (
	// ErrRejected matches an *OutcomeError whose Outcome is
	// OutcomeRejected.
	ErrRejected = errors.New("operation rejected")
	// ErrUnknown matches an *OutcomeError whose Outcome is OutcomeUnknown.
	ErrUnknown = errors.New("operation outcome unknown")
)

// OutcomeError reports an operation that did not end done: rejected, or
// unknown. errors.Is(err, ErrRejected) and errors.Is(err, ErrUnknown) tell
// the two apart; errors.As gives the details. Unwrap returns Err, so
// errors.Is(err, context.Canceled) holds when the caller gave up.
type OutcomeError struct {
	ID      string  // the caller's operation ID ("" for a request without one)
	Key     string  // the idempotency key every attempt carried
	Outcome Outcome // OutcomeRejected or OutcomeUnknown
	// Attempts counts the attempts this Do made (0 when a recorded
	// rejection was returned from the journal). It is a lower bound on what
	// reached the server: net/http may itself resend a request that
	// carries an Idempotency-Key on a fresh connection when a reused one
	// fails before any response byte (see http.Transport).
	Attempts int
	// Recorded: the rejection was answered from the journal, without a
	// network call (Attempts is 0).
	Recorded bool
	Status   int         // the last response's status code; 0 if none
	Header   http.Header // the last response's header; nil if none
	// Body is the last response's body, or its first bytes: up to
	// Config.MaxRecordedBody for a rejection (nil for a recorded one whose
	// body was larger, or that compaction summarized), up to 4 KiB for an
	// unknown outcome.
	Body []byte
	// BodyTruncated: the body was longer than Body.
	BodyTruncated bool
	// HeaderTruncated: for a recorded rejection, some header fields were
	// not recorded (see Operation.HeaderTruncated), so Header lacks them.
	HeaderTruncated bool
	Err             error // the last error, or why retrying stopped; nil for a rejection
}

// Error describes the outcome, the attempts, the last status or error, and
// the key.
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

// Is reports whether target is ErrRejected or ErrUnknown and matches the
// outcome.
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
