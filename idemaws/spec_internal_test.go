package idemaws

import (
	"regexp"
	"testing"

	"github.com/aws/smithy-go/middleware"
)

// V1.1: every token format of the table idemaws carries takes a token
// idemaws mints: a UUID, its hex digits, or as many hex digits as the
// format's length asks, each fitting its length and pattern.
func TestEveryTokenOfTheTableCanBeMinted(t *testing.T) {
	if len(sdkTokens) < 1000 {
		t.Fatalf("the table holds %d operations; the models give over a thousand", len(sdkTokens))
	}
	for key, s := range sdkTokens {
		tok, err := mint(s)
		if err != nil || !s.fits(tok) {
			t.Errorf("%s: mint = %q, %v; fits %v", key, tok, err, s.fits(tok))
		}
	}
	for _, tc := range []struct {
		s    tokenSpec
		want string
	}{
		{tokenSpec{}, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`},
		{tokenSpec{min: 1, max: 32, pattern: `^\w+$`}, `^[0-9a-f]{32}$`},
		{tokenSpec{min: 64, max: 256}, `^[0-9a-f]{64}$`},
		{tokenSpec{max: 20}, `^[0-9a-f]{20}$`},
		{tokenSpec{min: 36, max: 36}, `^[0-9a-f-]{36}$`},
	} {
		tok, err := mint(tc.s)
		if err != nil || !regexp.MustCompile(tc.want).MatchString(tok) {
			t.Errorf("mint(%+v) = %q, %v; want %s", tc.s, tok, err, tc.want)
		}
	}
	if tok, err := mint(tokenSpec{min: 100}); err == nil {
		t.Errorf("mint of 100 characters at least = %q; want an error", tok)
	}
}

type distributionConfig struct {
	CallerReference *string
	Comment         *string
}

type createDistributionInput struct {
	DistributionConfig *distributionConfig
	Tags               map[string]string
}

// V1.6: a token member in a structure the input holds (CloudFront's
// DistributionConfig.CallerReference) is found, filled and left out of
// the fingerprint, the caller's structure left as it was.
func TestATokenInANestedStructure(t *testing.T) {
	var f tokenFields
	ref, comment := "caller", "c"
	in := &createDistributionInput{DistributionConfig: &distributionConfig{CallerReference: &ref, Comment: &comment}}
	p, err := f.path(in, "DistributionConfig.CallerReference")
	if err != nil || token(in, p) != "caller" {
		t.Fatalf("path = %v, %v; token %q", p, err, token(in, p))
	}
	a, err := fingerprint("CloudFront.CreateDistribution in us-east-1", in, p)
	if err != nil || *in.DistributionConfig.CallerReference != "caller" {
		t.Fatalf("fingerprint: %v; the input's CallerReference became %q", err, *in.DistributionConfig.CallerReference)
	}
	setToken(in, p, "journal")
	if b, _ := fingerprint("CloudFront.CreateDistribution in us-east-1", in, p); b != a || *in.DistributionConfig.CallerReference != "journal" {
		t.Fatalf("another token changed the fingerprint (%s, %s), or was not set", a, b)
	}
	other := "d"
	in.DistributionConfig.Comment = &other
	if b, _ := fingerprint("CloudFront.CreateDistribution in us-east-1", in, p); b == a {
		t.Fatal("another comment has the same fingerprint")
	}
	if token(&createDistributionInput{}, p) != "" {
		t.Fatal("an input without the structure has a token")
	}
	for _, member := range []string{"Tags", "DistributionConfig", "Nothing", "Tags.X", "DistributionConfig.Nothing"} {
		if _, err := f.path(in, member); err == nil {
			t.Errorf("path(%q) found a token member", member)
		}
	}
}

type outputWithMembers struct {
	FileSystemId   *string
	ResultMetadata middleware.Metadata
	noSmithyDocumentSerde
}

type outputWithout struct {
	ResultMetadata middleware.Metadata
	noSmithyDocumentSerde
}

type noSmithyDocumentSerde struct{}

// V3: an output of nil members is empty; one with a member set, or one
// whose type has no member, is not.
func TestEmptyOutput(t *testing.T) {
	id := "fs-1"
	for _, tc := range []struct {
		out  any
		want bool
	}{
		{&outputWithMembers{}, true},
		{&outputWithMembers{FileSystemId: &id}, false},
		{&outputWithout{}, false},
		{nil, false},
		{(*outputWithMembers)(nil), false},
	} {
		if got := emptyOutput(tc.out); got != tc.want {
			t.Errorf("emptyOutput(%#v) = %v, want %v", tc.out, got, tc.want)
		}
	}
}
