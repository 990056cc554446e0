// Command idem-testserver runs the idem reference server: an HTTP API
// (stock reservations and card charges) that implements idempotency keys
// over SQLite or PostgreSQL, with optional fault injection for tests.
//
//	idem-testserver -addr 127.0.0.1:8080 -db idem.db
//	idem-testserver -addr 127.0.0.1:0 -db :memory: -faults 0.2 -seed 7
//	idem-testserver -addr 127.0.0.1:8081 -db postgres://idem@db.example/idem
//
// Any number of processes given one postgres:// database are replicas of
// one server: they share keys, charges and gateway captures.
//
// It prints "listening on http://HOST:PORT" and stops cleanly on SIGINT or
// SIGTERM. Run it with -h for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/idemkit/idem/testserver"
)

func main() {
	err := testserver.Command(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, testserver.ErrUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "idem-testserver:", err)
		os.Exit(1)
	}
}
