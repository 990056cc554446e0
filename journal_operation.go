package idem

// What a Journal holds of one operation: its State and the Operation.

import (
	"fmt"
	"net/http"
	"time"
)

// State is where an operation stands in the journal.
type State uint8

// The states of an operation. The zero State is not valid. Their values are
// the state bytes of the journal's format, so a FileJournal converts them
// to and from its engine's states as they are.
const (
	// Pending: the intent is recorded; no final outcome is known. The
	// operation may or may not have reached the server.
	StatePending State = 1
	// Done: a final response was received and recorded.
	StateDone State = 2
	// Rejected: the server answered with a response that is not retried;
	// it did not apply the operation.
	StateRejected State = 3
)

// String returns "pending", "done" or "rejected", or "State(n)" for a value
// that is none of them.
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateDone:
		return "done"
	case StateRejected:
		return "rejected"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// final reports whether s is an outcome: Done or Rejected.
func (s State) final() bool { return s == StateDone || s == StateRejected }

// Operation is what the journal knows of one operation.
//
// Times are stored as Unix nanoseconds and read back in UTC, so an Operation
// read from the journal (in this process or after reopening) carries its
// times in UTC without a monotonic reading. A header with no names, a name
// with no values and an empty body all read back as nil.
type Operation struct {
	// ID is the caller's operation ID: 1 to 4096 bytes.
	ID string
	// Key is the Idempotency-Key minted for the operation: 1 to 4096 bytes.
	Key string
	// Fingerprint identifies the request the operation sends.
	Fingerprint Fingerprint
	// Method and URL are the request's, for people reading the journal.
	Method, URL string
	// Created is when the key was minted. Begin uses the journal's clock
	// when it is zero.
	Created time.Time
	// State is Pending after Begin, Done or Rejected after Complete.
	State State

	// The outcome, set once State is Done or Rejected.

	// Completed is when the outcome was recorded. Complete uses the
	// journal's clock when it is zero.
	Completed time.Time
	// Status is the response status code, 0 to 999.
	Status int
	// Header is the response header as recorded.
	Header http.Header
	// Body is the response body, up to the client's recording limit.
	Body []byte
	// BodyTruncated says the body is not kept, because it was larger than
	// the limit or compaction summarized the operation: Body is nil then.
	BodyTruncated bool
	// HeaderTruncated says some header fields are not kept, because the
	// header was larger than the client's limit (Config.MaxRecordedHeader)
	// or compaction summarized the operation.
	HeaderTruncated bool
	// Summarized says compaction kept only a summary of the operation
	// once its outcome was KeyTTL old: ID, key, fingerprint, state and
	// status, without the header and body (see JournalOptions.KeyTTL).
	Summarized bool
}

// Expired reports whether o is pending and its key is at least ttl old at
// now: the server has forgotten the key, so sending the operation again
// could apply it twice.
func (o Operation) Expired(now time.Time, ttl time.Duration) bool {
	return o.State == StatePending && now.Sub(o.Created) >= ttl
}
