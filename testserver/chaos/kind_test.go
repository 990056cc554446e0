package chaos

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestKindsHaveStableNames: names appear in logs and Counts.String, so they
// are fixed.
func TestKindsHaveStableNames(t *testing.T) {
	want := map[Kind]string{
		noFault:               "none",
		Reset:                 "reset",
		DropAfterCommit:       "drop-after-commit",
		BadGatewayAfterCommit: "bad-gateway-after-commit",
		Stall:                 "stall",
		PartialBody:           "partial-body",
		TooManyRequests:       "too-many-requests",
		Unavailable:           "unavailable",
		InFlight:              "in-flight",
		Kind(9):               "Kind(9)",
		Kind(255):             "Kind(255)",
	}
	for k, name := range want {
		if got := k.String(); got != name {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, name)
		}
	}
}

// TestAllKindsListsEveryKindInOrder and returns a slice the caller owns.
func TestAllKindsListsEveryKindInOrder(t *testing.T) {
	want := []Kind{Reset, DropAfterCommit, BadGatewayAfterCommit, Stall, PartialBody, TooManyRequests, Unavailable}
	got := AllKinds()
	if !slices.Equal(got, want) {
		t.Fatalf("AllKinds() = %v, want %v", got, want)
	}
	got[0] = Stall
	if AllKinds()[0] != Reset {
		t.Fatal("AllKinds returned shared storage")
	}
}

// TestParseKindReadsWhatStringWrites, whatever the case; "none" and
// unknown names are ErrInvalidConfig.
func TestParseKindReadsWhatStringWrites(t *testing.T) {
	for _, k := range AllKinds() {
		if got, err := ParseKind(strings.ToUpper(k.String())); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", strings.ToUpper(k.String()), got, err, k)
		}
	}
	for _, s := range []string{"", "none", "timeout", "Kind(1)"} {
		if _, err := ParseKind(s); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseKind(%q): %v, want ErrInvalidConfig", s, err)
		}
	}
}
