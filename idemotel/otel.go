// Package idemotel traces and measures an idem Client with OpenTelemetry.
// Package idem itself imports no OpenTelemetry code: it offers hooks
// (Config.OnOperationStart, OnOperation, OnAttempt, HTTPClient,
// filejournal.Options.OnSync, Client.RetryBudgetTokens, a journal's Pending), and
// this package turns them into spans and metrics.
//
// Three calls, each optional:
//
//   - Instrument, on a Config before idem.New: a span per operation, a
//     child span per attempt, and the counters idem.attempts and
//     idem.operations.
//   - SyncRecorder, as filejournal.Options.OnSync before filejournal.Open:
//     the histograms idem.journal.fsync.duration and
//     idem.journal.fsync.group_size.
//   - Observe, on the Client and its Journal after idem.New: the gauges
//     idem.retry_budget.tokens and idem.journal.pending.
//
// # Spans
//
// Each call of an operation (a Client.Do, or a request through
// Client.RoundTripper) is a span named "idem.operation", of kind Internal:
// it is the logical call, not a request on the wire. It starts when the call
// starts, before it waits for a concurrent call of the same ID or touches
// the journal, and ends when the call ends. Its attributes are
// idem.operation.id (when the call names an operation), and at the end
// idem.key, idem.outcome (done, rejected, unknown, or refused: stopped
// before anything was sent), idem.attempts, idem.recorded (answered from
// the journal, with no attempt) and http.response.status_code (the final
// status, or the last one of an unknown outcome; absent when there was
// none). Its status is Error whenever the outcome is not done, the call's
// error recorded as an exception event for unknown and refused. A rejection
// is the server's final answer, but Do returns it as an error and nothing
// was applied, so it is an Error too, described by its status; filter on
// idem.outcome to tell it from a failure.
//
// Each request that reaches the transport is a child span of kind Client
// that follows the OpenTelemetry semantic conventions for HTTP clients:
// named by its method ("POST"), with http.request.method, url.full,
// server.address, server.port, http.response.status_code,
// http.request.resend_count from the second request of a call on, and
// error.type for a failure (the status code for 4xx and 5xx answers,
// otherwise the classes of idem.attempt.cause below). It also carries
// idem.attempt, the attempt number idem counts (a redirect followed within
// an attempt is a request of its own with the same number). url.full is
// written by idem's secrets rule (plus Config.RedactedParams):
// no user info or fragment, and credential-like query values replaced. The span lasts
// until the response body is read to its end or closed, so the body's
// transfer is part of it; a body never closed leaves its span unended, as
// it leaves the connection busy.
//
// Trace context is injected into each request's header by
// Options.Propagator. The default, otel.GetTextMapPropagator(), injects
// nothing until a program installs a propagator with
// otel.SetTextMapPropagator; only then is each request's header copied to
// carry it (the caller's request is never changed).
//
// # Metrics
//
// Instruments are named under "idem." with units by the OpenTelemetry
// conventions, from the meter named ScopeName:
//
//   - idem.attempts ({attempt}), counter: attempts made, by
//     idem.attempt.cause: "ok" for a 2xx answer, the status code for any
//     other answer ("503", "409", "400"), or the class of a failure:
//     "timeout", "canceled", "tls", "claim_lost" (a shared journal's claim
//     lapsed), or "connection" (a refused or broken connection, a body cut
//     short, anything else).
//   - idem.operations ({operation}), counter: calls, by idem.outcome and
//     idem.recorded.
//   - idem.retry_budget.tokens ({token}), gauge: Client.RetryBudgetTokens.
//   - idem.journal.pending ({operation}), gauge: pending operations whose
//     key has not expired (what List(ctx, journal.ListPending) returns).
//   - idem.journal.fsync.duration (s), histogram: each group commit's fsync.
//   - idem.journal.fsync.group_size ({record}), histogram: records each of
//     those fsyncs made durable.
//
// No metric carries an operation ID or a key: their values are unbounded.
package idemotel

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// ScopeName is the instrumentation scope of the tracer and the meter this
// package uses: the name to select in views and sampling rules.
const ScopeName = "github.com/idemkit/idem/idemotel"

// OperationSpanName is the name of the span of each call of an operation.
const OperationSpanName = "idem.operation"

// The attributes this package adds besides the semantic conventions'.
const (
	// KeyOperationID is the operation ID, on the operation span.
	KeyOperationID attribute.Key = "idem.operation.id"
	// KeyKey is the idempotency key, on the operation span.
	KeyKey attribute.Key = "idem.key"
	// KeyOutcome is done, rejected, unknown or refused, on the operation
	// span and idem.operations.
	KeyOutcome attribute.Key = "idem.outcome"
	// KeyAttempts is the number of attempts a call made, on the operation
	// span.
	KeyAttempts attribute.Key = "idem.attempts"
	// KeyRecorded tells an outcome answered from the journal, on the
	// operation span and idem.operations.
	KeyRecorded attribute.Key = "idem.recorded"
	// KeyAttempt is the attempt number, from 1, on a request's span.
	KeyAttempt attribute.Key = "idem.attempt"
	// KeyAttemptCause is why an attempt ended as it did, on
	// idem.attempts.
	KeyAttemptCause attribute.Key = "idem.attempt.cause"
)

// OutcomeRefused is the idem.outcome of a call refused before anything was
// sent (OperationEnd.Outcome zero: ErrMismatch, ErrKeyExpired, an invalid
// request, a journal failure, a context that ended while waiting).
const OutcomeRefused = "refused"

// Options chooses where spans and metrics go. The zero Options uses
// OpenTelemetry's global providers and propagator, which forward to the
// ones a program installs later: it may install its SDK after calling this
// package.
type Options struct {
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator injects the trace context into each request's header.
	// Default otel.GetTextMapPropagator(), which injects nothing until a
	// propagator is installed.
	Propagator propagation.TextMapPropagator
}

func (o Options) tracer() trace.Tracer {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

func (o Options) meter() metric.Meter {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName)
}

func (o Options) propagator() propagation.TextMapPropagator {
	if o.Propagator == nil {
		return otel.GetTextMapPropagator()
	}
	return o.Propagator
}

// Instrument sets cfg's hooks so that the Client that idem.New makes of it
// traces its calls and counts its attempts and outcomes (see the package
// documentation). Call it once, before idem.New.
//
// Hooks already set are kept and still called: OnOperationStart after the
// operation span is started (its context holds the span), OnOperation and
// OnAttempt before this package's own, so OnOperation may still add
// attributes to trace.SpanFromContext(end.Context). cfg.HTTPClient is
// replaced by a copy (the caller's is not changed) whose Transport is
// wrapped; nil takes idem's default, a pooled client from go-cleanhttp, and
// a nil Transport is http.DefaultTransport. The copy keeps the caller's Jar,
// CheckRedirect and Timeout.
//
// Instrument returns an error for a nil cfg, for a cfg it has already
// instrumented (every call and attempt would be traced twice), and when an
// instrument cannot be made.
func Instrument(cfg *idem.Config, opts Options) error {
	if cfg == nil {
		return errors.New("idemotel: Instrument of a nil Config")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = cleanhttp.DefaultPooledClient()
	}
	if _, done := hc.Transport.(*transport); done {
		return errors.New("idemotel: Config is already instrumented")
	}
	meter := opts.meter()
	attempts, aerr := meter.Int64Counter("idem.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of idem operations, by cause."))
	operations, oerr := meter.Int64Counter("idem.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Calls of idem operations, by outcome."))
	if err := errors.Join(aerr, oerr); err != nil {
		return err
	}
	tracer := opts.tracer()

	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	wrapped := *hc
	wrapped.Transport = &transport{
		next:   next,
		tracer: tracer,
		prop:   opts.propagator(),
		extra:  cfg.RedactedParams,
	}
	cfg.HTTPClient = &wrapped

	prevStart, prevEnd, prevAttempt := cfg.OnOperationStart, cfg.OnOperation, cfg.OnAttempt
	cfg.OnOperationStart = func(ctx context.Context, id string) context.Context {
		ctx = startOperation(ctx, tracer, id)
		if prevStart != nil {
			ctx = prevStart(ctx, id)
		}
		return ctx
	}
	cfg.OnOperation = func(e idem.OperationEnd) {
		if prevEnd != nil {
			prevEnd(e)
		}
		endOperation(e, operations)
	}
	cfg.OnAttempt = func(a idem.Attempt) {
		if prevAttempt != nil {
			prevAttempt(a)
		}
		// Attempt carries no context; the count needs none.
		attempts.Add(context.Background(), 1, metric.WithAttributes(KeyAttemptCause.String(attemptCause(a))))
	}
	return nil
}

// operation is the state of one call, in its context: its span, and the
// counts that number its requests.
type operation struct {
	span     trace.Span
	attempts atomic.Int64 // attempts that reached the transport
	requests atomic.Int64 // requests that reached it, redirects included
}

type operationKey struct{}

// operationFrom returns the call that ctx belongs to, if one was started by
// this package.
func operationFrom(ctx context.Context) (*operation, bool) {
	if ctx == nil {
		return nil, false
	}
	op, ok := ctx.Value(operationKey{}).(*operation)
	return op, ok
}

// startOperation starts a call's span and returns the context that carries
// it.
func startOperation(ctx context.Context, tracer trace.Tracer, id string) context.Context {
	var attrs []attribute.KeyValue
	if id != "" {
		attrs = append(attrs, KeyOperationID.String(id))
	}
	ctx, span := tracer.Start(ctx, OperationSpanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, operationKey{}, &operation{span: span})
}

// endOperation counts a call's outcome and ends its span. The span is found
// by this package's own context key, not trace.SpanFromContext, which
// would find a span that an earlier OnOperationStart hook started inside it.
func endOperation(e idem.OperationEnd, operations metric.Int64Counter) {
	ctx := e.Context
	if ctx == nil { // a call refused before it had a context (a nil request)
		ctx = context.Background()
	}
	outcome := outcomeName(e.Outcome)
	operations.Add(ctx, 1, metric.WithAttributes(KeyOutcome.String(outcome), KeyRecorded.Bool(e.Recorded)))

	op, ok := operationFrom(ctx)
	if !ok {
		return
	}
	span := op.span
	attrs := []attribute.KeyValue{
		KeyOutcome.String(outcome), KeyAttempts.Int(e.Attempts), KeyRecorded.Bool(e.Recorded),
	}
	if e.Key != "" {
		attrs = append(attrs, KeyKey.String(e.Key))
	}
	if e.Status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(e.Status))
	}
	span.SetAttributes(attrs...)
	switch e.Outcome {
	case idem.OutcomeDone:
	case idem.OutcomeRejected:
		span.SetStatus(codes.Error, "rejected with status "+strconv.Itoa(e.Status))
	default:
		desc := outcome
		if e.Err != nil {
			span.RecordError(e.Err)
			desc = e.Err.Error()
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}

// outcomeName is the idem.outcome of o.
func outcomeName(o idem.Outcome) string {
	switch o {
	case idem.OutcomeDone, idem.OutcomeRejected, idem.OutcomeUnknown:
		return o.String()
	}
	return OutcomeRefused
}
