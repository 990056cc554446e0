package idemaws_test

import (
	"testing"

	"github.com/idemkit/idem/lab/testkit/doccheck"

	// What the page's programs import and the tests do not, kept in go.mod.
	_ "github.com/aws/aws-sdk-go-v2/config"
)

// TestVendorSDKsPageCompiles builds every Go block of docs/vendor-sdks.md
// as a program of its own in this module, so the page cannot drift from
// the API.
func TestVendorSDKsPageCompiles(t *testing.T) {
	doccheck.PinsText(t)
	if doccheck.Compile(t, "../docs/vendor-sdks.md") == 0 {
		t.Fatal("found no Go block in docs/vendor-sdks.md")
	}
}
