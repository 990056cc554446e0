package idem_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTheRootPullsNoVendorSDK checks that a program importing the root
// package compiles no vendor SDK, and that the root module does not even
// require one: the AWS integration is a module of its own (idemaws).
func TestTheRootPullsNoVendorSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, vendor := range []string{"github.com/aws/", "github.com/stripe/"} {
		if strings.Contains(string(out), vendor) || strings.Contains(string(mod), vendor) {
			t.Errorf("the root package or go.mod names %s", vendor)
		}
	}
}
