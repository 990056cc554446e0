package chaos

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// replicas starts n upstreams; upstream i answers 201 with the body
// strconv.Itoa(i), so that a response says which one served it.
func replicas(t *testing.T, n int) ([]*upstream, []*url.URL) {
	t.Helper()
	ups := make([]*upstream, n)
	targets := make([]*url.URL, n)
	for i := range n {
		ups[i] = newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, strconv.Itoa(i))
		})
		targets[i] = ups[i].target(t)
	}
	return ups, targets
}

// listenBalanced starts a proxy for cfg, which names its upstreams, and
// closes it when the test ends.
func listenBalanced(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// served sends n charges to s one after the other and returns, for each,
// its status and body ("201:0" for upstream 0's answer, "502:" for a bad
// gateway), comma-separated.
func served(t *testing.T, s *Server, path string, n int) string {
	t.Helper()
	c := newClient(t)
	var out []string
	for range n {
		resp, err := post(context.Background(), c, s.URL+path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusCreated {
			body = nil // the proxy's own answers carry text nobody needs here
		}
		out = append(out, strconv.Itoa(resp.StatusCode)+":"+string(body))
	}
	return strings.Join(out, ",")
}

// TestRoundRobinSendsToEachUpstreamInTurn, in the order of Upstreams, and
// counts what each received.
func TestRoundRobinSendsToEachUpstreamInTurn(t *testing.T) {
	ups, targets := replicas(t, 3)
	s := listenBalanced(t, Config{Upstreams: targets})
	if got, want := served(t, s, "", 7), "201:0,201:1,201:2,201:0,201:1,201:2,201:0"; got != want {
		t.Fatalf("answers %s, want %s", got, want)
	}
	for i, want := range []int{3, 2, 2} {
		if n := ups[i].count(); n != want {
			t.Errorf("upstream %d received %d requests, want %d", i, n, want)
		}
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), Counts{Requests: 7, Forwarded: 7, Upstreams: []UpstreamCounts{
		{URL: targets[0].String(), Forwarded: 3},
		{URL: targets[1].String(), Forwarded: 2},
		{URL: targets[2].String(), Forwarded: 2},
	}})
}

// TestRandomBalanceFollowsItsSeed: the upstreams are the draws of PCG
// seeded with (Seed, balanceStream), the same for every proxy with that
// seed, and another seed gives other draws.
func TestRandomBalanceFollowsItsSeed(t *testing.T) {
	_, targets := replicas(t, 3)
	const n = 24
	expect := func(seed int64) string {
		rng := rand.New(rand.NewPCG(uint64(seed), balanceStream))
		var want []string
		for range n {
			want = append(want, "201:"+strconv.Itoa(rng.IntN(3)))
		}
		return strings.Join(want, ",")
	}
	var runs []string
	for _, seed := range []int64{42, 42, 7} {
		s := listenBalanced(t, Config{Upstreams: targets, Balance: Random, Seed: seed})
		got := served(t, s, "", n)
		if want := expect(seed); got != want {
			t.Fatalf("seed %d: answers %s, want %s", seed, got, want)
		}
		runs = append(runs, got)
	}
	if runs[0] == runs[2] {
		t.Fatalf("seeds 42 and 7 drew the same upstreams: %s", runs[0])
	}
	for i := range 3 {
		if !strings.Contains(runs[0], "201:"+strconv.Itoa(i)) {
			t.Errorf("seed 42 never picked upstream %d in %d draws: %s", i, n, runs[0])
		}
	}
}

// TestTheBalanceDoesNotChangeTheFaults: the same seed injects the same
// faults into the same requests, balanced at random or in turn.
func TestTheBalanceDoesNotChangeTheFaults(t *testing.T) {
	_, targets := replicas(t, 2)
	var kinds []string
	for _, b := range []Balance{RoundRobin, Random} {
		cfg := Config{Upstreams: targets, Balance: b, Seed: 3, Rate: 0.5, Kinds: []Kind{TooManyRequests}}
		s := listenBalanced(t, cfg)
		got := served(t, s, "", 16)
		// Keep the status only: which upstream served differs by balance.
		var statuses []string
		for _, a := range strings.Split(got, ",") {
			statuses = append(statuses, a[:3])
		}
		kinds = append(kinds, strings.Join(statuses, ","))
	}
	if kinds[0] != kinds[1] {
		t.Fatalf("round robin saw %s, random %s", kinds[0], kinds[1])
	}
	if !strings.Contains(kinds[0], "429") || !strings.Contains(kinds[0], "201") {
		t.Fatalf("seed 3 at rate 0.5 gave %s; the test needs both outcomes", kinds[0])
	}
}

// TestRequestsNotForwardedTakeNoTurn: a request refused by a fault before
// forwarding picks no upstream, so the forwarded ones still go in turn.
func TestRequestsNotForwardedTakeNoTurn(t *testing.T) {
	_, targets := replicas(t, 2)
	cfg := oneKind(TooManyRequests)
	cfg.Upstreams = targets
	cfg.Match = func(r *http.Request) bool { return r.URL.Path == "/charges" }
	s := listenBalanced(t, cfg)
	var got []string
	for _, path := range []string{"/charges", "/other", "/charges", "/other", "/other"} {
		got = append(got, served(t, s, strings.TrimSuffix(path, "/charges"), 1))
	}
	if got, want := strings.Join(got, ","), "429:,201:0,429:,201:1,201:0"; got != want {
		t.Fatalf("answers %s, want %s", got, want)
	}
}

// TestFaultsAfterCommitStrikeTheUpstreamInTurn: the request reaches the
// upstream the balance picked, which commits; the client gets the fault.
func TestFaultsAfterCommitStrikeTheUpstreamInTurn(t *testing.T) {
	ups, targets := replicas(t, 2)
	cfg := oneKind(BadGatewayAfterCommit)
	cfg.Upstreams = targets
	s := listenBalanced(t, cfg)
	if got, want := served(t, s, "", 4), "502:,502:,502:,502:"; got != want {
		t.Fatalf("answers %s, want %s", got, want)
	}
	for i := range ups {
		if n := ups[i].count(); n != 2 {
			t.Errorf("upstream %d received %d requests, want 2", i, n)
		}
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), Counts{Requests: 4, Forwarded: 4,
		Faults: map[Kind]int{BadGatewayAfterCommit: 4},
		Upstreams: []UpstreamCounts{
			{URL: targets[0].String(), Forwarded: 2},
			{URL: targets[1].String(), Forwarded: 2},
		}})
}

// TestADownUpstreamIsAnsweredBadGateway: a replica that refuses
// connections gets its turns all the same, each answered 502 for the
// client to retry; the others serve theirs. Nothing is sent twice.
func TestADownUpstreamIsAnsweredBadGateway(t *testing.T) {
	ups, targets := replicas(t, 3)
	targets[1] = refusingAddress(t)
	s := listenBalanced(t, Config{Upstreams: targets})
	if got, want := served(t, s, "", 6), "201:0,502:,201:2,201:0,502:,201:2"; got != want {
		t.Fatalf("answers %s, want %s", got, want)
	}
	if n := ups[0].count() + ups[2].count(); n != 4 {
		t.Errorf("the live upstreams received %d requests, want 4", n)
	}
	closeServer(t, s)
	assertCounts(t, s.Counts(), Counts{Requests: 6, Forwarded: 6, UpstreamErrors: 2, Upstreams: []UpstreamCounts{
		{URL: targets[0].String(), Forwarded: 2},
		{URL: targets[1].String(), Forwarded: 2, UpstreamErrors: 2},
		{URL: targets[2].String(), Forwarded: 2},
	}})
}

// refusingAddress returns the URL of a loopback port nothing listens on:
// one just freed.
func refusingAddress(t *testing.T) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return &url.URL{Scheme: "http", Host: addr}
}

// TestBalanceNamesRoundTrip through String and ParseBalance, whatever the
// case; other names are ErrInvalidConfig.
func TestBalanceNamesRoundTrip(t *testing.T) {
	for _, b := range []Balance{RoundRobin, Random} {
		got, err := ParseBalance(strings.ToUpper(b.String()))
		if err != nil || got != b {
			t.Errorf("ParseBalance(%q) = %v, %v; want %v", strings.ToUpper(b.String()), got, err, b)
		}
	}
	if RoundRobin.String() != "round-robin" || Random.String() != "random" || Balance(9).String() != "Balance(9)" {
		t.Errorf("names %q %q %q", RoundRobin, Random, Balance(9))
	}
	for _, s := range []string{"", "roundrobin", "least-conn"} {
		if _, err := ParseBalance(s); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseBalance(%q): %v, want ErrInvalidConfig", s, err)
		}
	}
}
