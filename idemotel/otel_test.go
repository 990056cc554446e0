package idemotel_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
)

// withPostgres runs the tests with the shared PostgreSQL server of
// pgtest available, which pgjournal's tests need.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(withPostgres{m}) }

// telemetry is an SDK that keeps what it is given in memory.
type telemetry struct {
	opts   idemotel.Options
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func newTelemetry() *telemetry {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return &telemetry{
		opts:  idemotel.Options{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}},
		spans: exp, reader: reader, tp: tp,
	}
}

// metrics collects, and indexes the metrics by name.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Fatalf("metrics of scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// counts returns a counter's points as "attr=value,attr=value" → count.
func counts(t *testing.T, data metricdata.Aggregation) map[string]int64 {
	t.Helper()
	sum, ok := data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%T is not a monotonic int64 sum", data)
	}
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		var kv []string
		for _, a := range p.Attributes.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		out[strings.Join(kv, ",")] = p.Value
	}
	return out
}

func gauge[N int64 | float64](t *testing.T, data metricdata.Aggregation, name string) N {
	t.Helper()
	g, ok := data.(metricdata.Gauge[N])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Attributes.Len() != 0 {
		t.Fatalf("%s: %#v is not one gauge point without attributes", name, data)
	}
	return g.DataPoints[0].Value
}

func histogram[N int64 | float64](t *testing.T, data metricdata.Aggregation, name string) metricdata.HistogramDataPoint[N] {
	t.Helper()
	h, ok := data.(metricdata.Histogram[N])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("%s: %#v is not one histogram point", name, data)
	}
	return h.DataPoints[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		m[a.Key] = a.Value
	}
	return m
}

// wantAttrs fails unless span has each attribute with the value given (an
// int, bool or string), and none of the names in absent.
func wantAttrs(t *testing.T, what string, s tracetest.SpanStub, want map[attribute.Key]any, absent ...attribute.Key) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		var same bool
		switch v := v.(type) {
		case int:
			same = ok && g.Type() == attribute.INT64 && g.AsInt64() == int64(v)
		case bool:
			same = ok && g.Type() == attribute.BOOL && g.AsBool() == v
		case string:
			same = ok && g.Type() == attribute.STRING && g.AsString() == v
		}
		if !same {
			t.Errorf("%s: %s = %v (present %v), want %v", what, k, g.String(), ok, v)
		}
	}
	for _, k := range absent {
		if v, ok := got[k]; ok {
			t.Errorf("%s: %s = %v, want it absent", what, k, v.String())
		}
	}
}

// split returns the operation spans and the request spans, in the order
// they ended.
func split(spans tracetest.SpanStubs) (ops, reqs []tracetest.SpanStub) {
	for _, s := range spans {
		if s.Name == idemotel.OperationSpanName {
			ops = append(ops, s)
		} else {
			reqs = append(reqs, s)
		}
	}
	return ops, reqs
}

type mark struct{}

// TestInstrument: one operation answered 503, 503, then 201 is one
// operation span with three request spans under it; a second Do of it is
// answered from the journal; an operation whose context ends mid-attempt
// stays pending. Spans, counters, histograms and gauges say so exactly.
func TestInstrument(t *testing.T) {
	tel := newTelemetry()
	type seen struct{ key, traceparent string }
	var (
		mu       sync.Mutex
		requests []seen
		failures = 2
		arrived  = make(chan struct{}, 1)
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, seen{r.Header.Get("Idempotency-Key"), r.Header.Get("Traceparent")})
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "busy")
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	mux.HandleFunc("POST /hang", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client leave
		arrived <- struct{}{}
		<-r.Context().Done() // until the client gives up
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	j, err := filejournal.Open(filepath.Join(t.TempDir(), "j"), filejournal.Options{
		OnSync: idemotel.SyncRecorder(tel.opts),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	// Hooks set before Instrument keep being called.
	var ends []idem.OperationEnd
	var attempts []idem.Attempt
	callerClient := srv.Client()
	callerTransport := callerClient.Transport
	cfg := idem.Config{
		Journal: j, HTTPClient: callerClient, InitialWait: time.Millisecond, Jitter: -1,
		RedactedParams: []string{"session"},
		OnOperationStart: func(ctx context.Context, id string) context.Context {
			return context.WithValue(ctx, mark{}, id)
		},
		OnOperation: func(e idem.OperationEnd) { ends = append(ends, e) },
		OnAttempt:   func(a idem.Attempt) { attempts = append(attempts, a) },
	}
	if err := idemotel.Instrument(&cfg, tel.opts); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPClient == callerClient || callerClient.Transport != callerTransport {
		t.Fatal("Instrument changed the caller's *http.Client instead of a copy")
	}
	if err := idemotel.Instrument(&cfg, tel.opts); err == nil {
		t.Fatal("a second Instrument of the same Config succeeded; every span would be made twice")
	}
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	unregister, err := idemotel.Observe(c, j, tel.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unregister(); err != nil {
			t.Error(err)
		}
	}()

	// The caller's own trace: the operation span is its child.
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "job")
	defer parent.End()
	target := srv.URL + "/charges?access_token=secret&session=hush&page=2"
	do := func(id string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(`{"amount":1200}`))
		return c.Do(id, req)
	}

	// 1. 503, 503, 201.
	resp, err := do("charge-1")
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "charged" {
		t.Fatalf("body %q, want charged", body)
	}
	resp.Body.Close()

	ops, reqs := split(tel.spans.GetSpans())
	if len(ops) != 1 || len(reqs) != 3 {
		t.Fatalf("%d operation spans and %d request spans, want 1 and 3", len(ops), len(reqs))
	}
	op := ops[0]
	if len(requests) != 3 || requests[0].key == "" || requests[1].key != requests[0].key || requests[2].key != requests[0].key {
		t.Fatalf("the server saw %+v, want three requests with one key", requests)
	}
	key := requests[0].key
	if op.SpanKind != trace.SpanKindInternal || op.Parent.SpanID() != parent.SpanContext().SpanID() ||
		op.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("operation span of kind %v with parent %v, want Internal under the caller's span %v",
			op.SpanKind, op.Parent.SpanID(), parent.SpanContext().SpanID())
	}
	if op.Status.Code != codes.Unset {
		t.Errorf("operation span status %v, want Unset for done", op.Status)
	}
	wantAttrs(t, "operation span", op, map[attribute.Key]any{
		"idem.operation.id": "charge-1", "idem.key": key, "idem.outcome": "done",
		"idem.attempts": 3, "idem.recorded": false, "http.response.status_code": 201,
	})
	su, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(su.Port())
	wantURL := srv.URL + "/charges?access_token=xxxxx&session=xxxxx&page=2"
	for i, s := range reqs {
		what := "request span " + strconv.Itoa(i+1)
		status := []int{503, 503, 201}[i]
		if s.Name != "POST" || s.SpanKind != trace.SpanKindClient {
			t.Errorf("%s: %q of kind %v, want POST of kind Client", what, s.Name, s.SpanKind)
		}
		if s.Parent.SpanID() != op.SpanContext.SpanID() || s.SpanContext.TraceID() != op.SpanContext.TraceID() {
			t.Errorf("%s: parent %v, want the operation span %v", what, s.Parent.SpanID(), op.SpanContext.SpanID())
		}
		want := map[attribute.Key]any{
			"http.request.method": "POST", "url.full": wantURL, "server.address": "127.0.0.1",
			"server.port": port, "http.response.status_code": status, "idem.attempt": i + 1,
		}
		absent := []attribute.Key{}
		if i > 0 {
			want["http.request.resend_count"] = i
		} else {
			absent = append(absent, "http.request.resend_count")
		}
		if status >= 400 {
			want["error.type"] = strconv.Itoa(status)
			if s.Status.Code != codes.Error {
				t.Errorf("%s: status %v, want Error for a %d", what, s.Status, status)
			}
		} else {
			absent = append(absent, "error.type")
			if s.Status.Code != codes.Unset {
				t.Errorf("%s: status %v, want Unset for a %d", what, s.Status, status)
			}
		}
		wantAttrs(t, what, s, want, absent...)
		for _, a := range s.Attributes {
			if v := a.Value.String(); strings.Contains(v, "secret") || strings.Contains(v, "hush") {
				t.Errorf("%s: %s = %q carries a credential", what, a.Key, v)
			}
		}
		// The attempt carried its own span as the trace context.
		tp := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"
		if requests[i].traceparent != tp {
			t.Errorf("%s: the server saw traceparent %q, want %q", what, requests[i].traceparent, tp)
		}
	}
	// The caller's hooks ran, and saw the operation's span.
	if len(ends) != 1 || len(attempts) != 3 || ends[0].Context.Value(mark{}) != "charge-1" ||
		trace.SpanFromContext(ends[0].Context).SpanContext().SpanID() != op.SpanContext.SpanID() {
		t.Fatalf("the caller's hooks saw %d ends and %d attempts, or not the operation's span", len(ends), len(attempts))
	}

	// 2. The same operation again: answered from the journal.
	tel.spans.Reset()
	resp, err = do("charge-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ops, reqs = split(tel.spans.GetSpans())
	if len(ops) != 1 || len(reqs) != 0 || len(requests) != 3 {
		t.Fatalf("recorded answer: %d operation spans, %d request spans, %d requests served, want 1, 0, 3", len(ops), len(reqs), len(requests))
	}
	wantAttrs(t, "recorded operation span", ops[0], map[attribute.Key]any{
		"idem.operation.id": "charge-1", "idem.key": key, "idem.outcome": "done",
		"idem.attempts": 0, "idem.recorded": true, "http.response.status_code": 201,
	})

	m := tel.metrics(t)
	if got, want := counts(t, m["idem.attempts"]), map[string]int64{
		"idem.attempt.cause=503": 2, "idem.attempt.cause=ok": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("idem.attempts %v, want %v", got, want)
	}
	if got, want := counts(t, m["idem.operations"]), map[string]int64{
		"idem.outcome=done,idem.recorded=false": 1, "idem.outcome=done,idem.recorded=true": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("idem.operations %v, want %v", got, want)
	}
	if got, want := gauge[float64](t, m["idem.retry_budget.tokens"], "tokens"), c.RetryBudgetTokens(); got != want || want == 0 {
		t.Errorf("idem.retry_budget.tokens %v, want %v", got, want)
	}
	if got := gauge[int64](t, m["idem.journal.pending"], "pending"); got != 0 {
		t.Errorf("idem.journal.pending %d, want 0 with every operation done", got)
	}
	// One intent journaled: one fsync of a group of one record.
	if d, g := histogram[float64](t, m["idem.journal.fsync.duration"], "fsync.duration"),
		histogram[int64](t, m["idem.journal.fsync.group_size"], "fsync.group_size"); d.Count != 1 || d.Sum <= 0 || g.Count != 1 || g.Sum != 1 {
		t.Errorf("fsync histograms: duration count %d sum %v, group count %d sum %d; want 1 fsync of 1 record",
			d.Count, d.Sum, g.Count, g.Sum)
	}

	// 3. An operation whose context ends while the server holds its
	// attempt: unknown, and pending.
	tel.spans.Reset()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-arrived
		cancel()
	}()
	req, _ := http.NewRequestWithContext(hctx, http.MethodPost, srv.URL+"/hang", strings.NewReader("x"))
	if _, err := c.Do("charge-2", req); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("Do ended %v, want an unknown outcome", err)
	}
	ops, reqs = split(tel.spans.GetSpans())
	if len(ops) != 1 || len(reqs) != 1 {
		t.Fatalf("%d operation spans and %d request spans, want 1 and 1", len(ops), len(reqs))
	}
	if ops[0].Status.Code != codes.Error || len(ops[0].Events) != 1 || ops[0].Events[0].Name != "exception" {
		t.Errorf("unknown operation span: status %v, events %v; want Error with the error recorded", ops[0].Status, ops[0].Events)
	}
	wantAttrs(t, "unknown operation span", ops[0], map[attribute.Key]any{
		"idem.operation.id": "charge-2", "idem.outcome": "unknown", "idem.attempts": 1, "idem.recorded": false,
	}, "http.response.status_code")
	if reqs[0].Status.Code != codes.Error || reqs[0].Parent.SpanID() != ops[0].SpanContext.SpanID() {
		t.Errorf("canceled request span: status %v, parent %v", reqs[0].Status, reqs[0].Parent.SpanID())
	}
	wantAttrs(t, "canceled request span", reqs[0], map[attribute.Key]any{
		"error.type": "canceled", "idem.attempt": 1,
	}, "http.response.status_code")

	m = tel.metrics(t)
	if got := gauge[int64](t, m["idem.journal.pending"], "pending"); got != 1 {
		t.Errorf("idem.journal.pending %d, want 1 for the operation left pending", got)
	}
	if got, want := counts(t, m["idem.attempts"]), map[string]int64{
		"idem.attempt.cause=503": 2, "idem.attempt.cause=ok": 1, "idem.attempt.cause=canceled": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("idem.attempts %v, want %v", got, want)
	}
	if got, want := counts(t, m["idem.operations"]), map[string]int64{
		"idem.outcome=done,idem.recorded=false": 1, "idem.outcome=done,idem.recorded=true": 1,
		"idem.outcome=unknown,idem.recorded=false": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("idem.operations %v, want %v", got, want)
	}
	if got, want := gauge[float64](t, m["idem.retry_budget.tokens"], "tokens"), c.RetryBudgetTokens(); got != want {
		t.Errorf("idem.retry_budget.tokens %v, want %v", got, want)
	}
	// The second intent's fsync also made durable the first operation's
	// outcome, which was written without waiting for one: a group of two.
	if g := histogram[int64](t, m["idem.journal.fsync.group_size"], "fsync.group_size"); g.Count != 2 || g.Sum != 3 {
		t.Errorf("fsync group sizes: count %d sum %d, want 2 fsyncs, of 1 and 2 records", g.Count, g.Sum)
	}

	// A journal other than a *filejournal.Journal is counted by List.
	other := newTelemetry()
	unregisterOther, err := idemotel.Observe(nil, struct{ journal.Journal }{j}, other.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer unregisterOther()
	om := other.metrics(t)
	if got := gauge[int64](t, om["idem.journal.pending"], "pending"); got != 1 {
		t.Errorf("idem.journal.pending by List %d, want 1", got)
	}
	if _, ok := om["idem.retry_budget.tokens"]; ok {
		t.Error("idem.retry_budget.tokens reported without a Client")
	}
}

// TestRejectedAndRefused: a rejection and a refusal end their operation
// spans in Error, and are counted by outcome.
func TestRejectedAndRefused(t *testing.T) {
	tel := newTelemetry()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusPaymentRequired)
		io.WriteString(w, "card declined")
	}))
	defer srv.Close()
	cfg := idem.Config{HTTPClient: srv.Client()}
	if err := idemotel.Instrument(&cfg, tel.opts); err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string) error {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		_, err := c.Do("charge-9", req)
		return err
	}
	if err := send("a"); !errors.Is(err, idem.ErrRejected) {
		t.Fatalf("Do ended %v, want rejected", err)
	}
	if err := send("b"); !errors.Is(err, idem.ErrMismatch) { // another body, same ID
		t.Fatalf("Do ended %v, want ErrMismatch", err)
	}
	ops, reqs := split(tel.spans.GetSpans())
	if len(ops) != 2 || len(reqs) != 1 {
		t.Fatalf("%d operation spans and %d request spans, want 2 and 1", len(ops), len(reqs))
	}
	if s := ops[0].Status; s.Code != codes.Error || s.Description != "rejected with status 402" || len(ops[0].Events) != 0 {
		t.Errorf("rejected operation span: status %v, events %v", s, ops[0].Events)
	}
	wantAttrs(t, "rejected operation span", ops[0], map[attribute.Key]any{
		"idem.outcome": "rejected", "idem.attempts": 1, "http.response.status_code": 402,
	})
	if s := ops[1].Status; s.Code != codes.Error || !strings.Contains(s.Description, "reused with a different request") || len(ops[1].Events) != 1 {
		t.Errorf("refused operation span: status %v, events %v", s, ops[1].Events)
	}
	wantAttrs(t, "refused operation span", ops[1], map[attribute.Key]any{
		"idem.outcome": "refused", "idem.attempts": 0, "idem.recorded": false,
	}, "http.response.status_code")
	m := tel.metrics(t)
	if got, want := counts(t, m["idem.attempts"]), map[string]int64{"idem.attempt.cause=402": 1}; !maps.Equal(got, want) {
		t.Errorf("idem.attempts %v, want %v", got, want)
	}
	if got, want := counts(t, m["idem.operations"]), map[string]int64{
		"idem.outcome=rejected,idem.recorded=false": 1, "idem.outcome=refused,idem.recorded=false": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("idem.operations %v, want %v", got, want)
	}
}

// TestRedirectWithinAttempt: a 307 to the same origin, followed inside an
// attempt, is a second request span of the same attempt.
func TestRedirectWithinAttempt(t *testing.T) {
	tel := newTelemetry()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("POST /new", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := idem.Config{HTTPClient: srv.Client()}
	if err := idemotel.Instrument(&cfg, tel.opts); err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/old", strings.NewReader("x"))
	resp, err := c.Do("move", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ops, reqs := split(tel.spans.GetSpans())
	if len(ops) != 1 || len(reqs) != 2 {
		t.Fatalf("%d operation spans and %d request spans, want 1 and 2", len(ops), len(reqs))
	}
	wantAttrs(t, "first request", reqs[0], map[attribute.Key]any{
		"idem.attempt": 1, "http.response.status_code": 307, "url.full": srv.URL + "/old",
	}, "http.request.resend_count")
	wantAttrs(t, "redirected request", reqs[1], map[attribute.Key]any{
		"idem.attempt": 1, "http.request.resend_count": 1, "http.response.status_code": 201, "url.full": srv.URL + "/new",
	})
	wantAttrs(t, "operation span", ops[0], map[attribute.Key]any{"idem.attempts": 1, "idem.outcome": "done"})
}

// TestInstrumentKeepsTheCallersClient: the copy keeps Jar, CheckRedirect
// and Timeout; a nil HTTPClient becomes idem's default, instrumented.
func TestInstrumentKeepsTheCallersClient(t *testing.T) {
	if err := idemotel.Instrument(nil, idemotel.Options{}); err == nil {
		t.Fatal("Instrument(nil) succeeded")
	}
	jar := &cookieJar{}
	called := false
	caller := &http.Client{Jar: jar, Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error {
		called = true
		return nil
	}}
	cfg := idem.Config{HTTPClient: caller}
	if err := idemotel.Instrument(&cfg, idemotel.Options{}); err != nil {
		t.Fatal(err)
	}
	hc := cfg.HTTPClient
	if hc == caller || caller.Transport != nil || hc.Jar != jar || hc.Timeout != time.Minute || hc.Transport == nil {
		t.Fatalf("instrumented client %+v does not keep the caller's, or changed it", hc)
	}
	if hc.CheckRedirect(nil, nil); !called {
		t.Fatal("the caller's CheckRedirect is not kept")
	}
	cfg = idem.Config{}
	if err := idemotel.Instrument(&cfg, idemotel.Options{}); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPClient == nil || cfg.HTTPClient.Transport == nil || cfg.HTTPClient.Transport == http.DefaultTransport {
		t.Fatalf("a nil HTTPClient became %+v, want idem's default, instrumented", cfg.HTTPClient)
	}
}

type cookieJar struct{}

func (*cookieJar) SetCookies(*url.URL, []*http.Cookie) {}
func (*cookieJar) Cookies(*url.URL) []*http.Cookie     { return nil }
