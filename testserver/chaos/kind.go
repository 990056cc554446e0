package chaos

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind names one fault the proxy can inject into a request. Each request
// suffers at most one.
type Kind uint8

// The faults, in the order the chooser walks them (see Config).
const (
	// Reset resets the client's connection before anything is forwarded:
	// the proxy hijacks the connection, sets SO_LINGER to zero and closes
	// it, so the client reads ECONNRESET. Nothing reaches the upstream.
	Reset Kind = iota + 1

	// DropAfterCommit forwards the request, reads the upstream response to
	// its end (the upstream has committed), then closes the client's
	// connection without relaying a byte: the client sees EOF before any
	// response. This is a load balancer losing a finished request.
	DropAfterCommit

	// BadGatewayAfterCommit forwards the request, reads and discards the
	// upstream response, and answers 502 Bad Gateway.
	BadGatewayAfterCommit

	// Stall forwards the request, reads the upstream response, then holds
	// it back until the client gives up (its connection closes or its
	// request context ends), Config.MaxStall elapses, or the proxy is
	// closed; then it closes the connection without relaying anything.
	Stall

	// PartialBody forwards the request and relays the upstream status,
	// headers and a Content-Length for the whole body, but only the first
	// half of the body (rounded down), then closes the connection: the
	// client reads io.ErrUnexpectedEOF. An empty upstream body has no
	// shorter prefix, so then nothing at all is relayed, as with
	// DropAfterCommit.
	PartialBody

	// TooManyRequests answers 429 Too Many Requests with a Retry-After
	// header (Config.RetryAfter) without forwarding anything.
	TooManyRequests

	// Unavailable answers 503 Service Unavailable with a Retry-After header
	// (Config.RetryAfter) without forwarding anything.
	Unavailable

	// InFlight forwards the request and, once it is written upstream and
	// before the upstream answers, answers the client with
	// Config.InFlight, the upstream's way of saying a request with this
	// key is still being processed, and a Retry-After header
	// (Config.RetryAfter); then it hangs up on the upstream, which goes on
	// with the request or not as it does when a client goes away. It is
	// not among AllKinds, since its answer is the upstream's dialect:
	// name it in Kinds or Rates.
	InFlight
)

// noFault is what the chooser returns for a request it leaves alone.
const noFault Kind = 0

// lastKind is the highest valid Kind.
const lastKind = InFlight

// AllKinds returns every fault kind that needs no knowledge of the
// upstream (all but InFlight) in chooser order, in a new slice: the kinds
// a Config's Rate is spread over by default.
func AllKinds() []Kind {
	all := make([]Kind, 0, Unavailable)
	for k := Reset; k <= Unavailable; k++ {
		all = append(all, k)
	}
	return all
}

// String returns the kind's name in lower-case words joined by hyphens,
// "none" for the zero Kind, and "Kind(n)" for a value that names no kind.
func (k Kind) String() string {
	switch k {
	case noFault:
		return "none"
	case Reset:
		return "reset"
	case DropAfterCommit:
		return "drop-after-commit"
	case BadGatewayAfterCommit:
		return "bad-gateway-after-commit"
	case Stall:
		return "stall"
	case PartialBody:
		return "partial-body"
	case TooManyRequests:
		return "too-many-requests"
	case Unavailable:
		return "unavailable"
	case InFlight:
		return "in-flight"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// valid reports whether k names a fault.
func (k Kind) valid() bool { return k >= Reset && k <= lastKind }

// ParseKind returns the kind named s, as String names it ("reset",
// "drop-after-commit", ...; case-insensitive), or an error wrapping
// ErrInvalidConfig.
func ParseKind(s string) (Kind, error) {
	for k := Reset; k <= lastKind; k++ {
		if strings.EqualFold(s, k.String()) {
			return k, nil
		}
	}
	return noFault, fmt.Errorf("%w: %q is no fault kind", ErrInvalidConfig, s)
}
