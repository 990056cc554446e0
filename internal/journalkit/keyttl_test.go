package journalkit

import (
	"errors"
	"testing"
	"time"
)

// TestCheckKeyTTLTakesOnlyAPositiveLifetime: a nanosecond is the shortest
// lifetime an intent records; zero and less are refused.
func TestCheckKeyTTLTakesOnlyAPositiveLifetime(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{-time.Hour: false, -1: false, 0: false, 1: true, DefaultKeyTTL: true} {
		if err := CheckKeyTTL(ttl); (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidOperation)) {
			t.Errorf("CheckKeyTTL(%v) = %v, want accepted: %v", ttl, err, ok)
		}
	}
}
