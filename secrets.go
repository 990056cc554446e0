package idem

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// DefaultUnrecordedHeaders returns the response header fields an outcome
// never records: cookies and credentials. The slice is a copy.
func DefaultUnrecordedHeaders() []string { return slices.Clone(unrecordedHeaders) }

var unrecordedHeaders = []string{
	"Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization",
	"Authentication-Info", "Proxy-Authentication-Info",
}

// UnrecordedHeadersField is the field a recorded header gains, naming the
// fields the secrets rule left out.
const UnrecordedHeadersField = "Idem-Unrecorded-Headers"

// DefaultRedactedParams returns the query parameters whose values are never
// written. A name matches, ignoring case, when it is one of them or ends with
// one after a non-alphanumeric or camelCase boundary ("x-api-key",
// "accessToken", "APIToken"). The slice is a copy.
func DefaultRedactedParams() []string { return slices.Clone(redactedParams) }

var redactedParams = []string{
	"access_token", "token", "api_key", "apikey", "key", "signature", "sig",
	"password", "passwd", "secret", "auth", "credential", "x-amz-signature",
	"x-amz-credential", "x-amz-security-token",
}

// redactedValue replaces a secret's value.
const redactedValue = "xxxxx"

// secrets applies the secrets rule with a Client's configuration.
type secrets struct {
	unrecorded []string // canonical header names never recorded
	recorded   []string // when set, the only canonical names recorded
	params     []string // lower-case parameter names redacted
}

func newSecrets(cfg Config) secrets {
	s := secrets{unrecorded: canonicalNames(unrecordedHeaders, cfg.UnrecordedHeaders)}
	if cfg.RecordedHeaders != nil {
		s.recorded = canonicalNames(cfg.RecordedHeaders)
	}
	for _, list := range [][]string{redactedParams, cfg.RedactedParams} {
		for _, p := range list {
			if p != "" {
				s.params = append(s.params, strings.ToLower(p))
			}
		}
	}
	return s
}

func canonicalNames(lists ...[]string) []string {
	var out []string
	for _, list := range lists {
		for _, n := range list {
			out = append(out, http.CanonicalHeaderKey(n))
		}
	}
	return out
}

// recordable reports whether a header field may be recorded.
func (s secrets) recordable(name string) bool {
	if s.recorded != nil {
		return slices.Contains(s.recorded, name)
	}
	return !slices.Contains(s.unrecorded, name)
}

// header returns h without the fields it may not record, with
// UnrecordedHeadersField naming them (and any it named before), and true;
// or h itself and false when it has none to leave out.
func (s secrets) header(h http.Header) (http.Header, bool) {
	var left []string
	for name := range h {
		if name != UnrecordedHeadersField && !s.recordable(name) {
			left = append(left, name)
		}
	}
	if len(left) == 0 {
		return h, false
	}
	kept := make(http.Header, len(h)-len(left)+1)
	for name, values := range h {
		if name != UnrecordedHeadersField && s.recordable(name) {
			kept[name] = values
		}
	}
	for _, v := range h[UnrecordedHeadersField] {
		left = append(left, strings.Split(v, ", ")...)
	}
	slices.Sort(left)
	kept[UnrecordedHeadersField] = []string{strings.Join(slices.Compact(left), ", ")}
	return kept, true
}

// recordedHeader is header without its second result.
func (s secrets) recordedHeader(h http.Header) http.Header {
	kept, _ := s.header(h)
	return kept
}

// defaultSecrets is the rule with no extra names: what compaction applies
// to the journal it rewrites.
var defaultSecrets = newSecrets(Config{})

// redactedParam reports whether the query parameter name holds a secret,
// by the rule DefaultRedactedParams states.
func (s secrets) redactedParam(name string) bool {
	for _, p := range s.params {
		at := len(name) - len(p) // where p would start
		if at < 0 || !strings.EqualFold(name[at:], p) {
			continue
		}
		if at == 0 || !isLetterOrDigit(name[at-1]) || camelBoundary(name, at) {
			return true
		}
	}
	return false
}

func isLetterOrDigit(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// camelBoundary reports whether a camelCase word starts at name[at], which
// is not the first byte: an upper-case letter after a lower-case letter or
// a digit ("accessToken", "v2Signature"), or the first letter of a word
// after an acronym, an upper-case letter between an upper-case one and a
// lower-case one ("APIToken", "AWSSecret").
func camelBoundary(name string, at int) bool {
	prev, next := name[at-1], name[at]
	if !isUpper(next) {
		return false
	}
	if 'a' <= prev && prev <= 'z' || '0' <= prev && prev <= '9' {
		return true
	}
	return isUpper(prev) && at+1 < len(name) && 'a' <= name[at+1] && name[at+1] <= 'z'
}

func isUpper(b byte) bool { return 'A' <= b && b <= 'Z' }

// url returns u as idem writes it: no user info, no fragment (never sent,
// and where OAuth's implicit flow puts a token), secret query values
// replaced. The rest (scheme, host, path, other parameters, their order) is
// kept as it is.
func (s secrets) url(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User, c.Fragment, c.RawFragment = nil, "", ""
	if c.RawQuery != "" {
		c.RawQuery = s.query(c.RawQuery)
	}
	return c.String()
}

// query redacts a raw query, keeping its form: the parameters' order, and
// the encoding of those it keeps.
func (s secrets) query(raw string) string {
	parts := strings.Split(raw, "&")
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if hasValue && s.redactedParam(name) {
			k, _, _ := strings.Cut(part, "=")
			parts[i] = k + "=" + redactedValue
		}
	}
	return strings.Join(parts, "&")
}

// urlString redacts a URL given as a string; one that does not parse is
// replaced whole.
func (s secrets) urlString(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return s.url(u)
}

// error redacts the URL of every *url.Error in err's chain, in place: the
// errors of attempts name the request's URL, and Do returns and logs them.
func (s secrets) error(err error) error {
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		ue.URL = s.urlString(ue.URL)
		e = ue.Err
	}
	return err
}

// RedactURL returns u as a Client whose Config.RedactedParams is
// extraParams writes it (see Secrets).
func RedactURL(u *url.URL, extraParams ...string) string {
	return newSecrets(Config{RedactedParams: extraParams}).url(u)
}

// RedactError rewrites, in place, the URL of every *url.Error in err's
// chain as RedactURL writes it, and returns err.
func RedactError(err error, extraParams ...string) error {
	return newSecrets(Config{RedactedParams: extraParams}).error(err)
}

// RedactRawURL returns raw as RedactURL writes it, or a placeholder for a
// URL that does not parse.
func RedactRawURL(raw string) string { return defaultSecrets.urlString(raw) }

// RedactHeader returns h without the fields a default Client does not
// record, and true; or h and false when it has none: what compaction keeps of
// an older record.
func RedactHeader(h http.Header) (http.Header, bool) { return defaultSecrets.header(h) }
