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

// BenchmarkPostReservations measures POST /reservations over loopback HTTP
// against a SQLite file, with 16 concurrent clients, each request under a
// new key. It reports requests per second (req/s); with faults, a request
// that failed (a dropped connection, an error status) counts too: the
// server did the work of answering it.
//
//	go test -run '^$' -bench PostReservations -benchtime 3000x ./testserver
func BenchmarkPostReservations(b *testing.B) {
	for _, bc := range []struct {
		name   string
		faults Faults
	}{
		{"faults=none", Faults{}},
		{"faults=20%", func() Faults {
			f := UniformFaults(0.2, 1)
			f.Delay = time.Millisecond
			return f
		}()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := start(b, Config{Faults: Faults{}})
			stock(b, in, "sku-1", maxAvailable)
			in.Close()
			in = start(b, Config{Path: in.Server.cfg.Path, Faults: bc.faults})
			const clients = 16
			tr := &http.Transport{MaxIdleConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			body := `{"item_id":"sku-1","quantity":1}`
			var seq, failed atomic.Int64
			b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					hr, _ := http.NewRequest("POST", in.URL+"/reservations", strings.NewReader(body))
					hr.Header.Set("Content-Type", "application/json")
					hr.Header.Set(HeaderIdempotencyKey, "bench-"+strconv.FormatInt(seq.Add(1), 10))
					rep, err := do(client, hr)
					if err != nil || rep.status != http.StatusCreated {
						failed.Add(1)
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(failed.Load())/float64(b.N)*100, "%failed")
		})
	}
}
