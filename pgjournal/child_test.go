package pgjournal_test

// The child process of life_test.go's tests: this test binary run again
// as a fleet's process.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgjournal"
)

// childEnv, set in the environment, makes this test binary a fleet's
// process (runChild) instead of running the tests; its value is a
// childConfig in JSON.
const childEnv = "IDEM_PGJOURNAL_CHILD"

// childConfig is what a child process runs: one batch of IDs, each a POST
// to URL/ID marked with the Machine header, on a journal at DSN.
type childConfig struct {
	DSN, URL, Owner, Machine string
	LeaseTTL, Liveness       time.Duration
	IDs                      []string
	Concurrency              int
}

// runChild is a child process: it opens the journal, says "ready", runs
// the batch with RunBatch until it ends or a SIGTERM ends its context,
// prints the summary as JSON and closes the journal.
func runChild(config string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j, err := pgjournal.Open(ctx, cfg.DSN, pgjournal.Options{Owner: cfg.Owner, LeaseTTL: cfg.LeaseTTL, Liveness: cfg.Liveness, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 1, Logger: log,
		HTTPClient: &http.Client{Transport: machineTransport{cfg.Machine}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	sum, _ := c.RunBatch(ctx, batchOps(cfg.URL, cfg.IDs), idem.BatchOptions{Concurrency: cfg.Concurrency})
	js, _ := json.Marshal(sum)
	fmt.Println(string(js))
	return 0
}

// batchOps returns a batch of a POST to url/ID for each of ids.
func batchOps(url string, ids []string) []idem.BatchOp {
	ops := make([]idem.BatchOp, len(ids))
	for i, id := range ids {
		ops[i] = idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, url+"/"+id, strings.NewReader(`{"amount":1}`))
		}}
	}
	return ops
}

// lifeDead reports whether the database holds a life of owner declared
// dead.
func lifeDead(t *testing.T, dsn, owner string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dead bool
	if err := conn.QueryRow(ctx, `SELECT bool_or(dead) FROM idem_lives WHERE owner = $1`, owner).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	return dead
}
