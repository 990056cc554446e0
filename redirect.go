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
// named. So an attempt follows a redirect only when the next request keeps
// the method and the body and stays within the origin (scheme, host and
// port) of the request the caller made: 307 and 308 within the origin, and
// 301 and 302 of a GET or HEAD without a body. Every other redirect ends
// the attempt with the 3xx as the server's final answer:
//
//   - 303 See Other: the server applied the request and points at the
//     result. The operation is done, and the 303 itself, Location included,
//     is what is recorded and returned; the Location is not fetched.
//   - 301, 302, 307 and 308 not followed: the server did not apply the
//     request here. The operation is rejected (see ErrRejected), and the
//     OutcomeError says where the server points, so the caller can fix its
//     URL.
//
// Config.HTTPClient's own CheckRedirect, when set, is asked about every
// redirect these rules allow: it can stop one (the 3xx is then the answer,
// judged as above) but never allow one they refuse. Without one, net/http's
// limit of 10 redirects applies, and reaching it ends the operation
// unknown.
//
// Requests without a key are not the client's business: StandardClient
// lets safe requests without an operation (C12) follow redirects as
// net/http does.

// followRedirect is the CheckRedirect of the Client's attempts: the
// redirect rule first, then the caller's own policy.
func followRedirect(caller func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if a, ok := req.Context().Value(attemptsKey{}).(*attempts); ok && !a.mayFollow(req, via) {
			return http.ErrUseLastResponse
		}
		if caller != nil {
			return caller(req, via)
		}
		if len(via) >= maxRedirects {
			return errTooManyRedirects
		}
		return nil
	}
}

// maxRedirects is net/http's default limit, which a CheckRedirect of our
// own replaces and so must keep.
const maxRedirects = 10

// errTooManyRedirects words the limit as net/http does, which is what
// go-retryablehttp recognises as not worth retrying.
var errTooManyRedirects = errors.New("stopped after 10 redirects")

// mayFollow reports whether the redirect to req, after the requests in via,
// keeps the operation's method, body and origin.
func (a *attempts) mayFollow(req *http.Request, via []*http.Request) bool {
	prev := via[len(via)-1]
	switch {
	case req.Response != nil && req.Response.StatusCode == http.StatusSeeOther:
		return false
	case req.Method != prev.Method:
		return false
	case a.hasBody && req.GetBody == nil: // net/http dropped the body
		return false
	}
	return sameOrigin(req.URL, via[0].URL)
}

// sameOrigin reports whether u and v have the same scheme, host and port,
// an absent port standing for the scheme's default.
func sameOrigin(u, v *url.URL) bool {
	return strings.EqualFold(u.Scheme, v.Scheme) &&
		strings.EqualFold(u.Hostname(), v.Hostname()) &&
		portOf(u) == portOf(v)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
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
