package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment variables of the rules in the package documentation.
const (
	envDSN = "IDEM_PG_DSN"
	envBin = "IDEM_PG_BIN"
	envCI  = "CI"

	defaultBin = "/usr/lib/postgresql/15/bin"
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
// environment in getenv. own says whether the test must own the server
// (Own) rather than share one (Shared, NewDatabase); probe reports whether
// PostgreSQL can be run from a bin directory, as the one of server.go
// does.
func choose(getenv func(string) string, own bool, probe func(bin string) error) choice {
	dsn := getenv(envDSN)
	ci, _ := strconv.ParseBool(getenv(envCI))
	switch {
	case dsn != "" && !own:
		return choice{verdict: useExternal, dsn: dsn}
	case dsn != "" && !ci:
		return choice{verdict: skipTest, reason: "pgtest: this test kills or restarts PostgreSQL and cannot do that to the server at " +
			envDSN + "; skipping (CI=true makes it start its own)"}
	}
	err := probe(binDir(getenv))
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

// binDir returns the directory of the PostgreSQL binaries: IDEM_PG_BIN,
// or /usr/lib/postgresql/15/bin.
func binDir(getenv func(string) string) string {
	if bin := getenv(envBin); bin != "" {
		return bin
	}
	return defaultBin
}

// probeErr is probe as choose takes it.
func probeErr(bin string) error {
	_, _, err := probe(bin)
	return err
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

// running is set by Run while the tests run.
var running atomic.Bool

// shared is the server of Shared, for the life of the test binary.
var shared struct {
	once   sync.Once
	choice choice
	srv    *Server
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
		if err := shared.srv.close(); err != nil {
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
func Shared(t testing.TB) *Server {
	t.Helper()
	if !running.Load() {
		t.Fatal("pgtest: Shared needs the package's TestMain to run the tests through pgtest.Main or pgtest.Run")
	}
	shared.once.Do(func() {
		shared.choice = choose(os.Getenv, false, probeErr)
		ctx, cancel := context.WithTimeout(context.Background(), defaultStartTimeout)
		defer cancel()
		switch shared.choice.verdict {
		case useExternal:
			shared.srv, shared.err = external(ctx, shared.choice.dsn)
		case startLocal:
			shared.srv, shared.err = Start(ctx)
		}
	})
	shared.choice.apply(t)
	if shared.err != nil {
		t.Fatalf("pgtest: starting the shared server: %v", shared.err)
	}
	return shared.srv
}

// external returns the server at dsn, once it answers.
func external(ctx context.Context, dsn string) (*Server, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w", envDSN, err)
	}
	if err := ping(ctx, dsn); err != nil {
		return nil, fmt.Errorf("pgtest: the server at %s: %w", envDSN, err)
	}
	return &Server{dsn: dsn, port: int(cfg.Port), external: true}, nil
}

// NewDatabase creates a database on the shared server and returns a DSN
// for it; the database is empty and its name unique, and it is dropped,
// along with any connection still open to it, when t and its subtests end.
// It skips or fails t as Shared does.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := execSQL(ctx, s.DSN(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execSQL(ctx, s.DSN(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(s.DSN(), name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// Own starts a server for t alone, which t may stop, kill and restart, and
// closes it when t ends. It skips or fails t as the package documentation
// says; unlike Shared it does not use IDEM_PG_DSN.
func Own(t testing.TB) *Server {
	t.Helper()
	choose(os.Getenv, true, probeErr).apply(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultStartTimeout)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatalf("pgtest: starting a server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("pgtest: closing a server: %v", err)
		}
	})
	return s
}

// execSQL runs sql on a connection of its own to dsn.
func execSQL(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql)
	return errors.Join(err, conn.Close(ctx))
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

// withDatabase returns dsn with its database replaced by name. dsn is a
// postgres:// URL or a key=value string.
func withDatabase(dsn, name string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " dbname=" + name, nil // the last of a repeated key wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String(), nil
}
