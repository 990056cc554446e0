package idem

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

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
// says the request was not applied where it was sent: the redirect rule
// stopped it, or net/http could not follow it (no Location, say).
func unfollowedRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// safeMethod reports whether method is one that the RoundTripper lets
// through without a key when no operation is named.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}
