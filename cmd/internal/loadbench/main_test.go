package loadbench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs one process of a fleet when the test binary is started as
// one (RunFleet starts its own binary), and the tests otherwise.
func TestMain(m *testing.M) {
	if w := os.Getenv(fleetWorkerEnv); w != "" {
		if err := runFleetWorker(context.Background(), w, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
