package idemserver_test

import (
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
	"go.uber.org/goleak"
)

// withPostgres runs the tests with pgtest's shared PostgreSQL available.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

// TestMain runs every test of the package, internal and external, under
// goleak: a request, a sweep or a Close that leaves a goroutine behind
// fails the binary.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }
