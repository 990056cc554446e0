package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// How a dialect is applied: its key checked, placed in the body, and its
// answers read (D1, D2).

// uuidLength and uuidChars describe the keys newKey mints.
const (
	uuidLength = 36
	uuidChars  = "0123456789abcdef-"
)

// check returns why d cannot be used, or nil.
func (d Dialect) check() error {
	switch {
	case d.KeyHeader != "" && d.KeyField != "":
		return errors.New("both a key header and a key body field")
	case d.KeyHeader != "" && !validHeaderName(d.KeyHeader):
		return fmt.Errorf("KeyHeader %q is not a header name", d.KeyHeader)
	case d.MaxKeyLength < 0 || d.Retention < 0:
		return errors.New("a negative MaxKeyLength or Retention")
	case d.MaxKeyLength > 0 && d.MaxKeyLength < uuidLength:
		return fmt.Errorf("keys of at most %d bytes: a UUIDv4 key has %d", d.MaxKeyLength, uuidLength)
	case d.KeyChars != "" && strings.Trim(uuidChars, d.KeyChars) != "":
		return fmt.Errorf("KeyChars %q lacks some of a UUIDv4 key's %q", d.KeyChars, uuidChars)
	}
	for i, s := range d.Signals {
		switch {
		case s.Answer < AnswerInFlight || s.Answer > AnswerRefused:
			return fmt.Errorf("signal %d has no answer", i)
		case s.Status == 0 && s.Header == "" && s.Field == "":
			return fmt.Errorf("signal %d has no condition", i)
		case s.Status != 0 && (s.Status < 100 || s.Status > 999):
			return fmt.Errorf("signal %d has status %d", i, s.Status)
		case s.HeaderValue != "" && s.Header == "":
			return fmt.Errorf("signal %d has a HeaderValue without a Header", i)
		case s.Value != "" && s.Field == "":
			return fmt.Errorf("signal %d has a Value without a Field", i)
		}
	}
	return nil
}

// keyFits returns why the dialect's API would not take key, or nil: a key
// journaled by another version, or under another dialect, is checked before
// it is sent.
func (d Dialect) keyFits(key string) error {
	if d.MaxKeyLength > 0 && len(key) > d.MaxKeyLength {
		return fmt.Errorf("%w: key %q is longer than the %d bytes dialect %q allows", ErrInvalidRequest, key, d.MaxKeyLength, d.Name)
	}
	if d.KeyChars != "" && strings.Trim(key, d.KeyChars) != "" {
		return fmt.Errorf("%w: key %q has bytes dialect %q does not allow", ErrInvalidRequest, key, d.Name)
	}
	return nil
}

// checkBodyObject returns ErrBodyNotObject, with the reason, unless body is
// a JSON object without the field.
func checkBodyObject(body []byte, field string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return fmt.Errorf("%w: the body is not a JSON object", ErrBodyNotObject)
	}
	if _, ok := fields[field]; ok {
		return fmt.Errorf("%w: the body already has the field %q (an SDK that fills the field "+
			"itself and signs the body, as the AWS SDK does, needs idem at its own layer: package idemaws)", ErrBodyNotObject, field)
	}
	return nil
}

// bodyWithKey returns the body an attempt sends: the caller's JSON object
// with field set to key as its first member, the rest byte for byte as the
// caller wrote it. checkBodyObject has accepted body.
func bodyWithKey(body []byte, field, key string) []byte {
	open := bytes.IndexByte(body, '{') // only white space is before it
	rest := body[open+1:]
	name, _ := json.Marshal(field)
	value, _ := json.Marshal(key)
	out := make([]byte, 0, len(body)+len(name)+len(value)+2)
	out = append(out, body[:open+1]...)
	out = append(out, name...)
	out = append(out, ':')
	out = append(out, value...)
	if len(bytes.TrimSpace(rest)) > 1 { // more than the closing brace: other members follow
		out = append(out, ',')
	}
	return append(out, rest...)
}

// answerBodyLimit bounds what is read of a response body to match a
// Signal's Field.
const answerBodyLimit = 64 << 10

// readsBody reports whether a response of that status could match one of
// d's Field signals, so its body must be read to know.
func (d Dialect) readsBody(status int) bool {
	for _, s := range d.Signals {
		if s.Field != "" && (s.Status == 0 || s.Status == status) {
			return true
		}
	}
	return false
}

// answer returns what resp means in the dialect, 0 when no signal matches.
// body is the response body's first bytes, nil when not read. Replay
// signals, and the Idempotent-Replayed header, are tried first.
func (d Dialect) answer(resp *http.Response, body []byte) Answer {
	switch {
	case resp == nil:
		return 0
	case replayed(resp):
		return AnswerReplay
	case len(d.Signals) == 0:
		return 0
	}
	var doc any
	parsed := false
	field := func(path string) []string {
		if !parsed {
			parsed = true
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if dec.Decode(&doc) != nil || dec.More() {
				doc = nil
			}
		}
		return jsonValues(doc, strings.Split(path, "."), nil)
	}
	matches := func(s Signal) bool {
		if s.Status != 0 && s.Status != resp.StatusCode {
			return false
		}
		if s.Header != "" && !headerMatches(resp.Header.Values(s.Header), s.HeaderValue) {
			return false
		}
		if s.Field != "" && !valueMatches(field(s.Field), s.Value, false) {
			return false
		}
		return true
	}
	for _, s := range d.Signals {
		if s.Answer == AnswerReplay && matches(s) {
			return AnswerReplay
		}
	}
	for _, s := range d.Signals {
		if s.Answer != AnswerReplay && matches(s) {
			return s.Answer
		}
	}
	return 0
}

// headerMatches reports whether one of a header field's values matches
// pattern; an empty pattern matches a field that is present.
func headerMatches(values []string, pattern string) bool {
	if pattern == "" {
		return len(values) > 0
	}
	return valueMatches(values, pattern, true)
}

// valueMatches reports whether one of values matches pattern, a text with
// an optional * at either end (see Signal).
func valueMatches(values []string, pattern string, fold bool) bool {
	prefix := strings.HasPrefix(pattern, "*")
	suffix := len(pattern) > 1 && strings.HasSuffix(pattern, "*")
	core := strings.TrimSuffix(strings.TrimPrefix(pattern, "*"), "*")
	if fold {
		core = strings.ToLower(core)
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if fold {
			v = strings.ToLower(v)
		}
		switch {
		case prefix && suffix && strings.Contains(v, core),
			prefix && !suffix && strings.HasSuffix(v, core),
			!prefix && suffix && strings.HasPrefix(v, core),
			!prefix && !suffix && v == core:
			return true
		}
	}
	return false
}

// jsonValues appends to out the scalar values at path in doc, as written:
// an array on the way contributes each of its elements.
func jsonValues(doc any, path []string, out []string) []string {
	switch v := doc.(type) {
	case []any:
		for _, e := range v {
			out = jsonValues(e, path, out)
		}
		return out
	case map[string]any:
		if len(path) == 0 {
			return out
		}
		return jsonValues(v[path[0]], path[1:], out)
	}
	if len(path) != 0 {
		return out
	}
	switch v := doc.(type) {
	case string:
		return append(out, v)
	case json.Number:
		return append(out, v.String())
	case bool:
		return append(out, fmt.Sprint(v))
	}
	return out
}

// Read returns the Answer of the signal resp matches, or 0 when none does.
// body is the response body's first bytes, nil when not read. It lets an
// integration that sends operations its own way read answers as Do does.
func (d Dialect) Read(resp *http.Response, body []byte) Answer {
	return d.answer(resp, body[:min(len(body), answerBodyLimit)])
}
