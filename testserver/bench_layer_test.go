package testserver

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIdempotencyLayer measures what the idempotency layer costs the
// server: POST /reservations over loopback HTTP against a SQLite file, 16
// concurrent clients, with the layer on (every request under a new key:
// a key lookup and a key row in the same transaction) and off
// (Config.DisableIdempotency, no key sent), in the same run with the same
// database settings. It reports requests per second (req/s); compare the
// two with benchstat over -count 5.
//
//	go test -run '^$' -bench IdempotencyLayer -benchtime 3000x -count 5 ./testserver
func BenchmarkIdempotencyLayer(b *testing.B) {
	for _, layer := range []string{"on", "off"} {
		b.Run("layer="+layer, func(b *testing.B) {
			off := layer == "off"
			in := start(b, Config{DisableIdempotency: off})
			stock(b, in, "sku-1", maxAvailable)
			const clients = 16
			tr := &http.Transport{MaxIdleConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			body := `{"item_id":"sku-1","quantity":1}`
			var seq, failed atomic.Int64
			b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			began := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					hr, _ := http.NewRequest("POST", in.URL+"/reservations", strings.NewReader(body))
					hr.Header.Set("Content-Type", "application/json")
					if !off {
						hr.Header.Set(HeaderIdempotencyKey, "bench-"+strconv.FormatInt(seq.Add(1), 10))
					}
					rep, err := do(client, hr)
					if err != nil || rep.status != http.StatusCreated {
						failed.Add(1)
					}
				}
			})
			elapsed := time.Since(began)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d requests failed", n, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
		})
	}
}
