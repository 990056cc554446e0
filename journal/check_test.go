package journal_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// CheckIntent refuses an intent with any outcome field set, a state other
// than pending, or a key lifetime that is not positive (C6.6), each field
// on its own, and takes the shortest lifetime; CheckOutcome refuses a state
// that is not final, a status outside 0..999, a truncated body that is
// kept, a summary, and a mark on an outcome it does not belong to (C16),
// and takes each limit's last value. Each refusal begins with the
// package's name: an exported function returns it.
func TestCheckIntentAndCheckOutcomeFieldByField(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	intent := func(f func(*journal.Operation)) journal.Operation {
		op := journal.Operation{ID: "op", Key: "key", KeyTTL: time.Nanosecond}
		f(&op)
		return op
	}
	intents := []struct {
		name string
		op   journal.Operation
		ok   bool
	}{
		{"bare", intent(func(*journal.Operation) {}), true},
		{"pending", intent(func(o *journal.Operation) { o.State = journal.StatePending }), true},
		{"done", intent(func(o *journal.Operation) { o.State = journal.StateDone }), false},
		{"rejected", intent(func(o *journal.Operation) { o.State = journal.StateRejected }), false},
		{"completed", intent(func(o *journal.Operation) { o.Completed = at }), false},
		{"status", intent(func(o *journal.Operation) { o.Status = 201 }), false},
		{"empty header", intent(func(o *journal.Operation) { o.Header = http.Header{} }), false},
		{"empty body", intent(func(o *journal.Operation) { o.Body = []byte{} }), false},
		{"body truncated", intent(func(o *journal.Operation) { o.BodyTruncated = true }), false},
		{"header truncated", intent(func(o *journal.Operation) { o.HeaderTruncated = true }), false},
		{"summarized", intent(func(o *journal.Operation) { o.Summarized = true }), false},
		{"no key lifetime", intent(func(o *journal.Operation) { o.KeyTTL = 0 }), false},
		{"negative key lifetime", intent(func(o *journal.Operation) { o.KeyTTL = -time.Nanosecond }), false},
		{"applied", intent(func(o *journal.Operation) { o.Applied = true }), false},
		{"key reused", intent(func(o *journal.Operation) { o.KeyReused = "c" }), false},
		{"settled", intent(func(o *journal.Operation) { o.Settled = true }), false},
		{"settled note", intent(func(o *journal.Operation) { o.SettledNote = "n" }), false},
		{"unrecorded, empty", intent(func(o *journal.Operation) { o.Unrecorded = []string{} }), false},
	}
	for _, tt := range intents {
		if err := journal.CheckIntent(tt.op); (err == nil) != tt.ok || err != nil && (!errors.Is(err, journal.ErrInvalidOperation) || !strings.HasPrefix(err.Error(), "journal: invalid journal operation: ")) {
			t.Errorf("CheckIntent(%s) = %v, want accepted: %v", tt.name, err, tt.ok)
		}
	}
	outcome := func(f func(*journal.Operation)) journal.Operation {
		op := journal.Operation{ID: "op", State: journal.StateDone}
		f(&op)
		return op
	}
	outcomes := []struct {
		name string
		op   journal.Operation
		ok   bool
	}{
		{"done, status 0", outcome(func(*journal.Operation) {}), true},
		{"rejected, status 999", outcome(func(o *journal.Operation) { o.State, o.Status = journal.StateRejected, 999 }), true},
		{"pending", outcome(func(o *journal.Operation) { o.State = journal.StatePending }), false},
		{"no state", outcome(func(o *journal.Operation) { o.State = 0 }), false},
		{"status -1", outcome(func(o *journal.Operation) { o.Status = -1 }), false},
		{"status 1000", outcome(func(o *journal.Operation) { o.Status = 1000 }), false},
		{"a body", outcome(func(o *journal.Operation) { o.Body = []byte("x") }), true},
		{"truncated, no body", outcome(func(o *journal.Operation) { o.BodyTruncated = true }), true},
		{"truncated, an empty body", outcome(func(o *journal.Operation) { o.BodyTruncated, o.Body = true, []byte{} }), true},
		{"truncated, a body", outcome(func(o *journal.Operation) { o.BodyTruncated, o.Body = true, []byte("x") }), false},
		{"summarized", outcome(func(o *journal.Operation) { o.Summarized = true }), false},
		// C16: the marks, each with the state it belongs to.
		{"done, applied", outcome(func(o *journal.Operation) { o.Applied = true }), true},
		{"rejected, applied", outcome(func(o *journal.Operation) { o.State, o.Applied = journal.StateRejected, true }), false},
		{"rejected, key reused", outcome(func(o *journal.Operation) { o.State, o.KeyReused = journal.StateRejected, "c" }), true},
		{"done, key reused", outcome(func(o *journal.Operation) { o.KeyReused = "c" }), false},
		{"settled with a note", outcome(func(o *journal.Operation) { o.Settled, o.SettledNote = true, "n" }), true},
		{"a note, not settled", outcome(func(o *journal.Operation) { o.SettledNote = "n" }), false},
		{"unrecorded names", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"Set-Cookie", "X-A.b_c~1"} }), true},
		{"unrecorded names at each bound", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"az", "AZ", "09", "!", "#$%&'*+-.^_`|~"} }), true},
		{"an unrecorded name with a byte past a bound", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"a{"} }), false},
		{"an unrecorded name with a byte before a bound", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"a@"} }), false},
		{"an empty unrecorded name", outcome(func(o *journal.Operation) { o.Unrecorded = []string{""} }), false},
		{"an unrecorded name with a comma", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"A,B"} }), false},
		{"an unrecorded name with a space", outcome(func(o *journal.Operation) { o.Unrecorded = []string{"A B"} }), false},
	}
	for _, tt := range outcomes {
		if err := journal.CheckOutcome(tt.op); (err == nil) != tt.ok || err != nil && (!errors.Is(err, journal.ErrInvalidOperation) || !strings.HasPrefix(err.Error(), "journal: invalid journal operation: ")) {
			t.Errorf("CheckOutcome(%s) = %v, want accepted: %v", tt.name, err, tt.ok)
		}
	}
}

// A HeldError names the operation and its holder ("another Do of this
// process" when it has none), the lease's end in UTC when known, and the
// context's error when there is one.
func TestHeldErrorMessage(t *testing.T) {
	until := time.Date(2026, 1, 1, 1, 0, 5, 0, time.FixedZone("CET", 3600))
	for _, tt := range []struct {
		err  *journal.HeldError
		want string
	}{
		{&journal.HeldError{ID: "op"}, `journal: operation "op" is being run by another Do of this process`},
		{&journal.HeldError{ID: "op", Holder: "machine-b"}, `journal: operation "op" is being run by machine-b`},
		{&journal.HeldError{ID: "op", Holder: "machine-b", Until: until}, `journal: operation "op" is being run by machine-b (lease until 2026-01-01T00:00:05Z)`},
		{&journal.HeldError{ID: "op", Err: context.DeadlineExceeded}, `journal: operation "op" is being run by another Do of this process: context deadline exceeded`},
		{&journal.HeldError{ID: "op", Holder: "machine-b", Until: until, Err: context.Canceled},
			`journal: operation "op" is being run by machine-b (lease until 2026-01-01T00:00:05Z): context canceled`},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
