package testserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// MaxKeyLength is the longest idempotency key accepted, in characters,
// unless the Dialect says otherwise.
const MaxKeyLength = 255

// HeaderIdempotencyKey is the request header carrying the key, unless the
// Dialect says otherwise.
const HeaderIdempotencyKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on a response replayed from a stored key.
const HeaderReplayed = "Idempotent-Replayed"

// What can be wrong with a key; each error names the key's place
// (keyError) in front of it.
var (
	errKeyMissing = errors.New("is required on this request")
	errKeyEmpty   = errors.New("is empty")
	errKeyTooLong = errors.New("is too long")
	errKeyMany    = errors.New("is given more than once; send exactly one")
)

// keyError says err of the key found at name (see Dialect.keyName).
func keyError(name string, err error) error { return fmt.Errorf("%s %w", name, err) }

// headerKey extracts the key from a request's header (rule S1), from
// the dialect's KeyHeader. Two spellings are accepted and name the same
// key:
//
//   - a bare token of letters, digits and - _ . : + / = ~ (a UUID, a
//     ULID, base64), e.g. Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
//   - an RFC 8941 structured-field string, e.g. Idempotency-Key: "8e03978e-...",
//     which may hold any printable ASCII, with \" and \\ as its only escapes.
//
// The key (unquoted) must be 1 to the dialect's MaxKeyLength characters
// long.
func (d Dialect) headerKey(h http.Header) (string, error) {
	name, limit := d.keyName(), d.maxKeyLength()
	values := h.Values(d.keyHeader())
	switch len(values) {
	case 0:
		return "", keyError(name, errKeyMissing)
	case 1:
	default:
		return "", keyError(name, errKeyMany)
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", keyError(name, errKeyEmpty)
	}
	// Refuse absurd headers before looking at them character by character;
	// a quoted key of the longest length is at most twice as long
	// escaped, plus its quotes.
	if len(v) > 2*limit+2 {
		return "", keyTooLong(name, limit)
	}
	var key string
	var err error
	if v[0] == '"' {
		key, err = parseSFString(v, name)
	} else {
		key, err = parseBareKey(v, name)
	}
	if err != nil {
		return "", err
	}
	return checkKeyLength(key, name, limit)
}

// checkKeyLength refuses an empty key and one longer than limit.
func checkKeyLength(key, name string, limit int) (string, error) {
	switch {
	case key == "":
		return "", keyError(name, errKeyEmpty)
	case len(key) > limit:
		return "", keyTooLong(name, limit)
	}
	return key, nil
}

// keyTooLong is the error of a key longer than limit.
func keyTooLong(name string, limit int) error {
	return fmt.Errorf("%s %w: at most %d characters", name, errKeyTooLong, limit)
}

// parseBareKey accepts a key sent without quotes.
func parseBareKey(v, name string) (string, error) {
	for i := 0; i < len(v); i++ {
		if !isBareKeyChar(v[i]) {
			return "", fmt.Errorf("%s contains %q at position %d; "+
				"send letters, digits and - _ . : + / = ~ only, or quote the key as a structured-field string", name, v[i], i)
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
func parseSFString(v, name string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf(`the quoted key in %s has a backslash not followed by " or \`, name)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("the quoted key in %s has characters after its closing quote", name)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("the quoted key in %s contains byte 0x%02x; only printable ASCII is allowed", name, c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("the quoted key in %s has no closing quote", name)
}

// errBodyNotObject means a dialect that carries the key in the body met a
// body that is not a JSON object.
var errBodyNotObject = errors.New("the request body must be a JSON object")

// bodyKey takes the member KeyField out of the JSON object body (rule S1)
// and returns the key it held, a string of printable ASCII, and the body
// without the member: the other members' bytes as sent, and their order.
// A body without the member is returned whole, with errKeyMissing.
func (d Dialect) bodyKey(body []byte) (key string, rest []byte, err error) {
	name := d.keyName()
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", nil, errBodyNotObject
	}
	// Each member's span runs from the end of the one before it (or of the
	// brace) to the end of its value, so that the spans after the first
	// begin with their comma.
	type span struct {
		from, to int64
		first    bool
	}
	var found *span
	var next int64 = -1 // where the member after the key's begins
	for i := 0; dec.More(); i++ {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return "", nil, errBodyNotObject
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", nil, errBodyNotObject
		}
		if found != nil && next < 0 {
			next = from
		}
		if tok != d.KeyField {
			continue
		}
		if found != nil {
			return "", nil, keyError(name, errKeyMany)
		}
		found = &span{from, dec.InputOffset(), i == 0}
		if err := json.Unmarshal(value, &key); err != nil {
			return "", nil, fmt.Errorf("%s must be a JSON string, not %s", name, value)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return "", nil, errBodyNotObject
	}
	if found == nil {
		return "", body, keyError(name, errKeyMissing)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", nil, fmt.Errorf("%s contains byte 0x%02x; only printable ASCII is allowed", name, key[i])
		}
	}
	if key, err = checkKeyLength(key, name, d.maxKeyLength()); err != nil {
		return "", nil, err
	}
	cut := *found
	if cut.first && next >= 0 {
		// The first member: take the comma that begins the next one.
		cut.to = next + int64(bytes.IndexByte(body[next:], ',')) + 1
	}
	rest = append(append(make([]byte, 0, len(body)), body[:cut.from]...), body[cut.to:]...)
	return key, rest, nil
}
