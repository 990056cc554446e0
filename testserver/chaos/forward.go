package chaos

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// forwarder sends requests to the upstream. Unfaulted requests go through
// its reverse proxy as usual; the faults that strike after the upstream
// committed go through roundTrip, which forwards exactly the same way but
// hands the upstream response back instead of relaying it.
type forwarder struct {
	upstream  url.URL
	transport http.RoundTripper
	errorLog  *log.Logger
}

// newTransport returns the transport a proxy owns when Config.Transport is
// nil: pooled keep-alive connections, no environment proxy, and no
// transparent compression, which would add Accept-Encoding to requests and
// decode response bodies.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// reverseProxy returns a reverse proxy to the upstream whose ModifyResponse
// and ErrorHandler are modify and failed.
func (f *forwarder) reverseProxy(modify func(*http.Response) error, failed func(http.ResponseWriter, *http.Request, error)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      f.transport,
		ErrorLog:       f.errorLog,
		ModifyResponse: modify,
		ErrorHandler:   failed,
	}
}

// forwardingHeaders are the client's headers that ReverseProxy strips
// before Rewrite runs.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite points the outbound request at the upstream. ReverseProxy drops
// query parameters it cannot parse and the client's forwarding headers;
// both are put back so that the upstream sees what the client sent.
func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(&f.upstream)
	pr.Out.URL.RawQuery = joinQuery(f.upstream.RawQuery, pr.In.URL.RawQuery)
	for _, name := range forwardingHeaders {
		if v, ok := pr.In.Header[name]; ok {
			pr.Out.Header[name] = v
		}
	}
}

// joinQuery joins the upstream's query and the request's as SetURL does.
func joinQuery(upstream, request string) string {
	if upstream == "" || request == "" {
		return upstream + request
	}
	return upstream + "&" + request
}

// errHeldBack tells the reverse proxy, through its ErrorHandler, to relay
// nothing: roundTrip has taken the response.
var errHeldBack = errors.New("chaos: upstream response held back")

// roundTrip forwards r as an unfaulted request would be forwarded, reads
// the upstream response to its end, and returns it (its Body spent) with
// the body bytes, without writing anything to the client. When it returns
// without error, the upstream has sent its whole response.
func (f *forwarder) roundTrip(r *http.Request) (*http.Response, []byte, error) {
	var (
		resp   *http.Response
		body   []byte
		failed error
	)
	hold := func(res *http.Response) error {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return fmt.Errorf("chaos: reading upstream response body: %w", err)
		}
		resp, body = res, b
		return errHeldBack
	}
	fail := func(_ http.ResponseWriter, _ *http.Request, err error) {
		if !errors.Is(err, errHeldBack) {
			failed = err
		}
	}
	// The reverse proxy calls hold and fail before ServeHTTP returns.
	f.reverseProxy(hold, fail).ServeHTTP(&nowhere{header: make(http.Header)}, r)
	switch {
	case failed != nil:
		return nil, nil, failed
	case resp == nil:
		return nil, nil, errors.New("chaos: upstream exchange ended without a response")
	}
	return resp, body, nil
}

// nowhere is a ResponseWriter that keeps nothing. roundTrip hands it to the
// reverse proxy, which writes to it at most interim (1xx) responses.
type nowhere struct{ header http.Header }

// Header returns a header map that nobody reads.
func (n *nowhere) Header() http.Header { return n.header }

// Write discards b.
func (n *nowhere) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader discards the status.
func (n *nowhere) WriteHeader(int) {}
