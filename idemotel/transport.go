package idemotel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/journal"
)

// transport makes a client span of each request it sends through next.
type transport struct {
	next   http.RoundTripper
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	extra  []string // Config.RedactedParams
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	name, attrs := methodAttributes(r.Method)
	attrs = append(attrs, semconv.URLFull(redact.New(nil, nil, t.extra).URL(r.URL)))
	if host, port := serverOf(r.URL); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	if op, ok := operationFrom(ctx); ok {
		// A redirect net/http follows within an attempt is sent with the
		// response that caused it; it is the same attempt.
		n := op.attempts.Load()
		if r.Response == nil {
			n = op.attempts.Add(1)
		}
		attrs = append(attrs, KeyAttempt.Int64(n))
		if resend := op.requests.Add(1) - 1; resend > 0 {
			attrs = append(attrs, semconv.HTTPRequestResendCount(int(resend)))
		}
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))

	// A RoundTripper must not change the request it is given: the copy
	// carries the span's context, and a header of its own when there is
	// trace context to inject.
	r = r.WithContext(ctx)
	if len(t.prop.Fields()) > 0 {
		h := make(http.Header, len(r.Header)+2)
		for k, v := range r.Header {
			h[k] = v
		}
		t.prop.Inject(ctx, propagation.HeaderCarrier(h))
		r.Header = h
	}

	resp, err := t.next.RoundTrip(r)
	if err != nil {
		t.fail(span, err)
		span.End()
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		code := strconv.Itoa(resp.StatusCode)
		span.SetAttributes(semconv.ErrorTypeKey.String(code))
		span.SetStatus(codes.Error, "status "+code)
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		span.End() // nothing to transfer, or a connection handed over
		return resp, nil
	}
	resp.Body = &spanBody{rc: resp.Body, span: span, t: t}
	return resp, nil
}

// fail marks span as failed by err.
func (t *transport) fail(span trace.Span, err error) {
	err = t.redactError(err)
	span.SetAttributes(semconv.ErrorTypeKey.String(errorClass(err)))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// redactError rewrites the URLs err names by the secrets rule, as idem
// does with every attempt's error before it returns or logs it (a wrapped
// transport may name the request's URL).
func (t *transport) redactError(err error) error { return redact.New(nil, nil, t.extra).Error(err) }

// spanBody ends its request's span when the body is read to its end, fails,
// or is closed, whichever comes first.
type spanBody struct {
	rc   io.ReadCloser
	span trace.Span
	t    *transport
	once sync.Once
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.end(nil)
	case err != nil:
		b.end(err)
	}
	return n, err
}

func (b *spanBody) Close() error {
	err := b.rc.Close()
	b.end(nil)
	return err
}

func (b *spanBody) end(err error) {
	b.once.Do(func() {
		if err != nil {
			b.t.fail(b.span, err)
		}
		b.span.End()
	})
}

// methodAttributes returns a request's span name and method attributes by
// the HTTP conventions: a method they do not know is "_OTHER", with the
// original beside it, and names the span "HTTP".
func methodAttributes(method string) (string, []attribute.KeyValue) {
	if method == "" {
		method = http.MethodGet
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	switch method {
	case http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace, "QUERY":
		return method, append(attrs, semconv.HTTPRequestMethodKey.String(method))
	}
	return "HTTP", append(attrs, semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(method))
}

// serverOf returns the host and port a URL names, the port defaulted by
// the scheme.
func serverOf(u *url.URL) (string, int) {
	if u == nil {
		return "", 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		switch strings.ToLower(u.Scheme) {
		case "http":
			port = 80
		case "https":
			port = 443
		}
	}
	return u.Hostname(), port
}

// errorClass names the kind of failure err is, in a few words that bound
// the values of error.type and idem.attempt.cause.
func errorClass(err error) string {
	var (
		ne      net.Error
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
		hdrErr  tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, journal.ErrClaimLost):
		return "claim_lost"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &hdrErr),
		errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
		return "tls"
	}
	return "connection"
}

// attemptCause is an attempt's idem.attempt.cause: "ok" for a 2xx answer,
// the status code for any other, else the class of its failure.
func attemptCause(a idem.Attempt) string {
	switch {
	case a.Status != 0 && (a.Status < 200 || a.Status > 299):
		return strconv.Itoa(a.Status)
	case a.Status != 0 && (a.Err == nil || stoppedRetrying(a.Err)):
		// A 2xx after which retrying stopped for a reason of idem's own
		// (a Config.CheckRetry retried it, and the bounds ran out) was
		// still answered.
		return "ok"
	case a.Err == nil:
		return "connection" // no answer and no error: not made by idem
	}
	return errorClass(a.Err)
}

// stoppedRetrying reports whether err is only a reason idem stopped
// retrying, not a failure of the attempt (its body, its context).
func stoppedRetrying(err error) bool {
	for _, stop := range []error{idem.ErrAttemptsExhausted, idem.ErrMaxElapsed, idem.ErrRetryBudgetExhausted,
		idem.ErrRetryDeclined, idem.ErrKeyExpired} {
		if errors.Is(err, stop) {
			return true
		}
	}
	return false
}
