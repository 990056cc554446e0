package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// BenchmarkZeroConfigSoak runs b.N named operations, each a new ID,
// through a Client with the zero Config against a local server, eight
// callers at a time, and reports the heap it reaches: the peak of the heap
// in use (garbage not yet collected included), the peak of what
// collections found live, and what is live at the end with the Client
// still in use, beside the bound of what its journal holds (C15). The soak
// of BENCHMARKS.md runs it with five million:
//
//	go test -run '^$' -bench ZeroConfigSoak -benchtime 5000000x -timeout 2h .
func BenchmarkZeroConfigSoak(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"res_0123456789","status":"confirmed"}`)
	}))
	defer srv.Close()
	c, err := idem.New(idem.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var peak soakPeak
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			peak.sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	gc0 := soakGCSeconds()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/reservations",
					strings.NewReader(`{"room":"12","night":"2026-03-01"}`))
				if err == nil {
					var resp *http.Response
					if resp, err = c.Do(fmt.Sprint("soak-", i), req); err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(stop)
	<-sampled
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	gc1 := soakGCSeconds()
	runtime.GC()
	peak.sample()
	const mib = 1 << 20
	b.ReportMetric(float64(peak.inUse)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(peak.live)/mib, "peak-live-MiB")
	b.ReportMetric(float64(peak.lastLive)/mib, "end-live-MiB")
	b.ReportMetric(100*(gc1[0]-gc0[0])/(gc1[1]-gc0[1]), "gc-cpu-%")
	b.ReportMetric(float64(idem.ZeroConfigBound(b.N))/mib, "bound-MiB")
	runtime.KeepAlive(c)
}

// soakPeak is the largest heap a soak sampled.
type soakPeak struct {
	inUse, live, lastLive uint64
}

// sample reads the heap in use and the live heap, keeping their peaks.
func (p *soakPeak) sample() {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	p.inUse = max(p.inUse, s[0].Value.Uint64())
	p.lastLive = s[1].Value.Uint64()
	p.live = max(p.live, p.lastLive)
}

// soakGCSeconds returns the collector's CPU seconds and the process's.
func soakGCSeconds() [2]float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(s)
	return [2]float64{s[0].Value.Float64(), s[1].Value.Float64()}
}
