package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemaws"
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

// The same rule reads an SDK service package's Go source: the member its
// token middleware sets, or a member named as AWS names tokens whose
// documentation says it keeps a request from being applied twice, at the
// input's top or, for a creation, in a structure of its types package;
// the ASCII bound its documentation states, else its service guide's;
// its documented lifetime.
func TestTheRuleReadsGoSource(t *testing.T) {
	guides["Example Go"] = guide{max: 50, pattern: `^[a-z]+$`, said: "Tokens are of up to 50 letters (Example guide)"}
	defer delete(guides, "Example Go")
	tab := &table{}
	if err := tab.readGo("testdata/sdk/svc"); err != nil {
		t.Fatal(err)
	}
	if err := tab.finish(); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{key: "Example Go.CreateThing", member: "Token", max: 50, pattern: `^[a-z]+$`, filled: true, guide: true},
		{key: "Example Go.CreateZone", member: "Config.CallerReference", max: 50, pattern: `^[a-z]+$`, guide: true},
		{key: "Example Go.RequestThing", member: "ClientToken", max: 40, pattern: `^[\x00-\x7F]+$`, ttl: 8 * time.Hour,
			said: "Client tokens time out after eight hours."},
		{key: "Example Go.StartThing", member: "ClientToken", max: 50, pattern: `^[a-z]+$`, guide: true},
	}
	if len(tab.rows) != len(want) || tab.services != 1 || tab.marked != 1 || tab.lifetimes != 1 {
		t.Fatalf("rows %+v (%d services, %d marked, %d lifetimes); want %+v", tab.rows, tab.services, tab.marked, tab.lifetimes, want)
	}
	for i, w := range want {
		if tab.rows[i] != w {
			t.Errorf("row %d = %+v, want %+v", i, tab.rows[i], w)
		}
	}
	src, err := tab.write("testdata/sdk")
	if err != nil || !strings.Contains(string(src), "//   - Tokens are of up to 50 letters (Example guide).\n") {
		t.Fatalf("write = %v; the guide's words are not in the header:\n%s", err, src)
	}

	// A service read from two sources is refused.
	if err := tab.readGo("testdata/sdk/svc"); err != nil {
		t.Fatal(err)
	}
	if err := tab.finish(); !errors.Is(err, errTwice) {
		t.Fatalf("a service read twice: %v, want errTwice", err)
	}
	for _, dir := range []string{"testdata/models", "testdata/nothing"} {
		if err := (&table{}).readGo(dir); err == nil {
			t.Errorf("readGo(%q) = nil, want an error: no SDK package", dir)
		}
	}
}

// EC2's tokens, read from its SDK module (its Smithy model is not at hand):
// every input with a ClientToken, whether the SDK fills it or not, each
// bounded as EC2 documents, 64 ASCII characters unless the operation's
// documentation says otherwise; the module's version and checksum are
// stamped in the table's header.
func TestEC2IsReadFromItsSDKModule(t *testing.T) {
	m, err := download("github.com/aws/aws-sdk-go-v2/service/ec2@v1.350.0")
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != "github.com/aws/aws-sdk-go-v2/service/ec2" || m.Version != "v1.350.0" || !strings.HasPrefix(m.Sum, "h1:") {
		t.Fatalf("download = %+v", m)
	}
	tab := &table{}
	if err := tab.readGo(m.Dir); err != nil {
		t.Fatal(err)
	}
	if err := tab.finish(); err != nil {
		t.Fatal(err)
	}
	unfilled := []string{"AllocateHosts", "CopyFpgaImage", "CreateCapacityReservation", "CreateEgressOnlyInternetGateway", "CreateFlowLogs",
		"CreateFpgaImage", "CreateReservedInstancesListing", "CreateVpcEndpoint", "CreateVpcEndpointConnectionNotification",
		"CreateVpcEndpointServiceConfiguration", "ImportImage", "ImportSnapshot", "ModifyInstanceCreditSpecification",
		"ModifyReservedInstances", "PurchaseHostReservation", "RequestSpotInstances"}
	var got []string
	for _, r := range tab.rows {
		if r.member != "ClientToken" || r.pattern != asciiPattern || r.max != 64 && r.max != 128 {
			t.Errorf("%+v: want ClientToken, 64 or 128 ASCII characters", r)
		}
		if !r.filled {
			got = append(got, strings.TrimPrefix(r.key, "EC2."))
		}
	}
	if len(tab.rows) != 116 || tab.marked != 100 || !slices.Equal(got, unfilled) {
		t.Fatalf("%d rows, %d filled by the SDK; not filled: %q; want 116, 100, %q", len(tab.rows), tab.marked, got, unfilled)
	}
	if r := tab.rows[slices.IndexFunc(tab.rows, func(r row) bool { return r.key == "EC2.CreateLaunchTemplate" })]; r.max != 128 || r.guide {
		t.Errorf("%+v: want its documented 128 characters", r)
	}
}

// The Go source and the models agree: for the SDK modules idemaws is
// tested with, every operation's token member read from the Go source is
// the one the table, read from the models, holds, and no operation the
// table holds is missed; the only operations the table lacks are those
// newer than its models.
func TestTheGoSourceAgreesWithTheModels(t *testing.T) {
	newer := []string{"ACM.CreateAcmeDomainValidation", "ACM.CreateAcmeEndpoint", "ACM.CreateAcmeExternalAccountBinding",
		"ECS.CreateDaemon", "ECS.CreateGateway"}
	var onlyGo []string
	for _, path := range []string{"acm", "efs", "route53", "ecs", "cloudcontrol"} {
		version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/aws/aws-sdk-go-v2/service/"+path).Output()
		if err != nil {
			t.Fatal(err)
		}
		m, err := download("github.com/aws/aws-sdk-go-v2/service/" + path + "@" + strings.TrimSpace(string(version)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := parseGo(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		tab := &table{}
		if err := tab.readGo(m.Dir); err != nil {
			t.Fatal(err)
		}
		rows := map[string]row{}
		for _, r := range tab.rows {
			rows[r.key] = r
		}
		for _, op := range sortedOps(p.inputs) {
			key := p.serviceID + "." + op
			tok, known := idemaws.TokenFor(p.serviceID, op)
			r, found := rows[key]
			switch {
			case found && !known:
				onlyGo = append(onlyGo, key)
			case known != found || tok.Member != r.member:
				t.Errorf("%s: the models give %+v (%v), the Go source %+v (%v)", key, tok, known, r, found)
			}
		}
	}
	slices.Sort(onlyGo)
	if !slices.Equal(onlyGo, newer) {
		t.Errorf("the Go source alone gives %q; want the operations newer than the models, %q", onlyGo, newer)
	}
}

// The command writes the table of the models and of the SDK modules it is
// given, and stamps each source in the table's header: the models' as
// given, a module's path, version and checksum.
func TestTheCommandStampsItsSources(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tokens_gen.go")
	if err := run([]string{"-models", "testdata/models", "-source", "example models@abc", "-gomod", "github.com/aws/aws-sdk-go-v2/service/ec2@v1.350.0", "-o", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	m, err := download("github.com/aws/aws-sdk-go-v2/service/ec2@v1.350.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`const modelsSource = "example models@abc; github.com/aws/aws-sdk-go-v2/service/ec2@v1.350.0 (` + m.Sum + `, its Go source)"`,
		`"Example Svc.RequestThing":`,
		`"EC2.RequestSpotInstances":`,
		"119 operations of 2 services",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the table lacks %s:\n%.1500s", want, b)
		}
	}
	for _, args := range [][]string{
		{"-models", "testdata/models"},
		{"-source", "x"},
		{"-models", "testdata/nothing", "-source", "x", "-o", out},
		{"-models", "testdata/models", "-source", "x", "-gomod", "github.com/aws/aws-sdk-go-v2/service/ec2", "-o", out},
		{"-models", "testdata/models", "-source", "x", "-gomod", "github.com/aws/aws-sdk-go-v2/service/ec2@v0.0.0-no", "-o", out},
		{"-models", "testdata/models", "-source", "x", "-o", filepath.Join(out, "no", "dir")},
		{"-no-such-flag"},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
