package pgserver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopStartAndClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, which -short skips")
	}
	ctx := t.Context()
	s, err := Start(ctx)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err == nil {
		t.Fatal("Stop of a stopped server succeeded")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, s.DSN()); err != nil {
		t.Fatalf("after Stop and Start: %v", err)
	}
	s.Close()
	s.Close()
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close, %s: %v, want it gone", s.dir, err)
	}
	if err := ping(ctx, s.DSN()); err == nil {
		t.Fatal("the server answers after Close")
	}
}

func TestConnectLeavesTheServerAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, which -short skips")
	}
	ctx := t.Context()
	s, err := Start(ctx)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if c.DSN() != s.DSN() || c.Port() != s.Port() {
		t.Fatalf("Connect: DSN %s port %d, want %s and %d", c.DSN(), c.Port(), s.DSN(), s.Port())
	}
	for name, err := range map[string]error{"Stop": c.Stop(ctx), "Kill": c.Kill(ctx), "Start": c.Start(ctx), "Promote": c.Promote(ctx)} {
		if !errors.Is(err, errNotOwned) {
			t.Errorf("%s of a server of Connect: %v, want errNotOwned", name, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, s.DSN()); err != nil {
		t.Fatalf("after Close of a server of Connect: %v", err)
	}
	if _, err := Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"); err == nil {
		t.Fatal("Connect to a port nothing listens on succeeded")
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv(envBin, t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx)
	if !errors.Is(err, ErrUnavailable) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start with an empty IDEM_PG_BIN: %v, want ErrUnavailable", err)
	}
}

func TestProbeNamesTheBinaryDirectory(t *testing.T) {
	t.Setenv(envBin, "/nonexistent/pg/bin")
	err := Probe()
	if err == nil || err.Error() != "PostgreSQL 15 not found at /nonexistent/pg/bin" {
		t.Fatalf("Probe with IDEM_PG_BIN=/nonexistent/pg/bin: %v", err)
	}
}

func TestWithDatabase(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable": "postgres://postgres@127.0.0.1:5432/other?sslmode=disable",
		"postgresql://u:p@h/db":   "postgresql://u:p@h/other",
		"host=h user=u dbname=db": "host=h user=u dbname=db dbname=other",
		"postgres://h:port/db":    "",
	} {
		got, err := withDatabase(dsn, "other")
		if want == "" {
			if err == nil {
				t.Errorf("withDatabase(%q) = %q, want an error", dsn, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", dsn, got, err, want)
		}
		if _, err := pgx.ParseConfig(got); err != nil {
			t.Errorf("withDatabase(%q) = %q: %v", dsn, got, err)
		}
	}
	if cfg, _ := pgx.ParseConfig("host=h dbname=db dbname=other"); cfg.Database != "other" {
		t.Errorf("a repeated dbname gives database %q, want the last", cfg.Database)
	}
}
