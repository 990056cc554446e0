package idem

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// The redirect rule (C13).
//
// net/http follows a redirect inside an attempt, and for a request that
// carries a key it can follow into three mistakes: a 301 or 302 turns a
// POST into a bodiless GET whose answer would be recorded as the POST's
// outcome (the POST was never applied); a 303 fetches another resource
// whose answer would be taken for the operation's; and a redirect to
// another origin carries the key and the body to a host the caller never
// named. So an attempt follows only a 307 or 308 (which keep the method
// and the body) to the origin (scheme, host and port, the Host header
// included) of the request the caller made. Every other redirect ends the
// attempt with the 3xx as the server's final answer:
//
//   - 303 See Other: the server applied the request and points at the
//     result. The operation is done, and the 303 itself, Location included,
//     is what is recorded and returned; the Location is not fetched.
//   - 301, 302, and 307 or 308 to another origin: the server did not apply
//     the request here. The operation is rejected (see ErrRejected), and
//     the OutcomeError names the Location, so the caller can fix its URL.
//
// Config.HTTPClient's own CheckRedirect, when set, is asked about every
// redirect these rules allow. It can stop one, by returning any error or
// http.ErrUseLastResponse: the 3xx is then the answer, judged as above. It
// cannot allow one they refuse. Without one, net/http's limit of 10
// redirects applies, and reaching it ends the operation unknown.
//
// Requests without a key are not the rule's business: safe requests that
// name no operation pass through RoundTripper and StandardClient as net/http
// sends them (C12).

// followRedirect is the CheckRedirect of the Client's attempts (every
// request its attempt client sends carries a key): the redirect rule
// first, then the caller's own policy.
func followRedirect(caller func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !mayFollow(req, via) {
			return http.ErrUseLastResponse
		}
		if caller != nil && caller(req, via) != nil {
			return http.ErrUseLastResponse // the caller stopped it: the 3xx is the answer
		}
		if len(via) >= maxRedirects {
			return errTooManyRedirects
		}
		return nil
	}
}

// defaultRedirect is net/http's redirect policy: the caller's, or its
// default limit.
func defaultRedirect(caller func(*http.Request, []*http.Request) error, req *http.Request, via []*http.Request) error {
	if caller != nil {
		return caller(req, via)
	}
	if len(via) >= maxRedirects {
		return errTooManyRedirects
	}
	return nil
}

// maxRedirects is net/http's default limit, which a CheckRedirect of our
// own replaces and so must keep.
const maxRedirects = 10

// errTooManyRedirects words the limit as net/http does, which is what
// go-retryablehttp recognises as not worth retrying.
var errTooManyRedirects = errors.New("stopped after 10 redirects")

// mayFollow reports whether the redirect to req, after the requests in via,
// is a 307 or 308 that stays at the origin of the first request.
func mayFollow(req *http.Request, via []*http.Request) bool {
	if req.Response == nil {
		return false
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return sameOrigin(req, via[0])
	}
	return false
}

// sameOrigin reports whether r and s go to the same scheme, host and port,
// by their URLs and Host headers; an absent port stands for the scheme's
// default.
func sameOrigin(r, s *http.Request) bool {
	rh, rp := hostPort(r)
	sh, sp := hostPort(s)
	return strings.EqualFold(r.URL.Scheme, s.URL.Scheme) && strings.EqualFold(rh, sh) && rp == sp
}

// hostPort returns the host and port r is addressed to: its Host header if
// set, else its URL's, with the scheme's default port when none is given.
func hostPort(r *http.Request) (string, string) {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	u := url.URL{Host: host}
	if p := u.Port(); p != "" {
		return u.Hostname(), p
	}
	if strings.EqualFold(r.URL.Scheme, "https") {
		return u.Hostname(), "443"
	}
	return u.Hostname(), "80"
}

// unfollowedRedirect reports whether a final status is a redirect that
// says the request was not applied where it was sent: the rule above
// stopped it, or net/http could not follow it (no Location, say).
func unfollowedRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// safeMethod reports whether method is one that C12 lets through the
// RoundTripper without a key when no operation is named.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}
