package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"go.uber.org/goleak"
)

// childEnv, when set in the environment, makes the test binary run the
// server command instead of the tests, with the JSON array in it as
// arguments. Tests that need a real process to kill start themselves that
// way: no separate build step.
const childEnv = "IDEM_TESTSERVER_CHILD_ARGS"

// withPostgres runs the tests with pgtest's shared PostgreSQL available.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(runChild(v))
	}
	goleak.VerifyTestMain(withPostgres{m})
}

func runChild(argsJSON string) int {
	var args []string
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		fmt.Fprintln(os.Stderr, "bad", childEnv, err)
		return 2
	}
	err := Command(context.Background(), args, os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	default:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}
