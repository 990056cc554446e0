package journal_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// TestExpiryIsJudgedByTheOperationsOwnKeyTTL is C6.7 at its edge: a
// pending operation is expired once its key is exactly its own KeyTTL old,
// not a nanosecond before, whatever another operation's lifetime; a
// completed one never is; and the listings select by it.
func TestExpiryIsJudgedByTheOperationsOwnKeyTTL(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		op      journal.Operation
		at      time.Time
		expired bool
	}{
		{"a nanosecond short of its hour", journal.Operation{State: journal.StatePending, Created: created, KeyTTL: time.Hour}, created.Add(time.Hour - 1), false},
		{"exactly its hour", journal.Operation{State: journal.StatePending, Created: created, KeyTTL: time.Hour}, created.Add(time.Hour), true},
		{"an hour old with a day's lifetime", journal.Operation{State: journal.StatePending, Created: created, KeyTTL: 24 * time.Hour}, created.Add(time.Hour), false},
		{"done past its lifetime", journal.Operation{State: journal.StateDone, Created: created, KeyTTL: time.Hour}, created.Add(2 * time.Hour), false},
		{"rejected past its lifetime", journal.Operation{State: journal.StateRejected, Created: created, KeyTTL: time.Hour}, created.Add(2 * time.Hour), false},
	} {
		if got := tc.op.Expired(tc.at); got != tc.expired {
			t.Errorf("%s: Expired = %v, want %v", tc.name, got, tc.expired)
		}
		pending := tc.op.State == journal.StatePending && !tc.expired
		for which, want := range map[journal.Listing]bool{
			journal.ListAll:       true,
			journal.ListPending:   pending,
			journal.ListExpired:   tc.expired,
			journal.ListCompleted: tc.op.State != journal.StatePending,
		} {
			if got := which.Selects(tc.op, tc.at); got != want {
				t.Errorf("%s: %s.Selects = %v, want %v", tc.name, which, got, want)
			}
		}
	}
}

// TestCheckIntentRefusesANonPositiveKeyTTL is C6.6: an intent must carry
// a positive key lifetime; the shortest, a nanosecond, passes.
func TestCheckIntentRefusesANonPositiveKeyTTL(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{-time.Hour: false, -1: false, 0: false, 1: true, time.Hour: true} {
		err := journal.CheckIntent(journal.Operation{ID: "op", Key: "key", KeyTTL: ttl})
		if (err == nil) != ok || (err != nil && !errors.Is(err, journal.ErrInvalidOperation)) {
			t.Errorf("CheckIntent with KeyTTL %v = %v, want accepted: %v", ttl, err, ok)
		}
	}
}
