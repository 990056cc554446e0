package idemserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// What can be wrong with a key; each error names the key's place in front
// of it.
var (
	errKeyMissing    = errors.New("is required on this request")
	errKeyEmpty      = errors.New("is empty")
	errKeyTooLong    = errors.New("is too long")
	errKeyMany       = errors.New("is given more than once; send exactly one")
	errBodyNotObject = errors.New("the request body must be a JSON object")
)

// keyReader reads a request's key the way a Config says.
type keyReader struct {
	header string // header name as configured (Header.Values canonicalizes it)
	field  string // JSON body member, or ""
	limit  int
}

// name says where the key is, for error details.
func (k keyReader) name() string {
	if k.field != "" {
		return fmt.Sprintf("the body member %q", k.field)
	}
	return "the " + k.header + " header"
}

func (k keyReader) wrap(err error) error { return fmt.Errorf("%s %w", k.name(), err) }

// fromHeader extracts the key from the header: a bare token of letters,
// digits and - _ . : + / = ~, or an RFC 8941 sf-string of printable ASCII
// with \" and \\ as its only escapes. Both spellings name the same key.
func (k keyReader) fromHeader(h http.Header) (string, error) {
	values := h.Values(k.header)
	switch len(values) {
	case 0:
		return "", k.wrap(errKeyMissing)
	case 1:
	default:
		return "", k.wrap(errKeyMany)
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", k.wrap(errKeyEmpty)
	}
	// A quoted key of the longest length is at most twice as long escaped.
	if len(v) > 2*k.limit+2 {
		return "", k.tooLong()
	}
	var key string
	var err error
	if v[0] == '"' {
		key, err = k.parseSFString(v)
	} else {
		key, err = k.parseBare(v)
	}
	if err != nil {
		return "", err
	}
	return k.checkLength(key)
}

func (k keyReader) checkLength(key string) (string, error) {
	switch {
	case key == "":
		return "", k.wrap(errKeyEmpty)
	case len(key) > k.limit:
		return "", k.tooLong()
	}
	return key, nil
}

func (k keyReader) tooLong() error {
	return fmt.Errorf("%s %w: at most %d characters", k.name(), errKeyTooLong, k.limit)
}

func (k keyReader) parseBare(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if !isBareKeyChar(v[i]) {
			return "", fmt.Errorf("%s contains %q at position %d; "+
				"send letters, digits and - _ . : + / = ~ only, or quote the key as a structured-field string", k.name(), v[i], i)
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

// parseSFString parses an RFC 8941 sf-string (section 3.3.3) that makes up
// the whole value: no parameters, nothing after the closing quote.
func (k keyReader) parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf(`the quoted key in %s has a backslash not followed by " or \`, k.name())
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("the quoted key in %s has characters after its closing quote", k.name())
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("the quoted key in %s contains byte 0x%02x; only printable ASCII is allowed", k.name(), c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("the quoted key in %s has no closing quote", k.name())
}

// fromBody takes the member k.field out of the JSON object body and returns
// the key it held and the body without the member: the other members'
// bytes as sent, in their order. A body without the member is returned
// whole, with errKeyMissing.
func (k keyReader) fromBody(body []byte) (key string, rest []byte, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", nil, errBodyNotObject
	}
	// Each member's span runs from the end of the one before it (or of the
	// brace) to the end of its value; the spans after the first begin with
	// their comma.
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
		if tok != k.field {
			continue
		}
		if found != nil {
			return "", nil, k.wrap(errKeyMany)
		}
		found = &span{from, dec.InputOffset(), i == 0}
		if err := json.Unmarshal(value, &key); err != nil {
			return "", nil, fmt.Errorf("%s must be a JSON string, not %s", k.name(), value)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return "", nil, errBodyNotObject
	}
	if found == nil {
		return "", body, k.wrap(errKeyMissing)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", nil, fmt.Errorf("%s contains byte 0x%02x; only printable ASCII is allowed", k.name(), key[i])
		}
	}
	if key, err = k.checkLength(key); err != nil {
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
