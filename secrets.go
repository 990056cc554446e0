package idem

import (
	"net/http"
	"net/url"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/internal/redact"
)

// DefaultUnrecordedHeaders returns the response header fields an outcome
// never records: cookies and credentials. The slice is a copy.
func DefaultUnrecordedHeaders() []string { return redact.DefaultUnrecordedHeaders() }

// UnrecordedHeadersField is the field a recorded header gains, naming the
// fields the secrets rule left out.
const UnrecordedHeadersField = journalkit.UnrecordedHeadersField

// DefaultRedactedParams returns the query parameters whose values are never
// written. A name matches, ignoring case, when it is one of them or ends with
// one after a non-alphanumeric or camelCase boundary ("x-api-key",
// "accessToken", "APIToken"). The slice is a copy.
func DefaultRedactedParams() []string { return redact.DefaultRedactedParams() }

// newSecrets returns the secrets rule with cfg's names.
func newSecrets(cfg Config) redact.Rules {
	return redact.New(cfg.UnrecordedHeaders, cfg.RecordedHeaders, cfg.RedactedParams)
}

// RedactURL returns u as a Client whose Config.RedactedParams is
// extraParams writes it (see Secrets).
func RedactURL(u *url.URL, extraParams ...string) string {
	return redact.New(nil, nil, extraParams).URL(u)
}

// RedactError rewrites, in place, the URL of every *url.Error in err's
// chain as RedactURL writes it, and returns err.
func RedactError(err error, extraParams ...string) error {
	return redact.New(nil, nil, extraParams).Error(err)
}

// RedactRawURL returns raw as RedactURL writes it, or a placeholder for a
// URL that does not parse.
func RedactRawURL(raw string) string { return redact.Default.URLString(raw) }

// RedactHeader returns h without the fields a default Client does not
// record, and true; or h and false when it has none: what compaction keeps of
// an older record.
func RedactHeader(h http.Header) (http.Header, bool) { return redact.Default.Header(h) }
