package chaos

import (
	"errors"
	"math"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestNewRefusesConfigsItCannotUse: every bad field is reported as
// ErrInvalidConfig, and nothing is started.
func TestNewRefusesConfigsItCannotUse(t *testing.T) {
	up := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
	up2 := &url.URL{Scheme: "http", Host: "127.0.0.1:2"}
	for name, cfg := range map[string]Config{
		"no upstream":            {},
		"upstream scheme":        {Upstream: &url.URL{Scheme: "ftp", Host: "h"}},
		"upstream without host":  {Upstream: &url.URL{Scheme: "http", Path: "/x"}},
		"negative MaxStall":      {Upstream: up, MaxStall: -time.Second},
		"negative RetryAfter":    {Upstream: up, RetryAfter: -time.Second},
		"fractional RetryAfter":  {Upstream: up, RetryAfter: 1500 * time.Millisecond},
		"Rate above 1":           {Upstream: up, Rate: 1.01},
		"negative Rate":          {Upstream: up, Rate: -0.1},
		"NaN Rate":               {Upstream: up, Rate: math.NaN()},
		"unknown kind":           {Upstream: up, Rate: 0.5, Kinds: []Kind{Reset, Kind(99)}},
		"zero kind":              {Upstream: up, Rate: 0.5, Kinds: []Kind{noFault}},
		"repeated kind":          {Upstream: up, Rate: 0.5, Kinds: []Kind{Reset, Stall, Reset}},
		"Rates with Rate":        {Upstream: up, Rate: 0.5, Rates: map[Kind]float64{Reset: 0.1}},
		"Rates with Kinds":       {Upstream: up, Kinds: []Kind{Reset}, Rates: map[Kind]float64{Reset: 0.1}},
		"Rates unknown kind":     {Upstream: up, Rates: map[Kind]float64{Kind(9): 0.1}},
		"Rates negative":         {Upstream: up, Rates: map[Kind]float64{Reset: -0.1}},
		"Rates NaN":              {Upstream: up, Rates: map[Kind]float64{Reset: math.NaN()}},
		"Rates sum above 1":      {Upstream: up, Rates: map[Kind]float64{Reset: 0.6, Stall: 0.5}},
		"empty Upstreams":        {Upstreams: []*url.URL{}},
		"Upstream and Upstreams": {Upstream: up, Upstreams: []*url.URL{up2}},
		"nil in Upstreams":       {Upstreams: []*url.URL{up, nil}},
		"Upstreams scheme":       {Upstreams: []*url.URL{up, {Scheme: "ftp", Host: "h"}}},
		"Upstreams without host": {Upstreams: []*url.URL{{Scheme: "http", Path: "/x"}}},
		"Upstreams twice":        {Upstreams: []*url.URL{up, up2, {Scheme: "http", Host: "127.0.0.1:1"}}},
		"unknown Balance":        {Upstreams: []*url.URL{up, up2}, Balance: Balance(2)},
		"negative Balance":       {Upstream: up, Balance: Balance(-1)},
	} {
		p, err := New(cfg)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New returned %v, want ErrInvalidConfig", name, err)
		}
		if p != nil {
			t.Errorf("%s: New returned a proxy with its error", name)
		}
		s, err := Listen(cfg)
		if !errors.Is(err, ErrInvalidConfig) || s != nil {
			t.Errorf("%s: Listen returned %v, %v; want nil, ErrInvalidConfig", name, s, err)
		}
	}
}

// TestNewAcceptsTheseConfigs, including probabilities that add up to 1
// only up to rounding.
func TestNewAcceptsTheseConfigs(t *testing.T) {
	up := &url.URL{Scheme: "https", Host: "example.test"}
	for name, cfg := range map[string]Config{
		"upstream only":      {Upstream: up},
		"rate over all":      {Upstream: up, Rate: 1},
		"rate over some":     {Upstream: up, Rate: 0.2, Kinds: []Kind{Reset, Stall}},
		"kinds without rate": {Upstream: up, Kinds: []Kind{Reset}},
		"rates":              {Upstream: up, Rates: map[Kind]float64{Reset: 0.1, Stall: 0.2, Unavailable: 0.7}},
		"empty rates":        {Upstream: up, Rates: map[Kind]float64{}},
		"whole seconds":      {Upstream: up, RetryAfter: 2 * time.Second, MaxStall: time.Millisecond},
		"one of Upstreams":   {Upstreams: []*url.URL{up}},
		"several, at random": {Upstreams: []*url.URL{up, {Scheme: "http", Host: "example.test", Path: "/v2"}}, Balance: Random},
	} {
		p, err := New(cfg)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := p.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}

// TestNewFillsInTheDocumentedDefaults.
func TestNewFillsInTheDocumentedDefaults(t *testing.T) {
	p, err := New(Config{Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.maxStall != DefaultMaxStall || DefaultMaxStall != 30*time.Second {
		t.Errorf("MaxStall %v, want 30s", p.maxStall)
	}
	if p.retryAfter != "0" {
		t.Errorf("Retry-After %q, want 0", p.retryAfter)
	}
	if len(p.chooser.bands) != 0 {
		t.Errorf("zero config has fault bands %v", p.chooser.bands)
	}
	post, _ := http.NewRequest(http.MethodPost, "/", nil)
	get, _ := http.NewRequest(http.MethodGet, "/", nil)
	if !p.match(post) || p.match(get) {
		t.Error("default Match is not Mutating")
	}
	if p.balancer.balance != RoundRobin {
		t.Errorf("default Balance %v, want RoundRobin", p.balancer.balance)
	}
}
