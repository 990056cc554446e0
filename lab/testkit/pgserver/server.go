package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrUnavailable is wrapped by the error of Start when PostgreSQL cannot be
// run here: its binaries are missing or, as root, there is no postgres user
// or no runuser to run them as that user.
var ErrUnavailable = errors.New("pgserver: PostgreSQL unavailable")

// errNotOwned is returned by the methods that stop or start a server that
// this process connects to but did not start (Connect).
var errNotOwned = errors.New("pgserver: the server was not started by this process")

const (
	// envBin names the directory of the PostgreSQL binaries.
	envBin = "IDEM_PG_BIN"

	// defaultBin is that directory when envBin is unset.
	defaultBin = "/usr/lib/postgresql/15/bin"

	// defaultStartTimeout bounds the calls that take a context when it
	// has no deadline.
	defaultStartTimeout = 60 * time.Second

	// closeTimeout bounds Close and Bouncer.Close, which have no context.
	closeTimeout = 30 * time.Second

	// logTailLines is how much of the server log a failed start quotes.
	logTailLines = 20
)

// settings are appended to postgresql.conf after initdb. fsync stays on:
// crash tests kill the server and count on what it committed.
const settings = `
# pgserver
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
max_connections = 200
shared_buffers = 32MB
fsync = on
synchronous_commit = on
`

// A Server is a PostgreSQL server that this process started (Start,
// Server.Standby) or one it connects to (Connect). Its methods are safe
// for concurrent use.
type Server struct {
	dsn      string
	port     int
	external bool // Connect: nothing to stop, start or remove

	bin     string   // directory of initdb and pg_ctl
	asUser  []string // prefix that runs a binary as the postgres user, or nil
	dir     string   // temporary directory holding data and the log
	dataDir string
	logPath string

	mu     sync.Mutex // serializes Stop, Kill, Start and Close
	closed bool
}

// Start initializes a cluster in a new temporary directory and starts a
// server on it, returning once the server accepts connections. It waits no
// longer than ctx allows, or a minute when ctx has no deadline. The error
// wraps ErrUnavailable when PostgreSQL cannot be run here. The caller must
// Close the server.
func Start(ctx context.Context) (*Server, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	s, owner, err := newServer()
	if err != nil {
		return nil, err
	}
	if err := s.init(ctx, owner); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.Start(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// Connect returns the running server at dsn, a postgres:// URL or a
// key=value string, after checking that it answers. The server is not
// this process's: the methods that stop, start, kill, promote or copy it
// return an error, and Close leaves it running.
func Connect(ctx context.Context, dsn string) (*Server, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := ping(ctx, dsn); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	return &Server{dsn: dsn, port: int(cfg.Port), external: true}, nil
}

// Probe reports, in a phrase, why PostgreSQL cannot be run here, or
// returns nil when it can. Start fails for that reason, with an error
// that wraps ErrUnavailable.
func Probe() error {
	_, _, err := probe(binDir())
	return err
}

// binDir returns the directory of the PostgreSQL binaries: IDEM_PG_BIN,
// or /usr/lib/postgresql/15/bin when it is unset.
func binDir() string {
	if bin := os.Getenv(envBin); bin != "" {
		return bin
	}
	return defaultBin
}

// newServer returns a Server in a new temporary directory, not
// initialized yet, and the user its processes run as (nil: this one's).
func newServer() (*Server, *user.User, error) {
	bin := binDir()
	asUser, owner, err := probe(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(tempBase(owner != nil), "pgserver-")
	if err != nil {
		return nil, nil, fmt.Errorf("pgserver: %w", err)
	}
	return &Server{
		bin:     bin,
		asUser:  asUser,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "server.log"),
	}, owner, nil
}

// init runs initdb in s.dir, given to owner first when it is not nil, and
// picks the port.
func (s *Server) init(ctx context.Context, owner *user.User) error {
	if err := giveTo(s.dir, owner); err != nil {
		return err
	}
	if err := s.run(ctx, "initdb", "-D", s.dataDir, "--auth=trust", "-U", "postgres",
		"--no-sync", "-E", "UTF8", "--locale=C", "--no-instructions"); err != nil {
		return err
	}
	return s.listen(settings)
}

// listen gives s a free loopback port and its DSN, and appends conf, a
// format of that port, to its postgresql.conf (the last setting wins).
func (s *Server) listen(conf string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	f, err := os.OpenFile(filepath.Join(s.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	_, err = fmt.Fprintf(f, conf, port)
	return errors.Join(err, f.Close())
}

// giveTo makes owner the owner of dir, when owner is not nil.
func giveTo(dir string, owner *user.User) error {
	if owner == nil {
		return nil
	}
	uid, err1 := strconv.Atoi(owner.Uid)
	gid, err2 := strconv.Atoi(owner.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("pgserver: user %s: %w", owner.Username, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// DSN returns a postgres:// URL for the postgres database of s, as the
// superuser postgres; for a server of Connect, the DSN given to it.
func (s *Server) DSN() string { return s.dsn }

// CreateDatabase creates the database name on s and returns the DSN of s
// naming that database instead of its own.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	dsn, err := withDatabase(s.dsn, name)
	if err != nil {
		return "", fmt.Errorf("pgserver: the DSN is not a URL: %w", err)
	}
	if err := execSQL(ctx, s.dsn, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgserver: creating database %s: %w", name, err)
	}
	return dsn, nil
}

// DropDatabase drops the database name from s, if it exists, ending the
// sessions still connected to it.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if err := execSQL(ctx, s.dsn, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgserver: dropping database %s: %w", name, err)
	}
	return nil
}

// Log returns what s has written to its log so far (empty for a server
// of Connect, whose log is elsewhere).
func (s *Server) Log() (string, error) {
	if s.external {
		return "", nil
	}
	b, err := os.ReadFile(s.logPath)
	return string(b), err
}

// Port returns the TCP port s listens on, on 127.0.0.1. It stays the same
// across Stop and Start.
func (s *Server) Port() int { return s.port }

// Start starts s again, on the same data directory and port, after Stop or
// Kill, and returns once it accepts connections. After Kill that includes
// crash recovery. It waits no longer than ctx allows, or a minute when ctx
// has no deadline.
func (s *Server) Start(ctx context.Context) error {
	if s.external {
		return errNotOwned
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgserver: Start of a closed server")
	}
	if err := s.run(ctx, "pg_ctl", "start", "-w", "-t", waitSeconds(ctx), "-D", s.dataDir, "-l", s.logPath); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(s.logPath))
	}
	if err := waitReady(ctx, s.dsn); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(s.logPath))
	}
	return nil
}

// Stop shuts s down cleanly (pg_ctl stop -m fast): open sessions are
// ended and their transactions rolled back, and a checkpoint is written.
func (s *Server) Stop(ctx context.Context) error { return s.stop(ctx, "fast") }

// Kill stops s the way a crash would (pg_ctl stop -m immediate): no
// checkpoint, so the next Start runs crash recovery from the WAL. What s
// committed before Kill survives it.
func (s *Server) Kill(ctx context.Context) error { return s.stop(ctx, "immediate") }

func (s *Server) stop(ctx context.Context, mode string) error {
	if s.external {
		return errNotOwned
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgserver: stop of a closed server")
	}
	return s.run(ctx, "pg_ctl", "stop", "-w", "-t", waitSeconds(ctx), "-m", mode, "-D", s.dataDir)
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
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var err error
	// The postmaster removes its pid file whenever it exits, short of
	// SIGKILL; with no pid file there is nothing to stop.
	if _, statErr := os.Stat(filepath.Join(s.dataDir, "postmaster.pid")); statErr == nil {
		if err = s.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", s.dataDir); err != nil {
			err = errors.Join(err, s.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.dataDir))
		}
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("pgserver: %w", rmErr))
	}
	return err
}

// run runs the binary name of s.bin with args, as the postgres user when
// this process is root, in s.dir. Its error names the command and quotes
// its output.
func (s *Server) run(ctx context.Context, name string, args ...string) error {
	argv := append(append(append([]string(nil), s.asUser...), filepath.Join(s.bin, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	// Under runuser, killing the command on ctx does not kill pg_ctl; do
	// not wait for it to let go of the output pipe.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: %s: %w\n%s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
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

// probe reports why PostgreSQL cannot be run from bin, in a phrase, or
// nil when it can. As root it also returns the command prefix that runs a
// binary as the postgres user, and that user.
func probe(bin string) (asUser []string, owner *user.User, err error) {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, nil, fmt.Errorf("PostgreSQL 15 not found at %s", bin)
		}
	}
	if os.Geteuid() != 0 {
		return nil, nil, nil
	}
	owner, err = user.Lookup("postgres")
	if err != nil {
		return nil, nil, errors.New("running as root with no postgres user to run PostgreSQL as")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, nil, errors.New("running as root with no runuser to run PostgreSQL as postgres")
	}
	return []string{runuser, "-u", "postgres", "--"}, owner, nil
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
		return 0, fmt.Errorf("pgserver: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// waitReady returns once the server at dsn accepts a connection and
// answers on it, or when ctx ends.
func waitReady(ctx context.Context, dsn string) error {
	const pause = 50 * time.Millisecond
	for {
		err := ping(ctx, dsn)
		if err == nil {
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgserver: server not accepting connections: %w (last attempt: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
	}
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

// ping connects to dsn, checks the connection and closes it.
func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return errors.Join(conn.Ping(ctx), conn.Close(ctx))
}

// withDefaultTimeout bounds ctx by defaultStartTimeout when it has no
// deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultStartTimeout)
}

// waitSeconds is pg_ctl's -t for ctx: the whole seconds left, at least 1.
func waitSeconds(ctx context.Context) string {
	d, _ := ctx.Deadline()
	return strconv.Itoa(max(1, int(math.Ceil(time.Until(d).Seconds()))))
}
