package idemserver

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
)

// Fingerprint is the default Config.Fingerprint: the SHA-256 of method,
// NUL, target (the path and, if the request has one, "?" and the raw
// query), NUL, body. The body is hashed as sent: clients resend the exact
// bytes.
func Fingerprint(method, target string, body []byte) []byte {
	h := sha256.New()
	io.WriteString(h, method)
	h.Write([]byte{0})
	io.WriteString(h, target)
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// globalPrincipal is the principal of every request when
// Config.Principal is nil: one key space for every caller.
func globalPrincipal(*http.Request) (string, error) { return "", nil }

// requestTarget is the part of a URL the fingerprint covers.
func requestTarget(u *url.URL) string {
	if u.RawQuery == "" {
		return u.Path
	}
	return u.Path + "?" + u.RawQuery
}
