package chaos

import "testing"

// TestCountsPrintOnOneLine in a fixed format, faults in Kind order.
func TestCountsPrintOnOneLine(t *testing.T) {
	for _, tc := range []struct {
		counts Counts
		want   string
	}{
		{Counts{}, "requests=0 forwarded=0 upstream-errors=0 faults=0"},
		{Counts{Requests: 3, Forwarded: 3, Faults: map[Kind]int{}}, "requests=3 forwarded=3 upstream-errors=0 faults=0"},
		{
			Counts{Requests: 9, Forwarded: 6, UpstreamErrors: 1, Faults: map[Kind]int{Unavailable: 2, Reset: 1, Stall: 3, PartialBody: 0}},
			"requests=9 forwarded=6 upstream-errors=1 faults=6 (reset=1 stall=3 unavailable=2)",
		},
		{
			Counts{Requests: 2, Forwarded: 2, Upstreams: []UpstreamCounts{{URL: "http://a", Forwarded: 2}}},
			"requests=2 forwarded=2 upstream-errors=0 faults=0",
		},
		{
			Counts{Requests: 3, Forwarded: 3, UpstreamErrors: 1, Upstreams: []UpstreamCounts{
				{URL: "http://a", Forwarded: 2}, {URL: "http://b", Forwarded: 1, UpstreamErrors: 1}}},
			"requests=3 forwarded=3 upstream-errors=1 faults=0 upstreams [http://a forwarded=2 upstream-errors=0, http://b forwarded=1 upstream-errors=1]",
		},
	} {
		if got := tc.counts.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// TestInjectedAddsUpEveryKind.
func TestInjectedAddsUpEveryKind(t *testing.T) {
	c := Counts{Faults: map[Kind]int{Reset: 2, DropAfterCommit: 5, Unavailable: 1}}
	if got := c.Injected(); got != 8 {
		t.Fatalf("Injected() = %d, want 8", got)
	}
}

// TestCountsAreACopy: changing a returned Counts changes nothing in the
// proxy.
func TestCountsAreACopy(t *testing.T) {
	var c counters
	c.faults[Reset] = 1
	c.upstreams = []upstreamCounters{{url: "http://a", forwarded: 1}}
	got := c.snapshot()
	got.Faults[Reset] = 7
	got.Upstreams[0].Forwarded = 7
	if again := c.snapshot(); again.Faults[Reset] != 1 || again.Upstreams[0].Forwarded != 1 {
		t.Fatalf("snapshot shares its map or slice: %v", again)
	}
}
