package idemserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// AnonymousPrincipal is BearerPrincipal's principal of a request without
// Authorization. All such requests share one key space.
const AnonymousPrincipal = "anonymous"

// BearerPrincipal is the default Config.Principal: "bearer:" and the hex
// of the first 16 bytes of the SHA-256 of the bearer token (the token
// itself is never stored); AnonymousPrincipal without Authorization; an
// error wrapping ErrUnauthorized for another scheme.
func BearerPrincipal(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return AnonymousPrincipal, nil
	}
	scheme, token, ok := strings.Cut(auth, " ")
	token = strings.Trim(token, " \t")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", fmt.Errorf("%w: only Authorization: Bearer <token> is supported", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(token))
	return "bearer:" + hex.EncodeToString(sum[:16]), nil
}

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

// requestTarget is the part of a URL the fingerprint covers.
func requestTarget(u *url.URL) string {
	if u.RawQuery == "" {
		return u.Path
	}
	return u.Path + "?" + u.RawQuery
}
