package testserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// MaxKeyLength is the longest idempotency key accepted, in characters.
const MaxKeyLength = 255

// HeaderIdempotencyKey is the request header carrying the key.
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a response replayed from a stored key.
const HeaderReplayed = "Idempotent-Replayed"

var (
	errKeyMissing = errors.New("the Idempotency-Key header is required on this request")
	errKeyEmpty   = errors.New("the Idempotency-Key header is empty")
	errKeyTooLong = fmt.Errorf("the Idempotency-Key is longer than %d characters", MaxKeyLength)
	errKeyMany    = errors.New("send exactly one Idempotency-Key header")
)

// idempotencyKey extracts the key from a request (rule S1). Two spellings
// are accepted and name the same key:
//
//   - a bare token of letters, digits and - _ . : + / = ~ (a UUID, a
//     ULID, base64), e.g. Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
//   - an RFC 8941 structured-field string, e.g. Idempotency-Key: "8e03978e-...",
//     which may hold any printable ASCII, with \" and \\ as its only escapes.
//
// The key (unquoted) must be 1 to MaxKeyLength characters long.
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values(HeaderIdempotencyKey)
	switch len(values) {
	case 0:
		return "", errKeyMissing
	case 1:
	default:
		return "", errKeyMany
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", errKeyEmpty
	}
	// Refuse absurd headers before looking at them character by character;
	// a quoted key of MaxKeyLength characters is at most twice as long
	// escaped, plus its quotes.
	if len(v) > 2*MaxKeyLength+2 {
		return "", errKeyTooLong
	}
	var key string
	var err error
	if v[0] == '"' {
		key, err = parseSFString(v)
	} else {
		key, err = parseBareKey(v)
	}
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", errKeyEmpty
	}
	if len(key) > MaxKeyLength {
		return "", errKeyTooLong
	}
	return key, nil
}

// parseBareKey accepts a key sent without quotes.
func parseBareKey(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if !isBareKeyChar(v[i]) {
			return "", fmt.Errorf("the Idempotency-Key contains %q at position %d; "+
				"send letters, digits and - _ . : + / = ~ only, or quote the key as a structured-field string", v[i], i)
		}
	}
	return v, nil
}

func isBareKeyChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.:+/=~", c) >= 0
}

// parseSFString parses an RFC 8941 sf-string (section 3.3.3) that must make
// up the whole header value: no parameters, nothing after the closing quote.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`the quoted Idempotency-Key has a backslash not followed by " or \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("the quoted Idempotency-Key has characters after its closing quote")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("the quoted Idempotency-Key contains byte 0x%02x; only printable ASCII is allowed", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the quoted Idempotency-Key has no closing quote")
}
