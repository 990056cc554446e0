// Package redact is the secrets rule of package idem: the header fields an
// outcome never records, and the URL query values never written to a
// journal, a log or an error. A Client applies it with its Config's names;
// a file journal's compaction applies the default rule.
package redact

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/journalkit"
)

// DefaultUnrecordedHeaders returns the header fields an outcome never
// records by default. The slice is a copy.
func DefaultUnrecordedHeaders() []string { return slices.Clone(unrecordedHeaders) }

// DefaultRedactedParams returns the query parameters redacted by default.
// The slice is a copy.
func DefaultRedactedParams() []string { return slices.Clone(redactedParams) }

// unrecordedHeaders are the response header fields an outcome never
// records: cookies and credentials.
var unrecordedHeaders = []string{
	"Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization",
	"Authentication-Info", "Proxy-Authentication-Info",
}

// redactedParams are the query parameters whose values are never
// written. A name matches, ignoring case, when it is one of them or ends
// with one after a non-alphanumeric or camelCase boundary ("x-api-key",
// "accessToken", "APIToken").
var redactedParams = []string{
	"access_token", "token", "api_key", "apikey", "key", "signature", "sig",
	"password", "passwd", "secret", "auth", "credential", "x-amz-signature",
	"x-amz-credential", "x-amz-security-token",
}

// redactedValue replaces a secret's value.
const redactedValue = "xxxxx"

// Rules applies the secrets rule with a Client's configuration.
type Rules struct {
	unrecorded []string // canonical header names never recorded
	recorded   []string // when set, the only canonical names recorded
	params     []string // lower-case parameter names redacted
}

// New returns the rule with the default names and these: header fields
// never recorded besides the default ones; when recorded is not nil, the
// only fields recorded; and query parameters redacted besides the default
// ones.
func New(unrecorded, recorded, params []string) Rules {
	s := Rules{unrecorded: canonicalNames(unrecordedHeaders, unrecorded)}
	if recorded != nil {
		s.recorded = canonicalNames(recorded)
	}
	for _, list := range [][]string{redactedParams, params} {
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
func (s Rules) Recordable(name string) bool {
	if s.recorded != nil {
		return slices.Contains(s.recorded, name)
	}
	return !slices.Contains(s.unrecorded, name)
}

// header returns h without the fields it may not record, with
// journalkit.UnrecordedHeadersField naming them (and any it named before), and true;
// or h itself and false when it has none to leave out.
func (s Rules) Header(h http.Header) (http.Header, bool) {
	var left []string
	for name := range h {
		if name != journalkit.UnrecordedHeadersField && !s.Recordable(name) {
			left = append(left, name)
		}
	}
	if len(left) == 0 {
		return h, false
	}
	kept := make(http.Header, len(h)-len(left)+1)
	for name, values := range h {
		if name != journalkit.UnrecordedHeadersField && s.Recordable(name) {
			kept[name] = values
		}
	}
	for _, v := range h[journalkit.UnrecordedHeadersField] {
		left = append(left, strings.Split(v, ", ")...)
	}
	slices.Sort(left)
	kept[journalkit.UnrecordedHeadersField] = []string{strings.Join(slices.Compact(left), ", ")}
	return kept, true
}

// recordedHeader is header without its second result.
func (s Rules) RecordedHeader(h http.Header) http.Header {
	kept, _ := s.Header(h)
	return kept
}

// Default is the rule with no extra names: what compaction applies to the
// journal it rewrites.
var Default = New(nil, nil, nil)

// redactedParam reports whether the query parameter name holds a secret,
// by the rule redactedParams states.
func (s Rules) RedactedParam(name string) bool {
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
func (s Rules) URL(u *url.URL) string {
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
func (s Rules) query(raw string) string {
	parts := strings.Split(raw, "&")
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if hasValue && s.RedactedParam(name) {
			k, _, _ := strings.Cut(part, "=")
			parts[i] = k + "=" + redactedValue
		}
	}
	return strings.Join(parts, "&")
}

// urlString redacts a URL given as a string; one that does not parse is
// replaced whole.
func (s Rules) URLString(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return s.URL(u)
}

// error redacts the URL of every *url.Error in err's chain, in place: the
// errors of attempts name the request's URL, and Do returns and logs them.
func (s Rules) Error(err error) error {
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		ue.URL = s.URLString(ue.URL)
		e = ue.Err
	}
	return err
}
