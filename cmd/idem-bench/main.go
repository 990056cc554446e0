// Command idem-bench measures what idem costs per request: the same
// workload through plain net/http, go-retryablehttp, idem without a journal
// and idem with a journal file, against a trivial in-process handler and
// the reference server on a SQLite file, at concurrency 1, 16 and 64, side
// by side in one run. It prints requests/s, p50 and p99 latency,
// allocations per operation, each row's ratio to plain net/http, and the
// machine it ran on, including the disk's fsync latency.
//
//	go run ./cmd/idem-bench                  # the whole grid, 3 runs of 2s cells
//	go run ./cmd/idem-bench -targets trivial -duration 5s -runs 5
//	go run ./cmd/idem-bench -json > bench.json
//
// The reference server on PostgreSQL, one replica and three, with and
// without its idempotency layer, beside the server on SQLite (a database
// per cell, on a PostgreSQL server it starts, or the one -pg names):
//
//	go run ./cmd/idem-bench -targets server,server-unkeyed,server-pg,server-pg-3,server-pg-unkeyed \
//		-clients net/http -concurrency 16,64
//
// One batch shared by a fleet of processes (F7): 1, 2 and 3 idem-bench
// processes run the same RunBatch at once, with a PostgreSQL journal,
// against the reference server delaying every request by 300 ms:
//
//	go run ./cmd/idem-bench -fleet 1,2,3                                  # 120 operations, 4 callers per process
//	go run ./cmd/idem-bench -fleet 1,2,3 -fleet-ops 200 -fleet-concurrency 16
//
// Run "idem-bench -h" for every flag. Exit status: 0 done, 1 failed,
// 2 bad arguments, 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemkit/idem/cmd/internal/loadbench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := loadbench.Command(ctx, os.Args[1:], os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, loadbench.ErrUsage):
		os.Exit(2)
	case interrupted:
		fmt.Fprintln(os.Stderr, "idem-bench: interrupted")
		os.Exit(130)
	}
	fmt.Fprintln(os.Stderr, "idem-bench:", err)
	os.Exit(1)
}
