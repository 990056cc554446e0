package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bouncerPaths are where pgbouncer is looked for after PATH: Debian puts
// it in /usr/sbin, which an unprivileged user's PATH often lacks.
var bouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"}

// bouncerSettings is pgbouncer.ini: every database of the server at
// 127.0.0.1:%[2]d, no authentication (the servers here trust 127.0.0.1),
// listening on 127.0.0.1:%[1]d only, no unix socket.
const bouncerSettings = `[databases]
* = host=127.0.0.1 port=%[2]d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[1]d
unix_socket_dir =
auth_type = trust
auth_file = %[3]s
pool_mode = %[4]s
logfile = %[5]s
pidfile =
admin_users = postgres
`

// ErrNoBouncer is wrapped by the error of StartBouncer when pgbouncer is
// not installed where it is looked for.
var ErrNoBouncer = errors.New("pgserver: pgbouncer not found")

// A Bouncer is a pgbouncer that this process started in front of a server.
type Bouncer struct {
	dsn     string
	cmd     *exec.Cmd
	done    chan error // the result of cmd.Wait
	dir     string
	logPath string
	port    int
}

// StartBouncer starts pgbouncer in front of the server dsn names and
// returns once it accepts connections. It pools in mode ("transaction",
// "session" or "statement"), with each line of extra appended to its
// [pgbouncer] section. dsn must be a postgres:// URL of a server on
// 127.0.0.1, such as a Server's. The Bouncer's DSN is dsn pointed at
// pgbouncer: same user, database and parameters. pgbouncer runs as the
// postgres user when this process is root, and listens on 127.0.0.1 only,
// on a free port. It is looked for in PATH, then /usr/sbin; the error
// wraps ErrNoBouncer when it is in neither. StartBouncer waits no longer
// than ctx allows, or a minute when ctx has no deadline. The caller must
// Close the Bouncer.
func StartBouncer(ctx context.Context, dsn, mode string, extra ...string) (*Bouncer, error) {
	bin, err := findBouncer()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgserver: StartBouncer: %w", err)
	}
	upstream, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("pgserver: StartBouncer: %q has no port: %w", u.Redacted(), err)
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	b, err := startBouncer(ctx, bin, upstream, mode, extra)
	if err != nil {
		return nil, err
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(b.port)
	b.dsn = u.String()
	return b, nil
}

// DSN returns the DSN given to StartBouncer, pointed at pgbouncer.
func (b *Bouncer) DSN() string { return b.dsn }

// Log returns what pgbouncer has written to its log so far.
func (b *Bouncer) Log() (string, error) {
	data, err := os.ReadFile(b.logPath)
	return string(data), err
}

// findBouncer returns the path of pgbouncer.
func findBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range bouncerPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w in PATH or %s", ErrNoBouncer, strings.Join(bouncerPaths, ", "))
}

// startBouncer writes the configuration into a new temporary directory and
// runs bin on it, returning once it accepts connections.
func startBouncer(ctx context.Context, bin string, upstream int, mode string, extra []string) (*Bouncer, error) {
	_, owner, err := probe(binDir()) // as root, the postgres user
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(tempBase(owner != nil), "pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	b := &Bouncer{dir: dir, logPath: filepath.Join(dir, "pgbouncer.log"), port: port, done: make(chan error, 1)}
	users := filepath.Join(dir, "userlist.txt")
	ini := fmt.Sprintf(bouncerSettings, port, upstream, users, mode, b.logPath) + strings.Join(extra, "\n") + "\n"
	err = errors.Join(
		os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	if err != nil {
		err = fmt.Errorf("pgserver: %w", err)
	} else {
		err = giveTo(dir, owner)
	}
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if owner != nil {
		args = append([]string{"-u", owner.Username}, args...) // pgbouncer refuses to run as root
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Dir = dir
	if err := b.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("pgserver: starting pgbouncer: %w", err), os.RemoveAll(dir))
	}
	go func() { b.done <- b.cmd.Wait() }()
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitReady(ctx, dsn); err != nil {
		return nil, errors.Join(fmt.Errorf("pgserver: pgbouncer: %w\n%s", err, logTail(b.logPath)), b.Close())
	}
	return b, nil
}

// Close stops pgbouncer (SIGTERM: at once, closing its connections) and
// removes its directory, returning what went wrong.
func (b *Bouncer) Close() error {
	var err error
	if sigErr := b.cmd.Process.Signal(syscall.SIGTERM); sigErr == nil {
		select {
		case <-b.done:
		case <-time.After(closeTimeout):
			err = errors.Join(b.cmd.Process.Kill(), errors.New("pgserver: pgbouncer did not stop on SIGTERM"))
			<-b.done
		}
	}
	return errors.Join(err, os.RemoveAll(b.dir))
}
