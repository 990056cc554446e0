package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgserver"
)

// The environment variables of the rules in the package documentation.
const (
	envDSN = "IDEM_PG_DSN"
	envCI  = "CI"
)

// verdict is what choose decides a test gets.
type verdict int

const (
	useExternal verdict = iota // the server at IDEM_PG_DSN
	startLocal                 // a server started from the binaries
	skipTest                   // t.Skip(reason)
	failTest                   // t.Fatal(reason)
)

// A choice is the outcome of choose.
type choice struct {
	verdict verdict
	dsn     string // for useExternal
	reason  string // for skipTest and failTest: one line
}

// choose applies the rules of the package documentation to the
// environment in getenv. short says whether the tests run under
// -short; own says whether the test must own the server
// (Own) rather than share one (Shared, NewDatabase); probe reports why
// PostgreSQL cannot be run here, as pgserver.Probe does.
func choose(getenv func(string) string, short, own bool, probe func() error) choice {
	dsn := getenv(envDSN)
	ci, _ := strconv.ParseBool(getenv(envCI))
	switch {
	case short:
		return choice{verdict: skipTest, reason: "pgtest: -short skips the tests that need PostgreSQL, whatever CI says"}
	case dsn != "" && !own:
		return choice{verdict: useExternal, dsn: dsn}
	case dsn != "" && !ci:
		return choice{verdict: skipTest, reason: "pgtest: this test kills or restarts PostgreSQL and cannot do that to the server at " +
			envDSN + "; skipping (CI=true makes it start its own)"}
	}
	err := probe()
	switch {
	case err == nil:
		return choice{verdict: startLocal}
	case ci && dsn != "":
		return choice{verdict: failTest, reason: "pgtest: " + err.Error() + "; under CI=true this test needs a server of its own even with " + envDSN + " set"}
	case ci:
		return choice{verdict: failTest, reason: "pgtest: " + err.Error() + " and " + envDSN + " unset; failing since CI=true"}
	default:
		return choice{verdict: skipTest, reason: "pgtest: " + err.Error() + " and " + envDSN + " unset; skipping (CI=true makes this a failure)"}
	}
}

// apply skips or fails t as c says; otherwise it returns.
func (c choice) apply(t testing.TB) {
	t.Helper()
	switch c.verdict {
	case skipTest:
		t.Skip(c.reason)
	case failTest:
		t.Fatal(c.reason)
	}
}

// databaseTimeout bounds the creation of a database, and its drop.
const databaseTimeout = 30 * time.Second

// running is set by Run while the tests run.
var running atomic.Bool

// shared is the server of Shared, for the life of the test binary.
var shared struct {
	once   sync.Once
	choice choice
	srv    *pgserver.Server
	err    error
}

// Run runs the tests of m with a shared server available (Shared,
// NewDatabase), closes that server if a test started it, and returns the
// exit code for os.Exit: that of m.Run, or 1 if the tests passed and the
// server would not close. Use it from a TestMain that does more than
// Main does.
func Run(m *testing.M) int {
	running.Store(true)
	code := m.Run()
	running.Store(false)
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: closing the shared server:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Main runs the tests of m as Run does and exits with its code. Call it
// from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Shared returns the server of this test binary, starting it on first use
// or connecting to IDEM_PG_DSN (see the package documentation). It skips
// or fails t when PostgreSQL is unavailable, and fails it when TestMain
// does not run the tests through Main or Run, which stop the server. Tests
// must not stop, kill or restart the shared server; Own gives one they may.
func Shared(t testing.TB) *pgserver.Server {
	t.Helper()
	if !running.Load() {
		t.Fatal("pgtest: Shared needs the package's TestMain to run the tests through pgtest.Main or pgtest.Run")
	}
	shared.once.Do(func() {
		shared.choice = choose(os.Getenv, testing.Short(), false, pgserver.Probe)
		switch shared.choice.verdict {
		case useExternal:
			shared.srv, shared.err = pgserver.Connect(context.Background(), shared.choice.dsn)
			if shared.err != nil {
				shared.err = fmt.Errorf("the server at %s: %w", envDSN, shared.err)
			}
		case startLocal:
			shared.srv, shared.err = pgserver.Start(context.Background())
		}
	})
	shared.choice.apply(t)
	if shared.err != nil {
		t.Fatalf("pgtest: starting the shared server: %v", shared.err)
	}
	return shared.srv
}

// NewDatabase creates a database on the shared server and returns a DSN
// for it; the database is empty and its name unique, and it is dropped,
// along with any connection still open to it, when t and its subtests end.
// It skips or fails t as Shared does.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	dsn, err := s.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return dsn
}

// Own starts a server for t alone, which t may stop, kill and restart, and
// closes it when t ends. It skips or fails t as the package documentation
// says; unlike Shared it does not use IDEM_PG_DSN.
func Own(t testing.TB) *pgserver.Server {
	t.Helper()
	choose(os.Getenv, testing.Short(), true, pgserver.Probe).apply(t)
	s, err := pgserver.Start(context.Background())
	if err != nil {
		t.Fatalf("pgtest: starting a server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: closing a server: %v", err)
		}
	})
	return s
}

// databaseName returns a new database name: pgtest_, then the test's name
// in lower case, letters and digits only, shortened, then random hex,
// which makes it unique even among test binaries sharing IDEM_PG_DSN.
func databaseName(test string) string {
	var b strings.Builder
	b.WriteString("pgtest_")
	for _, r := range strings.ToLower(test) {
		if b.Len() == len("pgtest_")+30 {
			break
		}
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var random [8]byte
	rand.Read(random[:]) // never fails
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(random[:]))
	return b.String()
}
