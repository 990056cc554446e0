package mysqltest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrUnavailable is wrapped by the error of Start when MariaDB cannot be
// run here: mariadbd is missing or, as root, there is no mysql user to
// run it as.
var ErrUnavailable = errors.New("mysqltest: MariaDB unavailable")

// errNotOwned is returned by the methods that stop or start a server that
// this process connects to but did not start (Connect).
var errNotOwned = errors.New("mysqltest: the server was not started by this process")

const (
	// envBin names the directory of mariadbd.
	envBin = "IDEM_MARIADB_BIN"

	// defaultBin is that directory when envBin is unset.
	defaultBin = "/usr/sbin"

	// startTimeout bounds Start when its context has no deadline.
	startTimeout = 60 * time.Second

	// stopTimeout bounds a clean shutdown, after which the server is
	// killed.
	stopTimeout = 30 * time.Second

	// logTailLines is how much of the server log a failed start quotes.
	logTailLines = 20
)

// A Server is a MariaDB server that this process started (Start) or one it
// connects to (Connect). Its methods are safe for concurrent use.
type Server struct {
	dsn      string // root@tcp(127.0.0.1:port)/
	port     int
	external bool // Connect: nothing to stop, start or remove

	bin     string // mariadbd
	asUser  string // --user for mariadbd when this process is root, or ""
	dir     string // temporary directory: data, socket, log
	dataDir string
	logPath string

	mu     sync.Mutex // serializes Stop, Kill, Start and Close
	proc   *exec.Cmd  // the running server, or nil
	exited chan error // receives proc's exit, once
	closed bool
}

// Start makes a new data directory in a temporary directory and starts a
// server on it, returning once the server accepts connections. The
// server has no grant tables (every client is a superuser), listens on
// 127.0.0.1 only, on a free port, and keeps its socket in its temporary
// directory. It waits no longer than ctx allows, or a minute when ctx has
// no deadline. The error wraps ErrUnavailable when MariaDB cannot be run
// here. The caller must Close the server.
func Start(ctx context.Context) (*Server, error) {
	bin, owner, err := probe(binDir())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(tempBase(owner != nil), "mysqltest-")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	s := &Server{bin: bin, dir: dir, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "server.log")}
	if err := os.Mkdir(s.dataDir, 0o700); err != nil {
		return nil, errors.Join(fmt.Errorf("mysqltest: %w", err), s.Close())
	}
	if owner != nil {
		s.asUser = owner.Username
		if err := giveTo(owner, s.dir, s.dataDir); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	if s.port, err = freePort(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.dsn = fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port)
	if err := s.bootstrap(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.Start(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// Connect returns the running server at dsn, a go-sql-driver/mysql DSN
// for a user that may create and drop databases, after checking that it
// answers. The server is not this process's: Stop, Kill and Start return
// an error, and Close leaves it running.
func Connect(ctx context.Context, dsn string) (*Server, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	if err := ping(ctx, dsn); err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	port := 0
	if _, p, err := net.SplitHostPort(cfg.Addr); err == nil {
		port, _ = strconv.Atoi(p)
	}
	return &Server{dsn: dsn, port: port, external: true}, nil
}

// Probe reports, in a phrase, why MariaDB cannot be run here, or returns
// nil when it can. Start fails for that reason, with an error that wraps
// ErrUnavailable.
func Probe() error {
	_, _, err := probe(binDir())
	return err
}

// binDir returns the directory of mariadbd: IDEM_MARIADB_BIN, or /usr/sbin
// when it is unset.
func binDir() string {
	if bin := os.Getenv(envBin); bin != "" {
		return bin
	}
	return defaultBin
}

// probe returns the path of mariadbd in bin and, as root, the user to run
// it as; or why it cannot run here.
func probe(bin string) (path string, owner *user.User, err error) {
	path = filepath.Join(bin, "mariadbd")
	if _, err := os.Stat(path); err != nil {
		return "", nil, fmt.Errorf("mariadbd not found at %s (Debian: apt-get install mariadb-server)", path)
	}
	if os.Geteuid() != 0 {
		return path, nil, nil
	}
	owner, err = user.Lookup("mysql")
	if err != nil {
		return "", nil, errors.New("running as root with no mysql user to run MariaDB as")
	}
	return path, owner, nil
}

// giveTo makes owner the owner of dirs.
func giveTo(owner *user.User, dirs ...string) error {
	uid, err1 := strconv.Atoi(owner.Uid)
	gid, err2 := strconv.Atoi(owner.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("mysqltest: user %s: %w", owner.Username, err)
	}
	for _, dir := range dirs {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("mysqltest: %w", err)
		}
	}
	return nil
}

// tempBase returns the directory for the temporary directories: the usual
// one, unless another user must reach into it (forOther) and cannot.
func tempBase(forOther bool) string {
	base := os.TempDir()
	if !forOther {
		return base
	}
	for dir := base; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if dir == filepath.Dir(dir) {
			return base
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqltest: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// DSN returns the go-sql-driver/mysql DSN of s as its superuser root, with
// no database; for a server of Connect, the DSN given to it.
func (s *Server) DSN() string { return s.dsn }

// Port returns the TCP port s listens on, on 127.0.0.1. It stays the same
// across Stop and Start.
func (s *Server) Port() int { return s.port }

// Log returns what s has written to its error log so far (empty for a
// server of Connect).
func (s *Server) Log() (string, error) {
	if s.external {
		return "", nil
	}
	b, err := os.ReadFile(s.logPath)
	return string(b), err
}

// CreateDatabase creates the database name on s and returns the DSN of s
// naming it.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	cfg, err := mysql.ParseDSN(s.dsn)
	if err != nil {
		return "", fmt.Errorf("mysqltest: %w", err)
	}
	if err := execSQL(ctx, s.dsn, "CREATE DATABASE `"+name+"`"); err != nil {
		return "", fmt.Errorf("mysqltest: creating database %s: %w", name, err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}

// DropDatabase drops the database name from s, if it exists.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := execSQL(ctx, s.dsn, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		return fmt.Errorf("mysqltest: dropping database %s: %w", name, err)
	}
	return nil
}

// Start starts s again, on the same data directory and port, after Stop
// or Kill, and returns once it accepts connections; after Kill that
// includes InnoDB's crash recovery. It waits no longer than ctx allows,
// or a minute when ctx has no deadline.
func (s *Server) Start(ctx context.Context) error {
	if s.external {
		return errNotOwned
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("mysqltest: Start of a closed server")
	case s.proc != nil:
		return errors.New("mysqltest: Start of a running server")
	}
	cmd := exec.Command(s.bin, s.args(
		"--socket="+filepath.Join(s.dir, "mysqld.sock"),
		"--pid-file="+filepath.Join(s.dir, "mysqld.pid"),
		"--bind-address=127.0.0.1",
		"--port="+strconv.Itoa(s.port),
		"--skip-grant-tables",
		"--skip-name-resolve",
		"--max-connections=300",
		// MySQL 8's default character set, with a collation that
		// ignores case, as most servers' do.
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci")...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mysqltest: starting %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.proc, s.exited = cmd, exited
	if err := s.waitReady(ctx); err != nil {
		s.halt(syscall.SIGKILL)
		return fmt.Errorf("%w\n%s", err, logTail(s.logPath))
	}
	return nil
}

// args returns mariadbd's arguments: those every run of s shares, then
// more.
func (s *Server) args(more ...string) []string {
	// --no-defaults must come first: no my.cnf of this machine applies.
	args := []string{"--no-defaults",
		"--datadir=" + s.dataDir,
		"--log-error=" + s.logPath,
		// Small files, written fast; a commit still reaches the disk
		// (innodb_flush_log_at_trx_commit stays 1) for Kill to test.
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=8M",
		"--innodb-data-file-path=ibdata1:1M:autoextend",
		"--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
	}
	if s.asUser != "" {
		args = append(args, "--user="+s.asUser)
	}
	return append(args, more...)
}

// bootstrap creates InnoDB's files in the empty data directory of s and
// shuts down cleanly (mariadbd --bootstrap, given no statements): a
// server killed before its first checkpoint would otherwise leave a
// system tablespace it cannot recover.
func (s *Server) bootstrap(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, s.bin, s.args("--bootstrap")...)
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mysqltest: %s --bootstrap: %w\n%s\n%s", s.bin, err, bytes.TrimSpace(out), logTail(s.logPath))
	}
	return nil
}

// waitReady returns once s accepts a connection and answers on it, or
// fails when the server exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	const pause = 50 * time.Millisecond
	for {
		err := ping(ctx, s.dsn)
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("mysqltest: server not accepting connections: %w (last attempt: %v)", context.Cause(ctx), err)
		case exitErr := <-s.exited:
			t.Stop()
			s.proc = nil
			return fmt.Errorf("mysqltest: mariadbd exited while starting: %v", exitErr)
		case <-t.C:
		}
	}
}

// Stop shuts s down cleanly (SIGTERM): open sessions are ended, their
// transactions rolled back, and InnoDB flushes its buffers. After
// stopTimeout it is killed.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill stops s the way a crash would (SIGKILL): the next Start runs
// InnoDB's crash recovery from its redo log. What s committed before Kill
// survives it.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig os.Signal) error {
	if s.external {
		return errNotOwned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.proc == nil {
		return errors.New("mysqltest: stop of a server that is not running")
	}
	return s.halt(sig)
}

// halt sends sig to the running server and waits for it to exit, killing
// it after stopTimeout. s.mu is held.
func (s *Server) halt(sig os.Signal) error {
	if s.proc == nil {
		return nil
	}
	var err error
	if sigErr := s.proc.Process.Signal(sig); sigErr != nil && !errors.Is(sigErr, os.ErrProcessDone) {
		err = fmt.Errorf("mysqltest: signalling mariadbd: %w", sigErr)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		err = errors.Join(err, fmt.Errorf("mysqltest: mariadbd did not stop within %v; killed", stopTimeout))
		s.proc.Process.Kill()
		<-s.exited
	}
	s.proc = nil
	return err
}

// Close stops s if it is running and removes its temporary directory,
// returning what went wrong. It is safe to call more than once; for a
// server of Connect it does nothing.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.halt(syscall.SIGTERM)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("mysqltest: %w", rmErr))
	}
	return err
}

// logTail returns the last lines of the log at path, for errors.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return "last lines of " + path + ":\n" + strings.Join(lines, "\n")
}

// execSQL runs query on a connection of its own to dsn.
func execSQL(ctx context.Context, dsn, query string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, query)
	return errors.Join(err, db.Close())
}

// ping connects to dsn, checks the connection and closes it.
func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	return errors.Join(db.PingContext(ctx), db.Close())
}
