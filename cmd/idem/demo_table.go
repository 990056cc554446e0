package main

// The demo's closing table: the idem batch and the careful job side by
// side, as the proxy, the server's /stats, the server's database and the
// jobs' own reports counted them.

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemkit/idem/testserver/chaos"
)

// demoColumn is one client's column of the table.
type demoColumn struct {
	report    stageReport
	rounds    int
	processes int
	kill      killSplit
}

// dupSplit is where a column's duplicate charges come from: invoices in
// flight at the kill, invoices answered but not yet recorded at the kill,
// and every other invoice.
type dupSplit struct {
	inFlight, unrecorded, other int64
}

// duplicates splits the column's duplicate charges, counted per invoice in
// the server's database, by where each invoice stood at the kill.
func (c demoColumn) duplicates() dupSplit {
	var d dupSplit
	for ref, keys := range c.report.keys {
		extra := int64(len(keys) - 1)
		switch {
		case extra <= 0:
		case c.kill.InFlight[ref]:
			d.inFlight += extra
		case c.kill.Unrecorded[ref]:
			d.unrecorded += extra
		default:
			d.other += extra
		}
	}
	return d
}

// Labels of the table's rows.
const (
	rowOperations    = "operations (invoices)"
	rowRounds        = "rounds (passes over the batch)"
	rowProcesses     = "batch processes"
	rowKilled        = "  recorded done at the kill (SIGKILL)"
	rowInFlight      = "  in flight at the kill (sent, no answer)"
	rowUnrecorded    = "  answered at the kill, not yet recorded"
	rowAttempts      = "attempts sent"
	rowRetryPrefix   = "  retried after "
	rowConflicts     = rowRetryPrefix + "409 key in flight"
	rowCutOff        = rowRetryPrefix + "timeout or kill mid-request"
	rowReplays       = "answers replayed from a stored key"
	rowKeys          = "idempotency keys stored"
	rowCharges       = "charges in the database"
	rowDuplicates    = "duplicate charges"
	rowDupInFlight   = "  of invoices in flight at the kill"
	rowDupUnrecorded = "  of invoices answered, not yet recorded"
	rowDupOther      = "  of every other invoice (faults alone)"
	rowLost          = "lost (invoices never charged)"
	rowCaptures      = "gateway captures"
	rowOvercharged   = "overcharged"
)

// notMeasured is what the table shows where a column has no number.
const notMeasured = "-"

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
func writeDemoTable(w io.Writer, ops int, withIdem, careful demoColumn) {
	row := func(label string, v func(demoColumn) string) {
		fmt.Fprintf(w, "%-44s %8s %15s\n", label, v(withIdem), v(careful))
	}
	count := func(label string, v func(demoColumn) int64) {
		row(label, func(c demoColumn) string { return strconv.FormatInt(v(c), 10) })
	}
	// atKill shows v only for a column whose first process was killed and
	// that tells the rows v counts.
	atKill := func(label string, v func(demoColumn) (int64, bool)) {
		row(label, func(c demoColumn) string {
			n, ok := v(c)
			if !c.kill.Killed || !ok {
				return notMeasured
			}
			return strconv.FormatInt(n, 10)
		})
	}
	split := func(c demoColumn) bool { return c.kill.Unrecorded != nil }
	fmt.Fprintf(w, "%-44s %8s %15s\n", "", "idem", "careful retries")
	count(rowOperations, func(demoColumn) int64 { return int64(ops) })
	count(rowRounds, func(c demoColumn) int64 { return int64(c.rounds) })
	count(rowProcesses, func(c demoColumn) int64 { return int64(c.processes) })
	atKill(rowKilled, func(c demoColumn) (int64, bool) { return int64(c.kill.Recorded), true })
	atKill(rowInFlight, func(c demoColumn) (int64, bool) { return int64(len(c.kill.InFlight)), true })
	atKill(rowUnrecorded, func(c demoColumn) (int64, bool) { return int64(len(c.kill.Unrecorded)), split(c) })
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
	atKill(rowDupInFlight, func(c demoColumn) (int64, bool) { return c.duplicates().inFlight, true })
	atKill(rowDupUnrecorded, func(c demoColumn) (int64, bool) { return c.duplicates().unrecorded, split(c) })
	count(rowDupOther, func(c demoColumn) int64 { return c.duplicates().other })
	count(rowLost, func(c demoColumn) int64 { return c.report.ledger.Lost })
	count(rowCaptures, func(c demoColumn) int64 { return c.report.ledger.Captures })
	row(rowOvercharged, func(c demoColumn) string { return dollars(c.report.ledger.Overcharged) })
	fmt.Fprint(w, "\nAttempts and faults as the proxy counted them; replays and 409s from the\n"+
		"server's /stats; keys, charges and captures from the server's database.\n"+
		"Where the rows stood at the kill, as each job reported it (for idem: the\n"+
		"journal's pending operations, answered or not); duplicates per invoice\n"+
		"from the server's database.\n")
}

// writeDemoNotes says where the careful job's duplicates come from: bothKeys
// of its invoices charged twice were charged under the key the killed
// process sent them under and under the next process's key.
func writeDemoNotes(w io.Writer, ops int, careful demoColumn, bothKeys int) {
	d := careful.duplicates()
	k := careful.kill
	caught := len(k.InFlight) + len(k.Unrecorded)
	text := fmt.Sprintf("Careful retries keep one key per charge in memory, reused by every "+
		"retry of it, and record each row in a done file once its answer is in. "+
		"Under faults alone that is enough: %s among the %d invoices the kill did not catch.",
		plural(int(d.other), "duplicate"), ops-caught)
	if k.Killed {
		twice := d.inFlight + d.unrecorded
		text += fmt.Sprintf(" The kill caught %d in flight and %d answered but not yet recorded; "+
			"the next process, which skips only the rows in its done file, sent them again "+
			"under new keys, the old ones having died with the first process. "+
			"%d of these %d had already been charged",
			len(k.InFlight), len(k.Unrecorded), twice, caught)
		switch {
		case twice == 0:
			text += "."
		case int64(bothKeys) == twice:
			text += ": the server holds two charges for each, under the killed process's key and under the new one."
		default:
			text += fmt.Sprintf("; the server holds %d of them under the killed process's key and under the new one.", bothKeys)
		}
		text += " idem resends them under the keys it journaled before the first byte was sent, so the server charges each once."
	}
	fmt.Fprintf(w, "\n%s", wrapText(text, 74))
}

// wrapText breaks text into lines of at most width bytes, between words,
// each ended by a newline.
func wrapText(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	if n > 0 {
		b.WriteByte('\n')
	}
	return b.String()
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
