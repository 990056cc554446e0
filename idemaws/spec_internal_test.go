package idemaws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"

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
		{tokenSpec{min: 96}, `^[0-9a-f]{96}$`},
		{tokenSpec{max: 1}, `^[0-9a-f]$`},
	} {
		tok, err := mint(tc.s)
		if err != nil || !regexp.MustCompile(tc.want).MatchString(tok) {
			t.Errorf("mint(%+v) = %q, %v; want %s", tc.s, tok, err, tc.want)
		}
	}
	for _, s := range []tokenSpec{{min: 100}, {pattern: `^$`}, {pattern: `(`}} {
		if tok, err := mint(s); err == nil {
			t.Errorf("mint(%+v) = %q; want an error: no token fits", s, tok)
		}
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
	//lint:ignore U1000 the SDK's outputs embed it; emptyOutput must pass over an unexported field
	noSmithyDocumentSerde
}

type outputWithout struct {
	ResultMetadata middleware.Metadata
	//lint:ignore U1000 the SDK's outputs embed it; emptyOutput must pass over an unexported field
	noSmithyDocumentSerde
}

//lint:ignore U1000 embedded as the SDK's outputs embed it, to be passed over
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

// V1.5: an operation's KeyTTL is the caller's for it, else the lifetime
// AWS documents for its token (its model's, else its service guide's),
// capped by Config.KeyTTL, else Config.KeyTTL, else the default.
func TestResolvedTTL(t *testing.T) {
	const def = 7 * time.Hour
	acmSpec := sdkTokens["ACM.RequestCertificate"]
	undocumented := tokenSpec{member: "ClientToken"}
	for _, tc := range []struct {
		name    string
		service string
		s       tokenSpec
		callers bool
		keyTTL  time.Duration
		want    time.Duration
	}{
		{"the model's", "ACM", acmSpec, false, 0, time.Hour},
		{"the model's, capped", "ACM", acmSpec, false, 30 * time.Minute, 30 * time.Minute},
		{"the model's, under a longer cap", "ACM", acmSpec, false, 2 * time.Hour, time.Hour},
		{"the service guide's", "EC2", undocumented, false, 0, 24 * time.Hour},
		{"the service guide's, capped", "EC2", undocumented, false, time.Hour, time.Hour},
		{"kept with what it made", "Route 53", undocumented, false, 0, unbounded},
		{"undocumented", "ECS", undocumented, false, 0, def},
		{"undocumented, KeyTTL", "ECS", undocumented, false, 2 * time.Hour, 2 * time.Hour},
		{"the caller's", "ACM", tokenSpec{member: "IdempotencyToken", ttl: 5 * time.Minute}, true, time.Minute, 5 * time.Minute},
		{"the caller's without one", "ACM", tokenSpec{member: "IdempotencyToken"}, true, 0, def},
		{"the caller's without one, KeyTTL", "ACM", tokenSpec{member: "IdempotencyToken"}, true, 3 * time.Hour, 3 * time.Hour},
	} {
		o := &Operations{ttl: tc.keyTTL, defaultTTL: def}
		if got := o.resolvedTTL(tc.service, tc.s, tc.callers); got != tc.want {
			t.Errorf("%s: resolvedTTL = %v, want %v", tc.name, got, tc.want)
		}
	}
	if unbounded < 50*365*24*time.Hour {
		t.Errorf("unbounded is %v: a token kept with what it made is sent for decades", unbounded)
	}
}

// fillingMiddleware is an SDK token middleware that fills the fields it
// names, as the SDK's fills the member its model marks.
type fillingMiddleware struct{ fields []string }

func (fillingMiddleware) ID() string { return "OperationIdempotencyTokenAutoFill" }

func (m fillingMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	v := reflect.ValueOf(in.Parameters).Elem()
	for _, name := range m.fields {
		s := "filled"
		v.FieldByName(name).Set(reflect.ValueOf(&s))
	}
	return next.HandleInitialize(ctx, in)
}

type probedInput struct {
	First, Name, Token *string
	Count              int
}

// V1.1: for an operation newer than the table, the member the SDK's own
// token middleware fills is the token; a middleware that fills two
// members, or none, names no token.
func TestTheSDKsFilledMemberIsFoundByAProbe(t *testing.T) {
	for _, tc := range []struct {
		fills []string
		want  string
	}{
		{[]string{"Token"}, "Token"},
		{[]string{"First"}, "First"},
		{[]string{"First", "Token"}, ""},
		{nil, ""},
	} {
		var f tokenFields
		got, err := f.probe(context.Background(), fillingMiddleware{tc.fills}, &probedInput{})
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("a middleware filling %v: probe = %q, %v; want %q", tc.fills, got, err, tc.want)
		}
		if tc.fills == nil && !errors.Is(err, ErrNoClientToken) {
			t.Errorf("a middleware filling nothing: %v, want ErrNoClientToken", err)
		}
	}
	var f tokenFields
	if _, err := f.probe(context.Background(), fillingMiddleware{[]string{"Token"}}, probedInput{}); !errors.Is(err, idem.ErrInvalidRequest) {
		t.Errorf("a probe of a struct value: %v, want ErrInvalidRequest", err)
	}
}

// V1.1: the table is the generator's, unedited: its digest, written one
// operation a line as the generator writes it, is the one it recorded.
func TestTheTableIsAsGenerated(t *testing.T) {
	keys := make([]string, 0, len(sdkTokens))
	for k := range sdkTokens {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		s := sdkTokens[k]
		fmt.Fprintf(h, "%s|%s|%d|%d|%s|%t|%d\n", k, s.member, s.min, s.max, s.pattern, s.filled, int64(s.ttl))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != tableDigest {
		t.Fatalf("the table's digest is %s, the generator wrote %s: regenerate it (go generate), do not edit it", got, tableDigest)
	}
}
