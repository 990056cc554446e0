package chaos

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"time"
)

// DefaultMaxStall is how long a Stall holds a response when Config.MaxStall
// is zero and the client does not give up first.
const DefaultMaxStall = 30 * time.Second

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// cannot use.
var ErrInvalidConfig = errors.New("chaos: invalid config")

// Config says where a Proxy forwards and which faults it injects. The zero
// value of every field but Upstream (or Upstreams) is usable: a Config with
// only Upstream set forwards every request unchanged.
type Config struct {
	// Upstream is the server requests are forwarded to: scheme "http" or
	// "https" and a host; its path, if any, is prefixed to every request
	// path and its query joined before the request's. One of Upstream and
	// Upstreams is required; they cannot be combined.
	Upstream *url.URL

	// Upstreams are the servers requests are forwarded to when there are
	// several, such as replicas of one service on one database: the proxy
	// is then their load balancer, and Balance picks the upstream of each
	// forwarded request. Each is as Upstream says, none may be nil, and
	// none may appear twice. The faults strike in front of every upstream
	// alike, drawn from one chooser. Default nil: Upstream alone.
	Upstreams []*url.URL

	// Balance picks the upstream of each forwarded request among
	// Upstreams: RoundRobin or Random (seeded with Seed). Requests that
	// are not forwarded (Reset, TooManyRequests, Unavailable) pick none.
	// With one upstream it changes nothing. Default RoundRobin.
	Balance Balance

	// Seed seeds the fault chooser. The chooser is math/rand/v2's PCG,
	// seeded with (uint64(Seed), 0x9e3779b97f4a7c15) and drawn from once
	// per matched request under a mutex, so the same seed and the same
	// sequence of matched requests give the same faults. Unmatched requests
	// draw nothing. Default 0, itself a fixed seed.
	Seed int64

	// Rate is the probability, in [0, 1], that a matched request suffers a
	// fault; the fault is one of Kinds, each equally likely. Default 0:
	// no faults. Rate and Kinds may not be combined with Rates.
	Rate float64

	// Kinds are the faults Rate is spread over. Each may appear once.
	// Default (nil or empty): every kind, AllKinds().
	Kinds []Kind

	// Rates gives each kind its own probability, in [0, 1], for a matched
	// request; their sum must not exceed 1. A kind absent from the map is
	// never injected. When Rates is non-nil, Rate must be 0 and Kinds nil.
	// Default nil: Rate and Kinds decide.
	Rates map[Kind]float64

	// Match picks the requests that may suffer a fault; every other request
	// is forwarded unchanged and draws nothing from the chooser. Default
	// Mutating: every request whose method is not GET, HEAD, OPTIONS or
	// TRACE, so that reading a server's state (GET /stats) through the
	// proxy is never disturbed. Use Every to let faults strike any request.
	Match func(*http.Request) bool

	// MaxStall bounds how long a Stall holds a response when the client
	// does not give up first. Default DefaultMaxStall (30s).
	MaxStall time.Duration

	// RetryAfter is sent as the Retry-After header of TooManyRequests and
	// Unavailable answers, in whole seconds; it must be a non-negative
	// whole number of seconds. Default 0: "Retry-After: 0", retry at once.
	RetryAfter time.Duration

	// Transport sends forwarded requests upstream. Default: an
	// *http.Transport owned by the proxy, with keep-alive pooling, no
	// environment proxy and compression disabled (so Accept-Encoding and
	// bodies pass through untouched); its idle connections are closed by
	// Close. A Transport given here belongs to the caller and is left open.
	Transport http.RoundTripper

	// InFlight is the answer of an InFlight fault: what the upstream
	// answers a request whose key's first request still runs. Default:
	// 409 Conflict with a plain-text body, the reference server's status.
	InFlight Reply

	// KeyHeader names the request header carrying the idempotency key,
	// which the proxy's log records name. Default "Idempotency-Key".
	KeyHeader string

	// Logger receives an Info record per injected fault ("chaos: injected
	// fault") and per ended Stall ("chaos: stall ended", with its reason:
	// "client gave up", "max stall elapsed" or "proxy closed"), and a Warn
	// record per failed upstream exchange and per complaint of net/http.
	// Default nil: silent.
	Logger *slog.Logger
}

// Reply is a response the proxy sends in the upstream's place.
type Reply struct {
	// Status is the status code; 0 is 409 Conflict.
	Status int
	// Header holds header fields to send; Retry-After is the proxy's.
	Header http.Header
	// Body is the body, sent with Header's Content-Type (default
	// text/plain).
	Body []byte
}

// Mutating reports whether r's method may change state on the server: every
// method but GET, HEAD, OPTIONS and TRACE. It is the default Config.Match.
func Mutating(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// Every reports true for every request. As Config.Match it lets faults
// strike reads as well as writes.
func Every(*http.Request) bool { return true }

// check reports the first thing wrong with c, wrapped in ErrInvalidConfig.
func (c Config) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Upstream == nil && len(c.Upstreams) == 0:
		return bad("Upstream or Upstreams is required")
	case c.Upstream != nil && c.Upstreams != nil:
		return bad("Upstream cannot be combined with Upstreams")
	case !c.Balance.valid():
		return bad("Balance %v is not RoundRobin or Random", c.Balance)
	}
	seenURL := make(map[string]bool)
	for i, u := range targetsOf(c) {
		name := "Upstream"
		if c.Upstreams != nil {
			name = fmt.Sprintf("Upstreams[%d]", i)
		}
		switch {
		case u == nil:
			return bad("%s is nil", name)
		case u.Scheme != "http" && u.Scheme != "https":
			return bad("%s scheme %q is not http or https", name, u.Scheme)
		case u.Host == "":
			return bad("%s %q has no host", name, u)
		case seenURL[u.String()]:
			return bad("%s %q is listed twice", name, u)
		}
		seenURL[u.String()] = true
	}
	switch {
	case c.MaxStall < 0:
		return bad("MaxStall %v is negative", c.MaxStall)
	case c.RetryAfter < 0 || c.RetryAfter%time.Second != 0:
		return bad("RetryAfter %v is not a non-negative whole number of seconds", c.RetryAfter)
	case !isProbability(c.Rate):
		return bad("Rate %v is outside [0, 1]", c.Rate)
	case c.Rates != nil && (c.Rate != 0 || c.Kinds != nil):
		return bad("Rates cannot be combined with Rate or Kinds")
	case c.InFlight.Status != 0 && (c.InFlight.Status < 200 || c.InFlight.Status > 599):
		return bad("InFlight.Status %d is not 2xx to 5xx", c.InFlight.Status)
	}
	seen := make(map[Kind]bool)
	for _, k := range c.Kinds {
		if !k.valid() {
			return bad("Kinds holds %v, which is no fault", k)
		}
		if seen[k] {
			return bad("Kinds lists %v twice", k)
		}
		seen[k] = true
	}
	sum := 0.0
	for k, r := range c.Rates {
		if !k.valid() {
			return bad("Rates holds %v, which is no fault", k)
		}
		if !isProbability(r) {
			return bad("Rates[%v] = %v is outside [0, 1]", k, r)
		}
		sum += r
	}
	// The slack absorbs rounding in sums such as 0.1+0.2+0.7.
	if sum > 1+1e-9 {
		return bad("Rates add up to %v, more than 1", sum)
	}
	return nil
}

// isProbability reports whether p is a number in [0, 1] (NaN is not).
func isProbability(p float64) bool { return !math.IsNaN(p) && p >= 0 && p <= 1 }
