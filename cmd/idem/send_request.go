package main

// The request of idem send: -H headers, the -d body, and the URL.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// headerFlags collects -H "Name: value" flags, in order.
type headerFlags []header

type header struct{ name, value string }

func (h *headerFlags) String() string { return "" }

// Set parses one "Name: value" header. The name must be an HTTP token and
// the value free of line breaks and NULs, so that a header cannot smuggle
// another one in.
func (h *headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("header %q: want \"Name: value\"", s)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !validHeaderName(name) {
		return fmt.Errorf("header %q: %q is not a valid header name", s, name)
	}
	if !validHeaderValue(value) {
		return fmt.Errorf("header %q: the value has a control character", s)
	}
	*h = append(*h, header{name, value})
	return nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether value has no control character other
// than a tab (RFC 9110, 5.5).
func validHeaderValue(value string) bool {
	for _, c := range []byte(value) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// keyHeader is the default of --key-header: the header the key goes in.
const keyHeader = "Idempotency-Key"

// without returns an error if h sets the key header: idem sets it, one key
// per operation.
func (h headerFlags) without(name string) error {
	for _, hd := range h {
		if http.CanonicalHeaderKey(hd.name) == http.CanonicalHeaderKey(name) {
			return fmt.Errorf("header %q: idem sets %s itself, one key per operation", hd.name+": "+hd.value, name)
		}
	}
	return nil
}

// dataFlag is the -d flag: the body as given, @file, or @- for stdin. It
// may be given once.
type dataFlag struct {
	spec string
	set  bool
}

func (d *dataFlag) String() string { return d.spec }

func (d *dataFlag) Set(s string) error {
	if d.set {
		return errors.New("-d given more than once")
	}
	d.spec, d.set = s, true
	return nil
}

// read returns the body bytes: the file's or stdin's for @file and @-,
// the argument itself otherwise. The bytes are sent as they are (unlike
// curl -d, which strips newlines from files).
func (d *dataFlag) read(stdin io.Reader) ([]byte, error) {
	switch {
	case !d.set:
		return nil, nil
	case d.spec == "@-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the body from stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(d.spec, "@"):
		b, err := os.ReadFile(d.spec[1:])
		if err != nil {
			return nil, fmt.Errorf("reading the body: %w", err)
		}
		return b, nil
	}
	return []byte(d.spec), nil
}

// parseTarget checks that raw is an absolute http or https URL.
func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %q has no host", raw)
	}
	return u, nil
}

// newRequest builds the request of idem send. A Host header sets the
// request's Host.
func newRequest(ctx context.Context, method, target string, headers headerFlags, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		if http.CanonicalHeaderKey(h.name) == "Host" {
			req.Host = h.value
			continue
		}
		req.Header.Add(h.name, h.value)
	}
	return req, nil
}
