package journal_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/journal"
)

// C3.2: a recorded header within the limit is recorded whole, to the
// byte; one byte over, fields are left out, Location and Content-Type
// first kept whatever their names sort after, and the rest in name order
// while they fit; the secrets rule applies before the bound.
func TestRecordedHeaderBound(t *testing.T) {
	h := http.Header{
		"A-Pad":        {strings.Repeat("a", 100)},
		"B-Pad":        {strings.Repeat("b", 100)},
		"Location":     {"/charges/1"},
		"Content-Type": {"application/json"},
		"Set-Cookie":   {"session=s3cret"},
	}
	size := 0 // on the wire: name + ": " + value + CRLF
	for name, values := range h {
		if name != "Set-Cookie" {
			size += len(name) + len(values[0]) + 4
		}
	}
	secretsField := len("Idem-Unrecorded-Headers") + len("Set-Cookie") + 4 // the bound counts the names left out
	exact := int64(size + secretsField)

	got, unrecorded, truncated := journal.RecordedHeader(h, exact)
	if truncated || len(got) != 4 || got.Get("Set-Cookie") != "" || !slices.Equal(unrecorded, []string{"Set-Cookie"}) {
		t.Fatalf("at the exact size: truncated %v, header %v, unrecorded %q; want the four fields, Set-Cookie unrecorded", truncated, got, unrecorded)
	}
	got, _, truncated = journal.RecordedHeader(h, exact-1)
	if !truncated || got.Get("Location") != "/charges/1" || got.Get("Content-Type") == "" ||
		got.Get("A-Pad") == "" || got.Get("B-Pad") != "" || got.Get("Set-Cookie") != "" {
		t.Fatalf("one byte over: truncated %v, header %v; want B-Pad left out, the rest kept", truncated, got)
	}
	// A field of several values counts each of them, as the wire does.
	multi := http.Header{"X-Multi": {strings.Repeat("a", 100), strings.Repeat("b", 100)}}
	whole := int64(2 * (len("X-Multi") + 100 + 4))
	if _, _, truncated := journal.RecordedHeader(multi, whole); truncated {
		t.Fatalf("a field of two values within %d bytes: truncated", whole)
	}
	if got, _, truncated := journal.RecordedHeader(multi, whole-1); !truncated || len(got) != 0 {
		t.Fatalf("a field of two values in one byte less than both: kept %v, truncated %v; want it left out", got, truncated)
	}

	// The fields left to fit are taken in name order, however the map
	// lists them (its order differs from one header to the next).
	for range 20 {
		pads := http.Header{"Location": {"/charges/1"}}
		room := int64(len("Location") + len("/charges/1") + 4)
		for _, name := range []string{"E-Pad", "C-Pad", "A-Pad", "D-Pad", "B-Pad"} {
			pads[name] = []string{strings.Repeat("p", 100)}
		}
		room += 2 * int64(len("A-Pad")+100+4)
		got, _, truncated := journal.RecordedHeader(pads, room)
		if !truncated || len(got) != 3 || got.Get("A-Pad") == "" || got.Get("B-Pad") == "" || got.Get("Location") == "" {
			t.Fatalf("room for Location and two fields of five: kept %v, want Location, A-Pad and B-Pad", got)
		}
	}
	got, _, truncated = journal.RecordedHeader(h, int64(len("Location")+len("/charges/1")+4+len("Content-Type")+len("application/json")+4))
	if !truncated || len(got) != 2 || got.Get("Location") == "" || got.Get("Content-Type") == "" {
		t.Fatalf("room for two fields: truncated %v, header %v; want Location and Content-Type", truncated, got)
	}
}
