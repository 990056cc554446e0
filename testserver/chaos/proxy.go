package chaos

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Proxy is a reverse proxy that forwards requests to Config.Upstream, or
// balances them over Config.Upstreams, and injects faults into some of
// them. It is an http.Handler: mount it in any
// server, or let Serve or Listen run one. A Proxy is safe for concurrent use.
//
// A request that suffers no fault is forwarded as the client sent it
// (method, path, query, headers and body, byte for byte; only hop-by-hop
// headers such as Connection are dropped and Host names the upstream) and
// the upstream's status, headers and body are relayed unchanged.
//
// An upstream that cannot be reached (a replica that was killed refuses
// connections) or that breaks off is answered 502 Bad Gateway, and counted
// in Counts.UpstreamErrors and its Upstreams entry (unless the client went
// away first). The proxy does not try
// another upstream: like a load balancer without retries, it leaves the
// retry to the client, whose next attempt goes to the next upstream the
// balance picks. A request is never sent to two upstreams.
//
// Faults that hang up (Reset, DropAfterCommit, Stall, PartialBody) take the
// connection over from net/http, which HTTP/1.x allows. Where it cannot be
// taken over (HTTP/2), the proxy aborts the handler with
// http.ErrAbortHandler instead, and net/http resets the stream.
type Proxy struct {
	match      func(*http.Request) bool
	inFlight   Reply
	keyHeader  string
	maxStall   time.Duration
	retryAfter string // Retry-After header value
	log        *slog.Logger
	errorLog   *log.Logger // net/http's own complaints, at Warn
	closeIdle  func()      // closes the owned transport's idle connections
	routes     []route     // one per upstream, in Config order
	balancer   *balancer
	chooser    *chooser

	closing   chan struct{} // closed when Close begins; ends every Stall
	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	counts    counters              // guarded by mu
	closed    bool                  // guarded by mu
	servers   []*http.Server        // guarded by mu; started by Serve
	conns     map[net.Conn]struct{} // guarded by mu; open connections of those servers
	connsOpen sync.WaitGroup        // one per entry ever put in conns
	serving   sync.WaitGroup        // one per running Serve
	inflight  sync.WaitGroup        // one per running ServeHTTP
}

// New returns a Proxy for cfg, or an error wrapping ErrInvalidConfig when
// cfg cannot be used. Close it when done.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &Proxy{
		match:      cfg.Match,
		inFlight:   cfg.InFlight,
		keyHeader:  cfg.KeyHeader,
		maxStall:   cfg.MaxStall,
		retryAfter: strconv.FormatInt(int64(cfg.RetryAfter/time.Second), 10),
		log:        cfg.Logger,
		closeIdle:  func() {},
		chooser:    newChooser(cfg),
		closing:    make(chan struct{}),
		conns:      make(map[net.Conn]struct{}),
	}
	if p.match == nil {
		p.match = Mutating
	}
	if p.keyHeader == "" {
		p.keyHeader = "Idempotency-Key"
	}
	if p.maxStall == 0 {
		p.maxStall = DefaultMaxStall
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.errorLog = slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)
	transport := cfg.Transport
	if transport == nil {
		owned := newTransport()
		transport, p.closeIdle = owned, owned.CloseIdleConnections
	}
	targets := targetsOf(cfg)
	p.routes = make([]route, len(targets))
	for i, u := range targets {
		f := &forwarder{upstream: *u, transport: transport, errorLog: p.errorLog}
		p.routes[i] = route{name: u.String(), forward: f, reverse: f.reverseProxy(nil, p.routeFailed(i))}
		p.counts.upstreams = append(p.counts.upstreams, upstreamCounters{url: u.String()})
	}
	p.balancer = newBalancer(cfg, len(targets))
	return p, nil
}

// ServeHTTP forwards r, or injects the fault the chooser picks for it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		http.Error(w, "chaos: proxy is closed", http.StatusServiceUnavailable)
		return
	}
	defer p.inflight.Done()

	kind := noFault
	if p.match(r) {
		kind = p.chooser.next()
	}
	switch kind {
	case noFault:
		i := p.forwarding()
		p.routes[i].reverse.ServeHTTP(w, r)
	case Reset:
		p.injected(kind, r)
		reset(w)
	case TooManyRequests:
		p.injected(kind, r)
		p.refuse(w, kind, http.StatusTooManyRequests)
	case Unavailable:
		p.injected(kind, r)
		p.refuse(w, kind, http.StatusServiceUnavailable)
	case InFlight:
		p.answerInFlight(w, r, p.forwarding())
	default: // the faults that strike after the upstream committed
		i := p.forwarding()
		resp, body, err := p.routes[i].forward.roundTrip(r)
		if err != nil {
			p.upstreamFailed(w, r, i, err)
			return
		}
		p.injected(kind, r)
		switch kind {
		case DropAfterCommit:
			hangUp(w)
		case BadGatewayAfterCommit:
			http.Error(w, "chaos: injected fault "+kind.String(), http.StatusBadGateway)
		case Stall:
			p.stall(w, r)
		case PartialBody:
			relayPart(w, resp, body)
		}
	}
}

// Counts returns what the proxy has done so far.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts.snapshot()
}

// Close stops the proxy: every server started by Serve stops accepting and
// its connections are closed, every Stall ends, and Close waits until every
// request being handled has finished; then the idle connections of the
// proxy's own transport are closed. Requests that arrive afterwards are
// answered 503 Service Unavailable. Close may be called more than once and
// concurrently; every call returns once the proxy has stopped, with the
// error (if any) from closing listeners.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.shutdown() })
	return p.closeErr
}

// shutdown is Close's single run.
func (p *Proxy) shutdown() error {
	p.mu.Lock()
	p.closed = true
	servers := append([]*http.Server(nil), p.servers...)
	p.mu.Unlock()
	close(p.closing)

	var errs []error
	for _, srv := range servers {
		if err := srv.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	// Once every Serve has returned no connection can be accepted any more;
	// close the stragglers accepted while the servers were being closed.
	p.serving.Wait()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.connsOpen.Wait()
	p.inflight.Wait()
	p.closeIdle()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: closing: %w", err)
	}
	return nil
}

// enter counts a request and, unless the proxy is closed, registers it as
// in flight; the caller must then call p.inflight.Done.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.requests++
	if p.closed {
		return false
	}
	p.inflight.Add(1)
	return true
}

// tally changes the counters under the lock.
func (p *Proxy) tally(change func(*counters)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(&p.counts)
}

// injected counts and logs a fault about to strike r.
func (p *Proxy) injected(kind Kind, r *http.Request) {
	p.tally(func(c *counters) { c.faults[kind]++ })
	p.log.Info("chaos: injected fault", "kind", kind.String(), "method", r.Method,
		"path", r.URL.Path, "idempotency_key", r.Header.Get(p.keyHeader))
}

// forwarding picks the upstream of a request about to be forwarded, counts
// the request as forwarded to it, and returns its index in p.routes.
func (p *Proxy) forwarding() int {
	i := p.balancer.pick()
	p.tally(func(c *counters) {
		c.forwarded++
		c.upstreams[i].forwarded++
	})
	return i
}

// upstreamFailed answers 502 to a request whose exchange with upstream i
// failed. An exchange the client gave up on first (its attempt timed out
// while the upstream worked) says nothing of the upstream and is not
// counted.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, i int, err error) {
	if r.Context().Err() != nil {
		p.log.Debug("chaos: client went away before the upstream answered", "upstream", p.routes[i].name,
			"method", r.Method, "path", r.URL.Path, "err", err)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	p.tally(func(c *counters) {
		c.upstreamErrors++
		c.upstreams[i].upstreamErrors++
	})
	p.log.Warn("chaos: upstream exchange failed", "upstream", p.routes[i].name, "method", r.Method,
		"path", r.URL.Path, "idempotency_key", r.Header.Get(p.keyHeader), "err", err)
	w.WriteHeader(http.StatusBadGateway)
}
