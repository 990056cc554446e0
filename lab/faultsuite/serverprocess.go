package faultsuite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerProcess is the reference server's binary (idem-testserver) running
// as a child process on a SQLite file, or on a PostgreSQL database that
// other processes may share (see Replicas). A test kills it with SIGKILL
// and starts it again on the same database and the same port, so the
// client's URL stays valid across crashes.
//
// Its stdout is read for "listening on URL" and, with -crash=hang, for
// "crash point POINT reached"; its stderr (the server's log) is appended to
// LogPath.
type ServerProcess struct {
	// Binary is the idem-testserver executable.
	Binary string
	// DB is the SQLite file, or the PostgreSQL database's postgres:// URL,
	// kept across restarts: the server's -db.
	DB string
	// LogPath receives the server's stderr, appended across restarts.
	LogPath string
	// URL is the server's base URL, fixed by the first start.
	URL string

	addr string // host:port, fixed by the first start

	mu      sync.Mutex
	run     *serverRun
	starts  int
	kills   int
	running bool
}

// ErrExitedBeforeListening is wrapped by the error of a Start whose process
// exited before it said it was listening.
var ErrExitedBeforeListening = errors.New("faultsuite: server exited before listening")

// serverRun is one life of the process.
type serverRun struct {
	cmd     *exec.Cmd
	crashes chan string   // crash points announced on stdout
	exited  chan struct{} // closed once the process is reaped
	err     error         // its exit status, set before exited is closed
}

// StartServer starts the server binary on db with the given flags (not
// -addr, -db or -crash, which it sets: a free loopback port the first time,
// the same port after, and -crash=hang so that a crash point waits for the
// test to kill the process there).
func StartServer(ctx context.Context, binary, db, logPath string, args ...string) (*ServerProcess, error) {
	s := &ServerProcess{Binary: binary, DB: db, LogPath: logPath, addr: "127.0.0.1:0"}
	if err := s.Start(ctx, args...); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the server again (it must not be running) with the given
// flags, on the same file and port, and returns once it listens. The port
// may take a moment to be free after a kill; Start retries until ctx ends.
func (s *ServerProcess) Start(ctx context.Context, args ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("faultsuite: server already running")
	}
	for {
		err := s.startOnce(ctx, args)
		if err == nil {
			return nil
		}
		if s.starts == 0 || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting for %s to be free: %w)", err, s.addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *ServerProcess) startOnce(ctx context.Context, args []string) error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("faultsuite: server log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "---- start %d: %s\n", s.starts+1, strings.Join(args, " "))
	full := append([]string{"-addr", s.addr, "-db", s.DB, "-crash", "hang"}, args...)
	cmd := exec.Command(s.Binary, full...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("faultsuite: server stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("faultsuite: starting server: %w", err)
	}
	run := &serverRun{cmd: cmd, crashes: make(chan string, 16), exited: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if url, ok := strings.CutPrefix(line, "listening on "); ok {
				listening <- url
				continue
			}
			if point, ok := strings.CutPrefix(line, "crash point "); ok {
				select {
				case run.crashes <- strings.TrimSuffix(point, " reached"):
				default: // the test only needs to know that one was reached
				}
			}
		}
		io.Copy(io.Discard, out)
		run.err = cmd.Wait()
		close(run.exited)
	}()
	select {
	case url := <-listening:
		if s.URL == "" {
			s.URL = url
			s.addr = strings.TrimPrefix(url, "http://")
		}
		s.run, s.running = run, true
		s.starts++
		return nil
	case <-run.exited:
		return fmt.Errorf("%w (%v): %s", ErrExitedBeforeListening, run.err, s.logTail())
	case <-ctx.Done():
		cmd.Process.Kill()
		<-run.exited
		return fmt.Errorf("faultsuite: waiting for the server to listen: %w", ctx.Err())
	}
}

// logTail returns the last lines of the server's log, for error messages.
func (s *ServerProcess) logTail() string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// Kill sends SIGKILL and returns once the process is gone.
func (s *ServerProcess) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return errors.New("faultsuite: server not running")
	}
	run := s.run
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("faultsuite: killing server: %w", err)
	}
	<-run.exited
	s.running = false
	s.kills++
	return nil
}

// Stop asks the server to shut down (SIGTERM) and waits for it; after
// timeout it is killed.
func (s *ServerProcess) Stop(timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	run := s.run
	s.running = false
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("faultsuite: stopping server: %w", err)
	}
	select {
	case <-run.exited:
		if run.err != nil {
			return fmt.Errorf("faultsuite: server stopped with %w: %s", run.err, s.logTail())
		}
		return nil
	case <-time.After(timeout):
		run.cmd.Process.Kill()
		<-run.exited
		return fmt.Errorf("faultsuite: server did not stop within %s", timeout)
	}
}

// CrashPoint waits until the running server announces that a request
// reached a crash point, and returns the point. It fails if the process
// exits first or ctx ends.
func (s *ServerProcess) CrashPoint(ctx context.Context) (string, error) {
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	select {
	case p := <-run.crashes:
		return p, nil
	case <-run.exited:
		return "", fmt.Errorf("faultsuite: server exited (%v) before a crash point: %s", run.err, s.logTail())
	case <-ctx.Done():
		return "", fmt.Errorf("faultsuite: waiting for a crash point: %w", ctx.Err())
	}
}

// Kills returns how many times Kill killed the server.
func (s *ServerProcess) Kills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kills
}
