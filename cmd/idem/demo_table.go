package main

// The demo's closing table: the idem batch and the plain one side by side,
// as the proxy, the server's /stats and the server's database counted them.

import (
	"fmt"
	"io"
	"strconv"

	"github.com/idemkit/idem/testserver/chaos"
)

// demoColumn is one client's column of the table.
type demoColumn struct {
	report    stageReport
	rounds    int
	processes int
}

// Labels of the table's rows.
const (
	rowOperations  = "operations (invoices)"
	rowRounds      = "rounds (passes over the batch)"
	rowProcesses   = "batch processes"
	rowAttempts    = "attempts sent"
	rowRetryPrefix = "  retried after "
	rowConflicts   = rowRetryPrefix + "409 key in flight"
	rowCutOff      = rowRetryPrefix + "timeout or kill mid-request"
	rowReplays     = "answers replayed from a stored key"
	rowKeys        = "idempotency keys stored"
	rowCharges     = "charges in the database"
	rowDuplicates  = "duplicate charges"
	rowLost        = "lost (invoices never charged)"
	rowCaptures    = "gateway captures"
	rowOvercharged = "overcharged"
)

// faultLabel names a fault kind in the table.
func faultLabel(k chaos.Kind) string {
	switch k {
	case chaos.Reset:
		return "connection reset"
	case chaos.DropAfterCommit:
		return "answer dropped after commit"
	case chaos.BadGatewayAfterCommit:
		return "502 after commit"
	case chaos.Stall:
		return "stall (attempt timeout)"
	case chaos.PartialBody:
		return "body cut in half"
	case chaos.TooManyRequests:
		return "429 Too Many Requests"
	case chaos.Unavailable:
		return "503 Service Unavailable"
	}
	return k.String()
}

// writeDemoTable writes the table for a batch of ops operations.
func writeDemoTable(w io.Writer, ops int, withIdem, plain demoColumn) {
	row := func(label string, v func(demoColumn) string) {
		fmt.Fprintf(w, "%-44s %8s %15s\n", label, v(withIdem), v(plain))
	}
	count := func(label string, v func(demoColumn) int64) {
		row(label, func(c demoColumn) string { return strconv.FormatInt(v(c), 10) })
	}
	fmt.Fprintf(w, "%-44s %8s %15s\n", "", "idem", "plain retries")
	count(rowOperations, func(demoColumn) int64 { return int64(ops) })
	count(rowRounds, func(c demoColumn) int64 { return int64(c.rounds) })
	count(rowProcesses, func(c demoColumn) int64 { return int64(c.processes) })
	count(rowAttempts, func(c demoColumn) int64 { return int64(c.report.proxy.Requests) })
	for _, k := range chaos.AllKinds() {
		count(rowRetryPrefix+faultLabel(k), func(c demoColumn) int64 { return int64(c.report.proxy.Faults[k]) })
	}
	count(rowConflicts, func(c demoColumn) int64 { return c.report.stats.Conflicts })
	count(rowCutOff, func(c demoColumn) int64 { return int64(c.report.proxy.UpstreamErrors) })
	count(rowReplays, func(c demoColumn) int64 { return c.report.stats.Replays })
	count(rowKeys, func(c demoColumn) int64 { return c.report.ledger.Keys })
	count(rowCharges, func(c demoColumn) int64 { return c.report.ledger.Charges })
	count(rowDuplicates, func(c demoColumn) int64 { return c.report.ledger.Duplicates })
	count(rowLost, func(c demoColumn) int64 { return c.report.ledger.Lost })
	count(rowCaptures, func(c demoColumn) int64 { return c.report.ledger.Captures })
	row(rowOvercharged, func(c demoColumn) string { return dollars(c.report.ledger.Overcharged) })
	fmt.Fprint(w, "\nAttempts and faults as the proxy counted them; replays and 409s from the\n"+
		"server's /stats; keys, charges and captures from the server's database.\n")
	if plain.report.stats.Replays > 0 {
		fmt.Fprint(w, "Plain retries get replays too: net/http itself resends a request that\n"+
			"carries an Idempotency-Key, under the same key, when a reused connection\n"+
			"fails before any answer.\n")
	}
}

// dollars formats cents as dollars: 123456 as "$1,234.56".
func dollars(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	whole := strconv.FormatInt(cents/100, 10)
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	return fmt.Sprintf("%s$%s.%02d", sign, whole, cents%100)
}
