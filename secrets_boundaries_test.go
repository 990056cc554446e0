package idem_test

import (
	"net/url"
	"testing"

	"github.com/idemkit/idem"
)

// A redacted parameter of one letter, at the end of an acronym, is no
// camelCase boundary (no lower-case letter follows it): the name is kept,
// and reading past its end does not panic.
func TestRedactedParamOfOneLetterAfterAnAcronym(t *testing.T) {
	u, err := url.Parse("https://api.example.test/x?APIX=1&sig_x=2&x=3")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idem.RedactURL(u, "x"), "https://api.example.test/x?APIX=1&sig_x=xxxxx&x=xxxxx"; got != want {
		t.Fatalf("RedactURL = %q, want %q", got, want)
	}
}
