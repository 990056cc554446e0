package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine running: the
// proxy's handlers, connections and transport must all be gone after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
