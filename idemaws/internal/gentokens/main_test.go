package main

import (
	"strings"
	"testing"
	"time"
)

// The rule: a member the model marks; a member named as AWS names tokens
// whose documentation says it keeps a request from being applied twice,
// at the input's top or, for a creation, in a structure it holds; never a
// token-named member whose documentation says nothing of the kind. Each
// keeps its length, its pattern in RE2, and its documented lifetime.
func TestTheRule(t *testing.T) {
	tab, err := read("testdata/models")
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{key: "Example Svc.CreateThing", member: "ClientToken", min: 1, max: 64, pattern: `^[\x{0021}-\x{007E}]+$`, filled: true},
		{key: "Example Svc.CreateZone", member: "Config.CallerReference"},
		{key: "Example Svc.RequestThing", member: "IdempotencyToken", min: 1, max: 32, pattern: `^[\x00-\x7F]+$`, ttl: time.Hour,
			said: "Idempotency tokens time out after one hour."},
	}
	if len(tab.rows) != len(want) || tab.services != 1 || tab.marked != 1 || tab.lifetimes != 1 {
		t.Fatalf("rows %+v (%d services, %d marked, %d lifetimes); want %+v", tab.rows, tab.services, tab.marked, tab.lifetimes, want)
	}
	for i, w := range want {
		if tab.rows[i] != w {
			t.Errorf("row %d = %+v, want %+v", i, tab.rows[i], w)
		}
	}
	src, err := tab.write("testdata")
	if err != nil || !strings.Contains(string(src), `"Example Svc.RequestThing": {member: "IdempotencyToken", min: 1, max: 32, pattern: `+"`"+`^[\x00-\x7F]+$`+"`"+`, ttl: 1 * time.Hour}`) {
		t.Fatalf("write = %v:\n%s", err, src)
	}
}

// Lifetimes are read as the documentation words them, the shortest kept.
func TestLifetime(t *testing.T) {
	for doc, want := range map[string]time.Duration{
		"A client token is valid for 36 hours once used.":                                  36 * time.Hour,
		"The token is valid for 7 days after creation.":                                    7 * 24 * time.Hour,
		"Client tokens for X time out after five minutes.":                                 5 * time.Minute,
		"After 8 hours, any request with the same ClientToken is treated as a new request": 8 * time.Hour,
		"Valid for 8 hours. This token expires in 10 minutes.":                             10 * time.Minute,
		"A unique string.": 0,
	} {
		if got, _ := lifetime(doc); got != want {
			t.Errorf("lifetime(%q) = %v, want %v", doc, got, want)
		}
	}
}
