package idemaws

//go:generate go run ./internal/gentokens -models $AWS_MODELS -source $AWS_MODELS_SOURCE -gomod github.com/aws/aws-sdk-go-v2/service/ec2@v1.350.0 -o tokens_gen.go

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Token describes the idempotency token member of an AWS operation, for
// Config.Tokens: an operation the table idemaws carries does not know,
// or knows wrongly.
type Token struct {
	// Member is the input's field that holds the token ("CallerReference"),
	// or, for one in a structure the input holds, the two fields joined
	// by a dot ("DistributionConfig.CallerReference"). Required.
	Member string

	// MinLength and MaxLength bound the token's length, as the API
	// documents it; 0 is no bound.
	MinLength, MaxLength int

	// Pattern is a regular expression (RE2) the token must match, as the
	// API documents it; "" is none.
	Pattern string

	// KeyTTL is how long the API keeps a token. 0: Config.KeyTTL, else
	// the Dialect's Retention, else idem.DefaultKeyTTL.
	KeyTTL time.Duration
}

// tokenSpec is what idemaws knows of an operation's token.
type tokenSpec struct {
	member   string        // the input's field; "Outer.Inner" for one in a structure the input holds
	min, max int           // length bounds; 0 is none
	pattern  string        // RE2; "" is none
	filled   bool          // the SDK fills the member itself
	ttl      time.Duration // the API's documented lifetime; 0 unknown
}

// TokenFor returns what idemaws knows of the idempotency token of an AWS
// operation, by the SDK's service ID (the ServiceID constant of the
// service's package, "Route 53") and operation name ("CreateHostedZone"),
// from the AWS models it carries (for a service whose model was not at
// hand, EC2, read from the SDK's Go source, which the SDK generates from
// it): the member, its format, and the token's lifetime (KeyTTL) where
// AWS documents one. It reports false for an
// operation those models do not give a token; such an operation is still
// covered when the SDK fills a token for it, or when Config.Tokens names
// its member.
func TokenFor(service, operation string) (Token, bool) {
	s, ok := sdkTokens[service+"."+operation]
	if !ok {
		return Token{}, false
	}
	s.ttl = documentedTTL(service, s)
	return s.token(), true
}

func (s tokenSpec) token() Token {
	ttl := s.ttl
	if ttl == unbounded {
		ttl = 0
	}
	return Token{Member: s.member, MinLength: s.min, MaxLength: s.max, Pattern: s.pattern, KeyTTL: ttl}
}

func specOf(t Token) tokenSpec {
	return tokenSpec{member: t.Member, min: t.MinLength, max: t.MaxLength, pattern: t.Pattern, ttl: t.KeyTTL}
}

// unbounded is the lifetime of a token the API keeps as long as what it
// made: no pending operation's token is too old to send.
const unbounded = 100 * 365 * 24 * time.Hour

// serviceLifetimes are tokens' lifetimes as the services' own guides
// state them, for the operations whose model documentation states none.
var serviceLifetimes = map[string]time.Duration{
	// "A client token is valid for at least 24 hours after the
	// termination of the instance" (Amazon EC2 API Reference, Ensuring
	// idempotency in Amazon EC2 API requests).
	"EC2": 24 * time.Hour,
	// A CallerReference "allows failed CreateHostedZone requests to be
	// retried without the risk of executing the operation twice", and
	// HostedZoneAlreadyExists answers one "a hosted zone has already been
	// created with" (Route 53 API Reference); health checks keep theirs
	// past their deletion. Kept with what it made.
	"Route 53": unbounded,
	// FileSystemAlreadyExists answers a CreationToken a file system
	// "already exists with" (Amazon EFS API Reference): kept with the file
	// system.
	"EFS": unbounded,
	// DistributionAlreadyExists answers a CallerReference "associated with
	// another distribution" (CloudFront API Reference): kept with it.
	"CloudFront": unbounded,
}

// documentedTTL is the lifetime AWS documents for the operation's token:
// the model's, else the service guide's; 0 when neither says.
func documentedTTL(service string, s tokenSpec) time.Duration {
	if s.ttl != 0 {
		return s.ttl
	}
	return serviceLifetimes[service]
}

// check reports whether idemaws can use t: a member, a pattern that
// compiles, and a token it can mint in t's format.
func (t Token) check() error {
	if t.Member == "" || strings.Count(t.Member, ".") > 1 {
		return fmt.Errorf("member %q is not a field, or two joined by a dot", t.Member)
	}
	if t.MinLength < 0 || t.MaxLength < 0 || t.MaxLength != 0 && t.MaxLength < t.MinLength || t.KeyTTL < 0 {
		return fmt.Errorf("bounds %d..%d or KeyTTL %v out of range", t.MinLength, t.MaxLength, t.KeyTTL)
	}
	if _, err := mint(specOf(t)); err != nil {
		return err
	}
	return nil
}

// patterns caches compiled token patterns.
var patterns sync.Map // string → *regexp.Regexp

func compiled(pattern string) (*regexp.Regexp, error) {
	if re, ok := patterns.Load(pattern); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	patterns.Store(pattern, re)
	return re, nil
}

// fits reports whether token is in s's format.
func (s tokenSpec) fits(token string) bool {
	if len(token) < s.min || s.max > 0 && len(token) > s.max {
		return false
	}
	if s.pattern == "" {
		return true
	}
	re, err := compiled(s.pattern)
	return err == nil && re.MatchString(token)
}

// mint returns a new token in s's format, from a random UUIDv4: the UUID
// itself when it fits, else its 32 hex digits, else as many hex digits of
// it and of its SHA-256 as the format's length bounds ask. It fails when
// none of them fits.
func mint(s tokenSpec) (string, error) {
	u := uuid.New()
	canonical := u.String()
	digits := hex.EncodeToString(u[:])
	sum := sha256.Sum256(u[:])
	stream := digits + hex.EncodeToString(sum[:])
	candidates := []string{canonical, digits}
	switch {
	case s.min > len(digits) && s.min <= len(stream):
		candidates = append(candidates, stream[:s.min])
	case s.max > 0 && s.max < len(digits):
		candidates = append(candidates, digits[:s.max])
	}
	for _, c := range candidates {
		if s.fits(c) {
			return c, nil
		}
	}
	if s.pattern != "" {
		if _, err := compiled(s.pattern); err != nil {
			return "", fmt.Errorf("its pattern %q: %w", s.pattern, err)
		}
	}
	return "", fmt.Errorf("no token of hex digits fits length %d..%d and pattern %q", s.min, s.max, s.pattern)
}

// tokenPath locates the token field in an input: the index of the input's
// field, and for a member in a structure the input holds, the index of
// that structure's field.
type tokenPath []int

// fieldPath finds member ("Name", or "Outer.Inner") in the input struct
// type t.
func fieldPath(t reflect.Type, member string) (tokenPath, error) {
	var path tokenPath
	names := strings.Split(member, ".")
	for i, name := range names {
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 {
			return nil, fmt.Errorf("%s has no field %s", t, name)
		}
		path = append(path, f.Index[0])
		if i < len(names)-1 {
			if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
				return nil, fmt.Errorf("%s.%s is not a structure", t, name)
			}
			t = f.Type.Elem()
		} else if !isStringPointer(f.Type) {
			return nil, fmt.Errorf("%s.%s is not a *string", t, name)
		}
	}
	return path, nil
}

// field returns the token field of input, a pointer to an input struct;
// ok is false when the structure holding it is nil.
func (p tokenPath) field(input any) (reflect.Value, bool) {
	v := reflect.ValueOf(input).Elem()
	for _, i := range p[:len(p)-1] {
		v = v.Field(i)
		if v.IsNil() {
			return reflect.Value{}, false
		}
		v = v.Elem()
	}
	return v.Field(p[len(p)-1]), true
}

// resolvedTTL is the key TTL of an operation with spec s of service: the
// caller's for the operation, else the documented lifetime capped by
// Config.KeyTTL, else Config.KeyTTL, else the default (the dialect's
// retention, or idem.DefaultKeyTTL).
func (o *Operations) resolvedTTL(service string, s tokenSpec, callers bool) time.Duration {
	if callers && s.ttl > 0 {
		return s.ttl
	}
	documented := time.Duration(0)
	if !callers {
		documented = documentedTTL(service, s)
	}
	switch {
	case documented > 0 && o.ttl > 0:
		return min(documented, o.ttl)
	case documented > 0:
		return documented
	case o.ttl > 0:
		return o.ttl
	}
	return o.defaultTTL
}
