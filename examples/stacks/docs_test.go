package stacks_test

import (
	"testing"

	"github.com/idemkit/idem/lab/testkit/doccheck"

	// What the page's blocks import, so that go.mod keeps it.
	_ "github.com/gin-gonic/gin"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/idemkit/idem/idemecho"
	_ "github.com/idemkit/idem/idemgin"
	_ "github.com/labstack/echo/v4"
)

// TestFrameworksPageCompiles builds every Go block of docs/frameworks.md
// as a program of its own in this module, so the page cannot drift from
// the API.
func TestFrameworksPageCompiles(t *testing.T) {
	doccheck.PinsText(t)
	if doccheck.Compile(t, "../../docs/frameworks.md") == 0 {
		t.Fatal("found no Go block in docs/frameworks.md")
	}
}
