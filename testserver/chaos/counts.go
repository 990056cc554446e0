package chaos

import (
	"fmt"
	"strings"
)

// Counts is what a Proxy has done so far, so that a test can say which
// faults its client survived.
type Counts struct {
	// Requests is every request the proxy received, including those
	// refused because the proxy was closed.
	Requests int

	// Forwarded is the requests sent upstream: those forwarded unchanged
	// and those hit by a fault that strikes after forwarding
	// (DropAfterCommit, BadGatewayAfterCommit, Stall, PartialBody).
	Forwarded int

	// UpstreamErrors is the forwarded requests whose upstream exchange
	// failed while the client waited (the upstream was unreachable or
	// broke off). They are answered 502 Bad Gateway, and no fault is
	// counted for them.
	UpstreamErrors int

	// Faults counts the faults injected, by kind. A kind never injected
	// has no entry, so Faults[k] reads as 0 for it.
	Faults map[Kind]int

	// Upstreams splits Forwarded and UpstreamErrors by upstream, one entry
	// per upstream in the order of Config.Upstreams (one entry for
	// Config.Upstream). Their Forwarded add up to Forwarded, their
	// UpstreamErrors to UpstreamErrors.
	Upstreams []UpstreamCounts
}

// UpstreamCounts is what a Proxy has sent to one of its upstreams.
type UpstreamCounts struct {
	// URL is the upstream, as Config names it.
	URL string
	// Forwarded is the requests sent to this upstream.
	Forwarded int
	// UpstreamErrors is those of them whose exchange failed while the
	// client waited: the upstream refused the connection (it was down) or
	// broke off.
	UpstreamErrors int
}

// Injected returns the number of faults injected, of every kind.
func (c Counts) Injected() int {
	n := 0
	for _, v := range c.Faults {
		n += v
	}
	return n
}

// String returns the counts on one line, faults in Kind order, e.g.
// "requests=5 forwarded=3 upstream-errors=0 faults=2 (reset=1 stall=1)",
// followed, when there are several upstreams, by each one's counts:
// " upstreams [http://127.0.0.1:8001 forwarded=2 upstream-errors=0,
// http://127.0.0.1:8002 forwarded=1 upstream-errors=0]".
func (c Counts) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d forwarded=%d upstream-errors=%d faults=%d",
		c.Requests, c.Forwarded, c.UpstreamErrors, c.Injected())
	sep := " ("
	for k := Reset; k <= lastKind; k++ {
		if n := c.Faults[k]; n > 0 {
			fmt.Fprintf(&b, "%s%v=%d", sep, k, n)
			sep = " "
		}
	}
	if sep == " " {
		b.WriteString(")")
	}
	if len(c.Upstreams) > 1 {
		b.WriteString(" upstreams [")
		for i, u := range c.Upstreams {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s forwarded=%d upstream-errors=%d", u.URL, u.Forwarded, u.UpstreamErrors)
		}
		b.WriteString("]")
	}
	return b.String()
}

// counters is the proxy's running tally behind Counts.
type counters struct {
	requests, forwarded, upstreamErrors int
	faults                              [lastKind + 1]int
	upstreams                           []upstreamCounters // one per route
}

// upstreamCounters is the running tally of one upstream.
type upstreamCounters struct {
	url                       string
	forwarded, upstreamErrors int
}

// snapshot turns the tally into Counts.
func (c *counters) snapshot() Counts {
	out := Counts{
		Requests:       c.requests,
		Forwarded:      c.forwarded,
		UpstreamErrors: c.upstreamErrors,
		Faults:         make(map[Kind]int),
	}
	for k := Reset; k <= lastKind; k++ {
		if c.faults[k] > 0 {
			out.Faults[k] = c.faults[k]
		}
	}
	for _, u := range c.upstreams {
		out.Upstreams = append(out.Upstreams, UpstreamCounts{URL: u.url, Forwarded: u.forwarded, UpstreamErrors: u.upstreamErrors})
	}
	return out
}
