// Package chaos is a fault-injecting reverse proxy for tests of HTTP clients
// that retry.
//
// Put a Proxy between a client and the server it talks to, and the proxy
// forwards every request, except that some requests, picked by configured
// rates and a seed, suffer one of these faults (see Kind):
//
//   - Reset: the connection is reset before anything is forwarded.
//   - DropAfterCommit: the server answers, the client gets EOF instead.
//   - BadGatewayAfterCommit: the server answers, the client gets 502.
//   - Stall: the server answers, the client waits until it gives up.
//   - PartialBody: the server answers, the client gets half the body.
//   - TooManyRequests, Unavailable: 429 or 503 with Retry-After, nothing
//     forwarded.
//
// The faults after commit are the hard ones for a client: the server applied
// the request and the client cannot tell. A client that retries them with the
// same Idempotency-Key must end with each operation applied exactly once; the
// proxy exists to prove that nothing is duplicated or lost, and Counts says
// which faults a test run survived.
//
// # Which requests, which faults
//
// Only requests that Config.Match accepts can be faulted; by default that is
// every request but GET, HEAD, OPTIONS and TRACE, so a test can read the
// server's state through the proxy undisturbed. Config.Rate spreads one
// probability evenly over Config.Kinds (default all kinds); Config.Rates
// gives each kind its own. A Config with neither forwards everything
// unchanged.
//
// The choice is deterministic: one draw per matched request from a PCG
// generator seeded with Config.Seed. The same seed and the same sequence of
// matched requests give the same faults, so a failing run can be replayed by
// its seed. Concurrent requests draw in the order they reach the proxy.
// Faults returns the sequence a Config gives, so a test can choose a seed.
//
// # Forwarding
//
// Requests are forwarded with net/http/httputil.ReverseProxy: method, path,
// query, headers (Idempotency-Key, Authorization and X-Forwarded-For
// included) and body byte for byte; only hop-by-hop headers such as
// Connection are dropped, and Host names the upstream. Unfaulted responses
// are relayed unchanged.
//
// # Several upstreams
//
// With Config.Upstreams the proxy is the load balancer of replicas of one
// service, its faults in front of every one of them: each forwarded
// request goes to one upstream, in turn (RoundRobin, the default) or drawn
// at random under Config.Seed (Random). An upstream that refuses the
// connection, as a killed replica does, is answered 502 Bad Gateway: the
// proxy does not try another one, so a request never reaches two, and the
// client's retry goes to the next upstream. Counts.Upstreams says how many
// requests each upstream was sent and how many of those failed.
//
// # What Counts counts
//
// Counts counts requests as they reach the proxy, which is not always how a
// client counts its attempts. net/http's Transport itself resends a request
// that carries an Idempotency-Key header (and a rewindable body) when a
// reused keep-alive connection fails before the first response byte: after a
// Reset, a DropAfterCommit or a Stall that reached MaxStall, the proxy may
// see, and fault, a second request for what the client's code sent once.
// Tests that must match proxy counts with client attempts use a transport
// with DisableKeepAlives.
package chaos
