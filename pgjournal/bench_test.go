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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// BenchmarkIntentCommit measures what the shared journal adds before an
// operation's first byte: a claim (the lease) and the intent's commit, at
// 1, 16 and 64 concurrent callers, each operation new. It reports the
// latency of the intent's commit (Begin) and of the whole claim-and-begin,
// p50 and p99, operations per second, and the intent commits per
// operation (Stats.IntentCommits over Stats.Intents: below 1 when
// concurrent Begins share a commit, F10); the release that follows is
// counted in the throughput only. path=claim,begin takes the claim and
// then begins, as a batch does; path=claimbegin is Journal.ClaimBegin, one
// step, as Do does (its commit latency is the whole step's). Each runs with Open's defaults
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
		for _, path := range []string{"claim,begin", "claimbegin"} {
			if path == "claimbegin" && v.name != "default" {
				continue
			}
			for _, callers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("dsn=%s/path=%s/callers=%d", v.name, path, callers), func(b *testing.B) {
					j := openJournal(b, dsn, pgjournal.Options{Namespace: fmt.Sprint("bench-", runs.Add(1))})
					benchmarkIntentCommit(b, j, callers, path == "claimbegin")
				})
			}
		}
	}
}

// benchmarkIntentCommit is one run of BenchmarkIntentCommit.
func benchmarkIntentCommit(b *testing.B, j *pgjournal.Journal, callers int, oneStep bool) {
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
				op := journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
				t0 := time.Now()
				var (
					c   journal.Claim
					err error
				)
				t1 := t0
				if oneStep {
					c, err = j.ClaimBegin(ctx, op)
				} else if c, err = j.Claim(ctx, id); err == nil {
					t1 = time.Now()
					err = c.Begin(ctx, op)
				}
				t2 := time.Now()
				if c == nil {
					b.Error(err)
					return
				}
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
	if st := j.Stats(); st.Intents > 0 {
		b.ReportMetric(float64(st.IntentCommits)/float64(st.Intents), "intent-commits/op")
	}
}

// BenchmarkSynchronousCommitSetting measures what setting
// synchronous_commit in every statement that writes costs (F12): the
// intent statement for one row, each a new operation, sent as the
// journal sends it and without the setting (with=false), alternately
// within one run, by 1 and 16 callers on a pool of 16 connections. The
// server here has no standby: the figure is the statement's own cost.
//
//	go test -run '^$' -bench SynchronousCommitSetting -count 5 ./pgjournal
func BenchmarkSynchronousCommitSetting(b *testing.B) {
	dsn := pgtest.NewDatabase(b)
	openJournal(b, dsn, pgjournal.Options{}) // the tables
	pool, err := pgxpool.New(context.Background(), dsn+"&default_query_exec_mode=exec&pool_max_conns=16")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	without := strings.Replace(pgjournal.IntentSQL, " WHERE "+pgjournal.DurableSQL, "", 1)
	if without == pgjournal.IntentSQL {
		b.Fatal("the intent statement has no synchronous_commit setting")
	}
	var runs atomic.Int64
	for _, callers := range []int{1, 16} {
		for _, with := range []bool{true, false} {
			sql := map[bool]string{true: pgjournal.IntentSQL, false: without}[with]
			b.Run(fmt.Sprintf("callers=%d/with=%v", callers, with), func(b *testing.B) {
				ns := fmt.Sprint("bench-", runs.Add(1))
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range callers {
					wg.Go(func() {
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							id := fmt.Sprint("op-", n)
							_, err := pool.Exec(context.Background(), sql, ns, id, "key-"+id, make([]byte, 32), "POST", "http://x/",
								int64(n), "life", "owner", int64(time.Minute/time.Microsecond))
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
