package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby starts a streaming standby of s, for failover tests: a base
// backup of s (pg_basebackup -R) in a new temporary directory, served on
// a port of its own as a hot standby. It then sets s's
// synchronous_standby_names, so that a commit on s returns only once the
// standby has it, and returns once s reports the standby synchronous. The
// setting is s's alone: the standby, once promoted, commits without
// waiting for anyone. The caller must Close the standby.
func (s *Server) Standby(ctx context.Context) (*Server, error) { return s.standby(ctx, true) }

// AsyncStandby starts a streaming standby of s as Standby does, but
// asynchronous: s's synchronous_standby_names is left as it is (empty
// unless a Standby set it), and AsyncStandby returns once s reports a
// standby streaming. A commit on s then returns without waiting for it,
// so a failover to it can lose what s committed last.
func (s *Server) AsyncStandby(ctx context.Context) (*Server, error) { return s.standby(ctx, false) }

// standby is Standby, or AsyncStandby unless sync.
func (s *Server) standby(ctx context.Context, sync bool) (*Server, error) {
	if s.external {
		return nil, errNotOwned
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	st, owner, err := newServer()
	if err != nil {
		return nil, err
	}
	if err := st.backup(ctx, s, owner); err != nil {
		return nil, errors.Join(err, st.Close())
	}
	if err := st.Start(ctx); err != nil {
		return nil, errors.Join(err, st.Close())
	}
	wait := `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`
	if sync {
		if err := makeSynchronous(ctx, s.dsn); err != nil {
			return nil, errors.Join(err, st.Close())
		}
		wait = `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`
	}
	if err := waitFor(ctx, s.dsn, wait); err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return st, nil
}

// backup fills st's data directory with a base backup of primary,
// configured to stream from it, and picks st's port.
func (st *Server) backup(ctx context.Context, primary *Server, owner *user.User) error {
	if err := giveTo(st.dir, owner); err != nil {
		return err
	}
	if err := st.run(ctx, "pg_basebackup", "-D", st.dataDir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres"); err != nil {
		return err
	}
	return st.listen("\n# pgserver standby\nport = %d\n")
}

// makeSynchronous makes every standby of the server at dsn synchronous.
func makeSynchronous(ctx context.Context, dsn string) error {
	if err := execSQL(ctx, dsn, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := execSQL(ctx, dsn, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// waitFor returns once count, a query of one count, finds a row on the
// server at dsn, or when ctx ends.
func waitFor(ctx context.Context, dsn, count string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		if err := conn.QueryRow(ctx, count).Scan(&n); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: no standby as wanted (%s): %w", count, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote ends a standby's recovery (pg_ctl promote) and returns once it
// accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	if s.external {
		return errNotOwned
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.run(ctx, "pg_ctl", "promote", "-w", "-t", waitSeconds(ctx), "-D", s.dataDir); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(s.logPath))
	}
	return nil
}

// KillPostmaster sends SIGKILL to s's postmaster alone, as the kernel's
// out-of-memory killer would, and returns once it is gone. Its other
// processes see it gone and exit by themselves; the connections they
// served break. Unlike after Kill, s cannot be started again: it is only
// fit to be closed.
func (s *Server) KillPostmaster(ctx context.Context) error {
	if s.external {
		return errNotOwned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pidFile := filepath.Join(s.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("pgserver: %s: %w", pidFile, err)
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill() // SIGKILL
	}
	if err != nil {
		return fmt.Errorf("pgserver: killing the postmaster: %w", err)
	}
	for alive(p) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: the postmaster outlived SIGKILL: %w", context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Nothing is left to stop: Close must not try.
	if err := os.Remove(pidFile); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// alive reports whether process p runs (a zombie, which no one may reap
// here, does not).
func alive(p *os.Process) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return p.Signal(syscall.Signal(0)) == nil // no /proc: ask the kernel
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
