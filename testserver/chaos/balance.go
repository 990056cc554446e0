package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
)

// Balance is how a Proxy with several upstreams picks the one a request is
// forwarded to: what a load balancer in front of replicas of one service
// does.
type Balance int

const (
	// RoundRobin sends the forwarded requests to the upstreams in turn, in
	// the order of Config.Upstreams: the k-th forwarded request (counting
	// from 0, in the order requests reach the proxy) goes to upstream
	// k mod n. It is the default.
	RoundRobin Balance = iota

	// Random sends each forwarded request to an upstream drawn uniformly
	// from a PCG generator seeded with (uint64(Config.Seed),
	// balanceStream): a generator of its own, so that the same seed gives
	// the same faults whatever the balance, and the same sequence of
	// forwarded requests gives the same upstreams.
	Random
)

// balanceStream is the second PCG seed word of Random; the fault chooser
// uses pcgStream.
const balanceStream = 0x6a09e667f3bcc909

// String returns the balance's name, as ParseBalance reads it:
// "round-robin" or "random".
func (b Balance) String() string {
	switch b {
	case RoundRobin:
		return "round-robin"
	case Random:
		return "random"
	}
	return fmt.Sprintf("Balance(%d)", int(b))
}

// valid reports whether b is one of the balances.
func (b Balance) valid() bool { return b == RoundRobin || b == Random }

// ParseBalance returns the balance named s ("round-robin" or "random",
// case-insensitive), or an error wrapping ErrInvalidConfig.
func ParseBalance(s string) (Balance, error) {
	for _, b := range []Balance{RoundRobin, Random} {
		if strings.EqualFold(s, b.String()) {
			return b, nil
		}
	}
	return 0, fmt.Errorf("%w: balance %q is not round-robin or random", ErrInvalidConfig, s)
}

// route is one upstream of a proxy: where its requests go and what it has
// handled.
type route struct {
	name    string // the upstream's URL, for Counts and log records
	forward *forwarder
	reverse *httputil.ReverseProxy // forwards unfaulted requests
}

// balancer picks the route of each forwarded request.
type balancer struct {
	balance Balance
	mu      sync.Mutex
	next    int        // RoundRobin: the index of the next route; guarded by mu
	rng     *rand.Rand // Random; guarded by mu
	n       int        // number of routes
}

// newBalancer returns the balancer of n routes for cfg.
func newBalancer(cfg Config, n int) *balancer {
	b := &balancer{balance: cfg.Balance, n: n}
	if b.balance == Random {
		b.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), balanceStream))
	}
	return b
}

// pick returns the index of the route of the next forwarded request.
func (b *balancer) pick() int {
	if b.n == 1 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.balance == Random {
		return b.rng.IntN(b.n)
	}
	i := b.next
	b.next = (b.next + 1) % b.n
	return i
}

// targetsOf returns the upstreams cfg names, in order: Upstreams, or
// Upstream alone.
func targetsOf(cfg Config) []*url.URL {
	if cfg.Upstreams == nil {
		return []*url.URL{cfg.Upstream}
	}
	return cfg.Upstreams
}

// routeFailed returns the ErrorHandler of route i.
func (p *Proxy) routeFailed(i int) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) { p.upstreamFailed(w, r, i, err) }
}
