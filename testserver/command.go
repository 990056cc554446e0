package testserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// CrashExitCode is the exit status of the binary at an injected crash with
// -crash=exit: 137, what a shell reports for a process killed by SIGKILL.
const CrashExitCode = 137

// shutdownGrace bounds how long a graceful stop waits for requests.
const shutdownGrace = 5 * time.Second

// Command runs the reference server as a command-line program: it parses
// args (without the program name), serves until ctx ends or the process
// gets SIGINT or SIGTERM, then shuts down gracefully. The first line on
// stdout is "listening on http://HOST:PORT"; logs go to stderr. It returns
// nil after a clean shutdown, and an error wrapping ErrUsage (after
// printing the problem) for bad arguments, or wrapping flag.ErrHelp for -h.
//
// With -crash=hang a request that reaches a crash point stops there for
// good, as a process frozen at that instant would, so that a test can kill
// the process exactly there. Only SIGKILL ends such a process: a graceful
// stop (SIGINT, SIGTERM, ctx ending) waits for every request, the hung one
// included, and further signals are caught, not acted on. A request hung
// inside its final transaction (the before-commit point) also holds the
// only write connection: every other write, the sweeper's too, queues
// behind it without limit (see Config.BusyTimeout).
//
// The idem-testserver binary is this function; so is "idem serve".
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Signals are caught from the start: one that arrives as soon as the
	// server says it listens stops it gracefully, as any later one does.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, addr, err := parseArgs(args, stdout, stderr)
	if err != nil {
		return err
	}
	in, err := Listen(cfg, addr)
	if err != nil {
		if errors.Is(err, ErrInvalidConfig) {
			fmt.Fprintln(stderr, err)
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "listening on %s\n", in.URL)
	logger := cfg.Logger
	logger.Info("serving", "url", in.URL, "db", redactDatabase(cfg.Path))

	select {
	case <-ctx.Done():
	case err := <-in.served: // the listener failed
		in.served <- err
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := in.Shutdown(sctx); err != nil {
		return fmt.Errorf("testserver: shutting down: %w", err)
	}
	return nil
}

// parseArgs turns the command line into a Config (with its Logger and
// Crash set) and the listen address.
func parseArgs(args []string, stdout, stderr io.Writer) (Config, string, error) {
	fs := flag.NewFlagSet("idem-testserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       Config
		addr      = fs.String("addr", "127.0.0.1:8080", "`address` to listen on (host:port; port 0 picks a free one)")
		logLevel  = fs.String("log-level", "info", "log `level`: debug, info, warn, error or off")
		crashMode = fs.String("crash", "exit", "what an injected crash does: exit (the process exits with status 137), abort (only the request is aborted) or hang (the request stops, announced on stdout, until the process is killed with SIGKILL: SIGINT and SIGTERM wait for it forever)")
		dialect   = fs.String("dialect", "", "the idempotency `dialect` to speak: "+strings.Join(DialectNames(), ", ")+" (default: the server's own, Idempotency-Key, 409, Idempotent-Replayed, 422)")
		uniform   = fs.Float64("faults", 0, "fail this `fraction` of mutating requests, spread evenly over the seven server faults (replaces the -fault-* rates; -fault-delay still sets the delay)")
	)
	fs.StringVar(&cfg.Path, "db", "idem-testserver.db", "SQLite database `file` (created if missing; :memory: keeps nothing), or a postgres:// URL of a database that replicas may share")
	fs.DurationVar(&cfg.Retention, "retention", 0, "how long keys are kept (0: the -dialect's retention, 24h unless it has its own)")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", 0, "how often expired keys are deleted (0: a tenth of -retention, at most 1h)")
	fs.DurationVar(&cfg.LockTimeout, "lock-timeout", DefaultLockTimeout, "how long an in-flight lock holds before a retry may take it over")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body", DefaultMaxBodyBytes, "largest request body accepted, in `bytes`")
	fs.DurationVar(&cfg.ReadTimeout, "read-timeout", DefaultReadTimeout, "how long a whole request, header and body, may take to arrive; a slower body gets 408 and the connection is closed")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", DefaultWriteTimeout, "how long a request may take from the end of its header to the end of its response")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request")
	f := &cfg.Faults
	fs.Uint64Var(&f.Seed, "seed", 0, "seed for the fault generators")
	fs.Float64Var(&f.ErrorBeforeCommit, "fault-error", 0, "`fraction` of requests answered 500 or 503 instead of committing")
	fs.Float64Var(&f.HangUpAfterCommit, "fault-hang-up", 0, "`fraction` of requests committed, then hung up without an answer")
	fs.Float64Var(&f.BadGatewayAfterCommit, "fault-bad-gateway", 0, "`fraction` of requests committed, then answered 502")
	fs.Float64Var(&f.CrashBeforeCommit, "fault-crash-before-commit", 0, "`fraction` of requests that crash just before their final commit")
	fs.Float64Var(&f.CrashAfterCommit, "fault-crash-after-commit", 0, "`fraction` of requests that crash just after their final commit")
	fs.Float64Var(&f.CrashAfterGateway, "fault-crash-after-gateway", 0, "`fraction` of charges that crash between the gateway capture and recording it")
	fs.Float64Var(&f.DelayRate, "fault-delay-rate", 0, "`fraction` of requests delayed by -fault-delay")
	fs.DurationVar(&f.Delay, "fault-delay", DefaultFaultDelay, "how long a delayed request waits")
	fs.Float64Var(&f.Gateway.Failure, "gateway-failure", 0, "`fraction` of gateway captures that fail before capturing")
	fs.Float64Var(&f.Gateway.LostResponse, "gateway-lost-response", 0, "`fraction` of gateway captures that capture, then fail")
	fs.DurationVar(&f.Gateway.Delay, "gateway-delay", 0, "how long every gateway capture takes")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: idem-testserver [flags]\n\nThe idem reference server: an HTTP API with idempotency keys, backed by SQLite or PostgreSQL.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, "", err
		}
		return Config{}, "", fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return Config{}, "", fmt.Errorf("%w: unexpected arguments", ErrUsage)
	}
	if *dialect != "" {
		d, ok := DialectNamed(*dialect)
		if !ok {
			fmt.Fprintf(stderr, "-dialect must be one of %s, not %q\n", strings.Join(DialectNames(), ", "), *dialect)
			return Config{}, "", fmt.Errorf("%w: bad -dialect", ErrUsage)
		}
		cfg.Dialect = d
	}
	if *uniform > 0 {
		g, d := f.Gateway, f.Delay
		*f = UniformFaults(*uniform, f.Seed)
		f.Gateway, f.Delay = g, d
	}
	logger, err := newLogger(*logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return Config{}, "", fmt.Errorf("%w: %w", ErrUsage, err)
	}
	cfg.Logger = logger
	switch *crashMode {
	case "exit":
		cfg.Crash = func(point string) {
			logger.Error("injected crash: exiting", "point", point, "status", CrashExitCode)
			os.Exit(CrashExitCode)
		}
	case "abort":
	case "hang":
		cfg.Crash = func(point string) {
			fmt.Fprintf(stdout, "crash point %s reached\n", point)
			select {} // until the process is killed
		}
	default:
		fmt.Fprintf(stderr, "-crash must be exit, abort or hang, not %q\n", *crashMode)
		return Config{}, "", fmt.Errorf("%w: bad -crash", ErrUsage)
	}
	return cfg, *addr, nil
}

// newLogger returns a text logger to w at the named level.
func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	if level == "off" {
		return slog.New(slog.DiscardHandler), nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad -log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
