// Package loadbench measures what idem costs per request: it drives one
// workload (POST /reservations with a small JSON body, each request a new
// operation) through plain net/http, net/http after an fsync of its own
// (the floor for any client that makes its intent durable first),
// go-retryablehttp, idem without a journal and idem with a journal file,
// side by side in one run, against
// a trivial in-process handler (which exposes the client's own overhead)
// and against the reference server on a SQLite file (testserver), at
// several concurrencies.
//
// Every cell (target, concurrency, client) is warmed up, then measured for
// a fixed duration, and the whole grid is repeated; the report gives the
// median of the repeats. Each repetition runs the clients of a cell back to
// back, in an order that rotates from one repetition to the next, and each
// row's ratio to plain net/http is the median of the per-repetition
// ratios, so slow drifts of the machine cancel out.
//
// On request (PostgresTargets), the reference server also runs on a
// PostgreSQL database, as one replica or three sharing the database, with
// or without its idempotency layer; those cells are measured right after
// the SQLite server's at the same concurrency, with plain net/http, and
// the report compares them with it run by run.
//
// The report also describes the machine, including the disk's fsync
// latency measured in the directory that holds the journals, because the
// journal's cost is one group-committed fsync per operation.
//
// RunFleet measures something else: one batch run at once by several
// processes sharing a PostgreSQL journal (F7), against the reference
// server delaying every request, and how much faster a fleet finishes it
// than one process.
//
// The idem-bench command is Command.
package loadbench
