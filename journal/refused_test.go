package journal_test

import (
	"testing"

	"github.com/idemkit/idem/journal"
)

// C4.4, V2.4: RefusedWithoutEffect holds for a 4xx refusal that cannot
// have applied anything, and for nothing else: not for one settled by
// hand, nor for a refusal of a key held for another request.
func TestRefusedWithoutEffect(t *testing.T) {
	rejected := func(status int) journal.Operation {
		return journal.Operation{State: journal.StateRejected, Status: status}
	}
	settled := rejected(400)
	settled.Settled = true
	reused := rejected(400)
	reused.KeyReused = "IdempotentParameterMismatch"
	for _, tc := range []struct {
		name string
		op   journal.Operation
		want bool
	}{
		{"400", rejected(400), true},
		{"401", rejected(401), true},
		{"403", rejected(403), true},
		{"404", rejected(404), true},
		{"422", rejected(422), true},
		{"499", rejected(499), true},
		{"408 may be in flight", rejected(408), false},
		{"409 replayed", rejected(409), false},
		{"429", rejected(429), false},
		{"301 may follow an applied POST", rejected(301), false},
		{"302 may follow an applied POST", rejected(302), false},
		{"307 to another origin", rejected(307), false},
		{"399", rejected(399), false},
		{"500", rejected(500), false},
		{"501", rejected(501), false},
		{"done", journal.Operation{State: journal.StateDone, Status: 400}, false},
		{"pending", journal.Operation{State: journal.StatePending}, false},
		{"settled by hand", settled, false},
		{"key held for another request", reused, false},
	} {
		if got := tc.op.RefusedWithoutEffect(); got != tc.want {
			t.Errorf("%s: RefusedWithoutEffect = %v, want %v", tc.name, got, tc.want)
		}
	}
}
