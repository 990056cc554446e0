package idemotel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
)

// A charge answered 503 once, then 201: one operation span, with a client
// span for each attempt under it, and the attempts counted by cause.
func ExampleInstrument() {
	var mu sync.Mutex
	busy := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if busy > 0 {
			busy--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	// An SDK that keeps spans and metrics in memory; a program would
	// export them instead.
	spans := tracetest.NewInMemoryExporter()
	reader := sdkmetric.NewManualReader()
	opts := idemotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}

	cfg := idem.Config{HTTPClient: srv.Client(), InitialWait: time.Millisecond}
	if err := idemotel.Instrument(&cfg, opts); err != nil {
		panic(err)
	}
	c, err := idem.New(cfg)
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges?api_key=sk_live_1", strings.NewReader(`{"amount":1200}`))
	resp, err := c.Do("invoice-42", req)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	for _, s := range spans.GetSpans() { // in the order they ended
		set := attribute.NewSet(s.Attributes...)
		get := func(k attribute.Key) string { v, _ := set.Value(k); return v.String() }
		if s.Name == idemotel.OperationSpanName {
			fmt.Println(s.Name, get(idemotel.KeyOperationID), get(idemotel.KeyOutcome), "attempts:", get(idemotel.KeyAttempts))
			continue
		}
		fmt.Println(s.Name, get("http.response.status_code"), "attempt", get(idemotel.KeyAttempt),
			strings.TrimPrefix(get("url.full"), srv.URL))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	byCause := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "idem.attempts" {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				cause, _ := p.Attributes.Value(idemotel.KeyAttemptCause)
				byCause[cause.AsString()] = p.Value
			}
		}
	}
	fmt.Println("idem.attempts by cause:", byCause)
	// Output:
	// POST 503 attempt 1 /charges?api_key=xxxxx
	// POST 201 attempt 2 /charges?api_key=xxxxx
	// idem.operation invoice-42 done attempts: 2
	// idem.attempts by cause: map[503:1 ok:1]
}
