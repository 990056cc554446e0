package pgjournal_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// BenchmarkIntentCommit measures what the shared journal adds before an
// operation's first byte: a claim (the lease) and the intent's commit, at
// 1, 16 and 64 concurrent callers, each operation new. It reports the
// latency of the intent's commit (Begin) and of the whole claim-and-begin,
// p50 and p99, and operations per second; the release that follows is
// counted in the throughput only. Each runs with Open's defaults
// (dsn=default), with 32 connections (exec-32), and with 32 connections
// and pgx's own mode, prepared statements cached on each connection
// (prepared-32), so that the pool size and the mode a transaction pooler
// needs are each measured against the other in one run.
//
//	go test -run '^$' -bench IntentCommit -count 3 ./pgjournal
func BenchmarkIntentCommit(b *testing.B) {
	base := pgtest.NewDatabase(b)
	var runs atomic.Int64 // each run in a namespace of its own: every operation new
	for _, v := range []struct{ name, params string }{
		{"default", ""},
		{"exec-32", "default_query_exec_mode=exec&pool_max_conns=32"},
		{"prepared-32", "default_query_exec_mode=cache_statement&pool_max_conns=32"},
	} {
		dsn := base
		if v.params != "" {
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			dsn += sep + v.params
		}
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("dsn=%s/callers=%d", v.name, callers), func(b *testing.B) {
				benchmarkIntentCommit(b, openJournal(b, dsn, pgjournal.Options{Namespace: fmt.Sprint("bench-", runs.Add(1))}), callers)
			})
		}
	}
}

// benchmarkIntentCommit is one run of BenchmarkIntentCommit.
func benchmarkIntentCommit(b *testing.B, j *pgjournal.Journal, callers int) {
	var (
		next          atomic.Int64
		mu            sync.Mutex
		begins, total []time.Duration
		wg            sync.WaitGroup
	)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			var mine, whole []time.Duration
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					break
				}
				id := fmt.Sprint("op-", n)
				t0 := time.Now()
				c, err := j.Claim(ctx, id)
				if err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				err = c.Begin(ctx, idem.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "http://x/", State: idem.StatePending})
				t2 := time.Now()
				c.Release()
				if err != nil {
					b.Error(err)
					return
				}
				mine, whole = append(mine, t2.Sub(t1)), append(whole, t2.Sub(t0))
			}
			mu.Lock()
			begins, total = append(begins, mine...), append(total, whole...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(begins)
	slices.Sort(total)
	if len(begins) == 0 {
		return
	}
	q := func(d []time.Duration, p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) }
	b.ReportMetric(q(begins, 0.5), "commit-p50-µs")
	b.ReportMetric(q(begins, 0.99), "commit-p99-µs")
	b.ReportMetric(q(total, 0.5), "claim+commit-p50-µs")
	b.ReportMetric(q(total, 0.99), "claim+commit-p99-µs")
	b.ReportMetric(float64(len(begins))/elapsed.Seconds(), "ops/s")
}
