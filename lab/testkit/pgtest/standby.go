package pgtest

import (
	"context"
	"testing"

	"github.com/idemkit/idem/lab/testkit/pgserver"
)

// OwnStandby starts a standby of s (see pgserver.Server.Standby) for t,
// closed when t ends. s is a server of Own.
func OwnStandby(t testing.TB, s *pgserver.Server) *pgserver.Server {
	t.Helper()
	return own(t, s.Standby)
}

// OwnAsyncStandby starts an asynchronous standby of s (see
// pgserver.Server.AsyncStandby) for t, closed when t ends. s is a server
// of Own.
func OwnAsyncStandby(t testing.TB, s *pgserver.Server) *pgserver.Server {
	t.Helper()
	return own(t, s.AsyncStandby)
}

// own starts a standby with start for t, closed when t ends.
func own(t testing.TB, start func(context.Context) (*pgserver.Server, error)) *pgserver.Server {
	t.Helper()
	st, err := start(context.Background())
	if err != nil {
		t.Fatalf("pgtest: starting a standby: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("pgtest: closing a standby: %v", err)
		}
	})
	return st
}
