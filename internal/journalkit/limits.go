package journalkit

import (
	"errors"
	"fmt"
	"time"
)

// The errors every journal returns, wrapped with context (the journal, the
// operation ID). Package idem exports each under the same name, as the
// same value, and documents it for its callers.
var (
	// ErrCorrupt: what a journal reads back fails a check.
	ErrCorrupt = errors.New("journal is corrupt")

	// ErrClosed: a use of the journal after Close.
	ErrClosed = errors.New("journal is closed")

	// ErrInvalidOperation: a record the format cannot hold, or an append
	// that does not fit the operation; nothing is written.
	ErrInvalidOperation = errors.New("invalid journal operation")

	// ErrOperationExists: a Begin for an ID the journal holds.
	ErrOperationExists = errors.New("operation already in the journal")

	// ErrNoSuchOperation: a Complete for an ID the journal does not hold.
	ErrNoSuchOperation = errors.New("operation not in the journal")
)

// The limits of what a journal stores.
const (
	// DefaultKeyTTL is how long a key lives on a server that does not say:
	// 24 hours, the reference server's retention window. Package idem
	// exports it.
	DefaultKeyTTL = 24 * time.Hour

	// MaxIDLen and MaxKeyLen bound an operation ID and a key.
	MaxIDLen  = 4096
	MaxKeyLen = 4096
	// MaxStatus is the largest status an outcome may record.
	MaxStatus = 999
)

// The range of times a journal stores: Unix nanoseconds in an int64.
var (
	MinStoredTime = time.Unix(0, -1<<63)
	MaxStoredTime = time.Unix(0, 1<<63-1)
)

// CheckIDKey returns an error matching ErrInvalidOperation if id or key
// breaks a journal's limits: an empty ID, an ID or key over MaxIDLen or
// MaxKeyLen bytes, or an empty key where one is required.
func CheckIDKey(id, key string, keyRequired bool) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty operation ID", ErrInvalidOperation)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: operation ID is %d bytes, over %d", ErrInvalidOperation, len(id), MaxIDLen)
	case key == "" && keyRequired:
		return fmt.Errorf("%w: empty key", ErrInvalidOperation)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, over %d", ErrInvalidOperation, len(key), MaxKeyLen)
	}
	return nil
}

// CheckTime returns an error matching ErrInvalidOperation if t is a time a
// journal cannot store; the zero time, which means "now", passes.
func CheckTime(what string, t time.Time) error {
	if !t.IsZero() && (t.Before(MinStoredTime) || t.After(MaxStoredTime)) {
		return fmt.Errorf("%w: %s time %v is outside the range the journal stores (years 1678 to 2262)", ErrInvalidOperation, what, t)
	}
	return nil
}

// CheckKeyTTL returns an error matching ErrInvalidOperation if ttl is not
// a key lifetime an intent may record: it must be positive.
func CheckKeyTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: key lifetime %v is not positive", ErrInvalidOperation, ttl)
	}
	return nil
}

// QuoteID quotes an operation ID for a message, shortened if it is long.
func QuoteID(id string) string {
	if len(id) > 64 {
		return fmt.Sprintf("%q...", id[:64])
	}
	return fmt.Sprintf("%q", id)
}

// The header names under which a journal stores an outcome's marks
// (StoredHeader). A caller's response never carries them.
const (
	// SettledHeader marks an outcome recorded by hand, with "by hand".
	SettledHeader = "Idem-Settled"
	// SettledNoteHeader holds the note of an outcome recorded by hand.
	SettledNoteHeader = "Idem-Settled-Note"
	// KeyReusedHeader marks a refusal of a key held for another request.
	KeyReusedHeader = "Idem-Key-Reused"
	// AppliedHeader marks an answer that says the operation was applied
	// before.
	AppliedHeader = "Idem-Already-Applied"
	// UnrecordedHeadersField names the header fields an outcome left out.
	UnrecordedHeadersField = "Idem-Unrecorded-Headers"
)
