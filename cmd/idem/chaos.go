package main

// idem chaos: the fault proxy (package testserver/chaos) in front of one
// server, or the load balancer of several replicas of it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idem/testserver"
	"github.com/idemkit/idem/testserver/chaos"
)

var chaosCommand = command{
	name:    "chaos",
	summary: "run the fault proxy in front of a server, or balancing over its replicas",
	run:     runChaos,
}

func chaosUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: idem chaos -upstream URL [-upstream URL ...] [flags]

Runs the fault proxy: every request is forwarded to an upstream, except
that a share of the mutating ones (-rate) suffers a fault, drawn from
-seed: reset, drop-after-commit, bad-gateway-after-commit, stall,
partial-body, too-many-requests, unavailable; and, named in -kinds, in-flight:
the upstream's answer to a request still being processed, sent while the
upstream works on it (see -dialect). With several upstreams
(replicas of one server on one database) the proxy is their load balancer:
each forwarded request goes to the next upstream in turn (-balance
round-robin) or to one drawn from -seed (-balance random). An upstream that
is down is answered 502 Bad Gateway; the proxy does not try another one,
and the client's retry goes to the next.

The first line on stdout is "listening on http://HOST:PORT". On SIGINT or
SIGTERM the proxy stops and prints what it did, as one "counts:" line.

Flags:
  -addr HOST:PORT       where to listen (default 127.0.0.1:8081; port 0 picks one)
  -upstream URL         an upstream; repeat it, or separate URLs with commas
  -balance NAME         round-robin (default) or random
  -rate P               share of the mutating requests to fault, 0 to 1 (default 0)
  -kinds K1,K2          the faults -rate is spread over (default: every kind)
  -seed N               seed of the faults and of -balance random (default 0)
  -max-stall D          longest a stall holds a response (default 30s)
  -retry-after D        Retry-After of 429, 503 and in-flight answers, whole seconds (default 0s)
  -dialect NAME         the upstream's idempotency dialect (as idem serve -dialect):
                        the answer of the in-flight fault, and the key's header in logs
  -log-level LEVEL      debug, info, warn (default) or error; logs go to stderr
`)
}

// upstreamList is the -upstream flag: repeatable, each value a URL or a
// comma-separated list of them.
type upstreamList []*url.URL

func (l *upstreamList) String() string {
	names := make([]string, len(*l))
	for i, u := range *l {
		names[i] = u.String()
	}
	return strings.Join(names, ",")
}

func (l *upstreamList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("upstream %q: %w", f, err)
		}
		*l = append(*l, u)
	}
	return nil
}

func runChaos(ctx context.Context, e env, args []string) int {
	const name = "idem chaos"
	fs := newFlagSet(name)
	var upstreams upstreamList
	fs.Var(&upstreams, "upstream", "")
	addr := fs.String("addr", "127.0.0.1:8081", "")
	balance := fs.String("balance", chaos.RoundRobin.String(), "")
	rate := fs.Float64("rate", 0, "")
	kinds := fs.String("kinds", "", "")
	seed := fs.Int64("seed", 0, "")
	maxStall := fs.Duration("max-stall", chaos.DefaultMaxStall, "")
	retryAfter := fs.Duration("retry-after", 0, "")
	level := fs.String("log-level", "warn", "")
	dialect := fs.String("dialect", "", "")
	pos, code, ok := parseFlags(fs, e, args, chaosUsage)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, name, "unexpected arguments %q", pos)
	}
	if len(upstreams) == 0 {
		return usageError(e, name, "-upstream is required")
	}
	cfg := chaos.Config{Upstreams: upstreams, Rate: *rate, Seed: *seed, MaxStall: *maxStall, RetryAfter: *retryAfter}
	var err error
	if cfg.Balance, err = chaos.ParseBalance(*balance); err != nil {
		return usageError(e, name, "-balance: %q is not round-robin or random", *balance)
	}
	if *kinds != "" {
		for _, f := range strings.Split(*kinds, ",") {
			k, err := chaos.ParseKind(strings.TrimSpace(f))
			if err != nil {
				return usageError(e, name, "-kinds: %q is no fault kind", f)
			}
			cfg.Kinds = append(cfg.Kinds, k)
		}
	}
	if *dialect != "" {
		d, ok := testserver.DialectNamed(*dialect)
		if !ok {
			return usageError(e, name, "-dialect: %q is none of %s", *dialect, strings.Join(testserver.DialectNames(), ", "))
		}
		status, h, body := d.InFlightResponse()
		cfg.InFlight = chaos.Reply{Status: status, Header: h, Body: body}
		cfg.KeyHeader = d.KeyHeader
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return usageError(e, name, "-log-level: %q is not debug, info, warn or error", *level)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lv}))
	p, err := chaos.New(cfg)
	if err != nil {
		return usageError(e, name, "%s", strings.TrimPrefix(err.Error(), chaos.ErrInvalidConfig.Error()+": "))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = p.Close()
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return exitFailure
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	fmt.Fprintf(e.stdout, "listening on http://%s\n", ln.Addr())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	closeErr := p.Close()
	if serveErr == nil {
		serveErr = <-served
	}
	fmt.Fprintf(e.stdout, "counts: %s\n", p.Counts())
	if err := errors.Join(closeErr, ignoreClosed(serveErr)); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return exitFailure
	}
	return exitOK
}

// ignoreClosed drops the error Serve returns once the proxy is closed.
func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
