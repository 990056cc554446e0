package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// A Settlement's limits, each at its last value and one past it: a status
// of 0 to 999; a note of printable text, tabs and spaces, no other control
// character; a Forget that records no status and no note.
func TestSettlementLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    idem.Settlement
		ok   bool
	}{
		{"status 0", idem.Settlement{State: journal.StateDone}, true},
		{"status 999", idem.Settlement{State: journal.StateRejected, Status: 999}, true},
		{"status -1", idem.Settlement{State: journal.StateDone, Status: -1}, false},
		{"status 1000", idem.Settlement{State: journal.StateDone, Status: 1000}, false},
		{"a note of tab, space, tilde and é", idem.Settlement{State: journal.StateDone, Status: 201, Note: "a\tb c~é"}, true},
		{"a note with 0x1f", idem.Settlement{State: journal.StateDone, Status: 201, Note: "a\x1fb"}, false},
		{"a note with NUL", idem.Settlement{State: journal.StateDone, Status: 201, Note: "a\x00b"}, false},
		{"a note with DEL", idem.Settlement{State: journal.StateDone, Status: 201, Note: "a\x7fb"}, false},
		{"forget", idem.Settlement{Forget: true}, true},
		{"forget with a status", idem.Settlement{Forget: true, Status: 201}, false},
		{"forget with a note", idem.Settlement{Forget: true, Note: "gone"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := pendingJournal(t)
			err := idem.Settle(context.Background(), j, "op-1", tt.s)
			if (err == nil) != tt.ok || err != nil && !errors.Is(err, journal.ErrInvalidOperation) {
				t.Fatalf("Settle = %v, want accepted: %v", err, tt.ok)
			}
			op, held := lookup(j, "op-1")
			switch {
			case !tt.ok && (!held || op.State != journal.StatePending):
				t.Fatalf("a refused Settle changed op-1: %+v", op)
			case tt.ok && tt.s.Forget && held:
				t.Fatalf("op-1 kept after Forget: %+v", op)
			case tt.ok && !tt.s.Forget && (op.State != tt.s.State || op.Status != tt.s.Status || op.SettledNote != tt.s.Note || !op.Settled || op.Header != nil):
				t.Fatalf("op-1 settled as %+v, want %+v", op, tt.s)
			}
		})
	}
}

// Settle with Forget and ForgetCompleted drops a completed operation: the
// journal no longer holds it once Settle returns nil.
func TestSettleForgetCompletedDropsTheOperation(t *testing.T) {
	j := pendingJournal(t)
	if err := idem.Settle(context.Background(), j, "op-2", idem.Settlement{Forget: true, ForgetCompleted: true}); err != nil {
		t.Fatal(err)
	}
	if op, ok := lookup(j, "op-2"); ok {
		t.Fatalf("the journal still holds op-2 after Settle forgot it: %+v", op)
	}
	if op, ok := lookup(j, "op-1"); !ok || op.State != journal.StatePending {
		t.Fatalf("op-1 is %+v, %v; want it pending, untouched", op, ok)
	}
}
