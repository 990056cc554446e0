package faultsuite

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/idemkit/idem/testserver"
)

// Causes of failed attempts, as CauseOf names them. An HTTP status that
// the client retries is named by its code ("409", "502", ...).
const (
	CauseReset       = "reset"        // the connection was reset (ECONNRESET, EPIPE)
	CauseRefused     = "refused"      // nothing listened (ECONNREFUSED): the server was down
	CauseEOF         = "eof"          // the connection closed before a response
	CausePartialBody = "partial-body" // the response body broke off
	CauseTimeout     = "timeout"      // the attempt timed out (a stall, a hung server)
	CauseCanceled    = "canceled"     // the caller's context ended
	CauseOther       = "other"        // anything else
)

// CauseOf names why an attempt failed: from its transport or body error
// when there is one, otherwise from its status. It returns "" for an
// attempt that did not fail: no error and a status the client does not
// retry.
func CauseOf(status int, err error) string {
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return CauseRefused
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			return CauseReset
		case errors.Is(err, io.ErrUnexpectedEOF):
			return CausePartialBody
		case errors.Is(err, io.EOF):
			return CauseEOF
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			return CauseTimeout
		case errors.Is(err, context.Canceled):
			return CauseCanceled
		}
		return CauseOther
	}
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests,
		status >= 500 && status != http.StatusNotImplemented:
		return strconv.Itoa(status)
	}
	return ""
}

// ObserveFailures wraps base (http.DefaultTransport when nil) so that every
// failed exchange is reported to rec with its cause: a transport error, a
// status the client retries, or a response body that breaks off while it
// is read. A 409 is reported unless the server replayed it as its stored
// answer, as the client retries every other one (the key may be in
// flight). Responses the server replayed are reported too.
func ObserveFailures(base http.RoundTripper, rec Recorder) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return observer{base: base, rec: rec}
}

type observer struct {
	base http.RoundTripper
	rec  Recorder
}

func (o observer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.base.RoundTrip(req)
	if err != nil {
		o.rec.Failure(causeIn(req.Context(), err))
		return nil, err
	}
	if resp.Header.Get(testserver.HeaderReplayed) == "true" {
		o.rec.Replayed()
		if resp.StatusCode == http.StatusConflict {
			return resp, nil // a stored, final conflict, not a failure
		}
	}
	if cause := CauseOf(resp.StatusCode, nil); cause != "" {
		o.rec.Failure(cause)
		return resp, nil
	}
	resp.Body = &observedBody{ReadCloser: resp.Body, ctx: req.Context(), rec: o.rec}
	return resp, nil
}

// observedBody reports the first read error other than EOF: a body that
// broke off after a final status, which the client retries.
type observedBody struct {
	io.ReadCloser
	ctx      context.Context
	rec      Recorder
	reported bool
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.reported {
		b.reported = true
		cause := causeIn(b.ctx, err)
		if cause == CauseEOF {
			cause = CausePartialBody
		}
		b.rec.Failure(cause)
	}
	return n, err
}

// causeIn is CauseOf for an exchange made under ctx: when ctx has ended or
// its deadline has passed, whatever error net/http chose to report
// ("request canceled", a closed connection), the cause is the attempt's
// timeout or the caller's cancellation.
func causeIn(ctx context.Context, err error) string {
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return CauseTimeout
	case context.Canceled:
		return CauseCanceled
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return CauseTimeout // http.Client's timer may cancel before the context notices
	}
	return CauseOf(0, err)
}
