package loadbench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes r as one indented JSON document. Durations are in
// nanoseconds (fields ending in _ns).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: the machine, the settings, one line per
// row, the journals' reopening, and the targets.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	var b strings.Builder
	fmt.Fprintf(&b, "machine: %s %s/%s, NumCPU %d, GOMAXPROCS %d\n", m.GoVersion, m.GOOS, m.GOARCH, m.NumCPU, m.GOMAXPROCS)
	fmt.Fprintf(&b, "disk:    fsync p50 %s, p99 %s (%d fsyncs, each after a %d-byte append, in %s, before each run)\n",
		formatDuration(m.Fsync.P50), formatDuration(m.Fsync.P99), m.Fsync.Samples, m.Fsync.WriteSize, m.Fsync.Dir)
	s := r.Settings
	fmt.Fprintf(&b, "cells:   %s warm-up, %s measured, %d runs; medians over the runs; ×net/http is the median of each run's ratio\n\n",
		formatDuration(s.Warmup), formatDuration(s.Duration), s.Runs)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}

	targetWidth := targetWidthOf(r.Rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tconc\t%-*s\treq/s\t×net/http\tp50\tp99\tcpu/op\tallocs/op\tB/op\tfsyncs/op\terrors\t\n", targetWidth, "target", clientWidth, "client")
	var plain Sample
	for _, row := range r.Rows {
		md := row.Median
		if row.Client == ClientNetHTTP {
			plain = md
		}
		ratio, allocs, fsyncs, cpu := "-", fmt.Sprintf("%.0f", md.AllocsPerOp), "-", "-"
		if row.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", row.Ratio)
		}
		if md.CPUPerOp > 0 {
			cpu = formatDuration(md.CPUPerOp)
		}
		if row.Client != ClientNetHTTP && row.Ratio > 0 {
			allocs = fmt.Sprintf("%.0f (%+d)", md.AllocsPerOp, int(math.Round(md.AllocsPerOp))-int(math.Round(plain.AllocsPerOp)))
			if md.CPUPerOp > 0 && plain.CPUPerOp > 0 {
				cpu = fmt.Sprintf("%s (%s)", cpu, signedDuration(md.CPUPerOp-plain.CPUPerOp))
			}
		}
		if row.Client == ClientIdemJournal || row.Client == ClientIdemPostgres {
			fsyncs = fmt.Sprintf("%.3f", md.FsyncsPerOp)
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			targetWidth, row.Target, row.Concurrency, clientWidth, row.Client, formatCount(md.RequestsPerSec), ratio,
			formatDuration(md.P50), formatDuration(md.P99), cpu, allocs, formatCount(md.BytesPerOp), fsyncs, md.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := writeServerTable(w, r.Rows); err != nil {
		return err
	}

	b.Reset()
	for _, row := range r.Rows {
		if row.Median.FirstError != "" {
			fmt.Fprintf(&b, "  %s c=%d %s: %d failed; first: %s\n", row.Target, row.Concurrency, row.Client, row.Median.Errors, row.Median.FirstError)
		}
	}
	if b.Len() > 0 {
		if _, err := io.WriteString(w, "\nfailed requests:\n"+b.String()); err != nil {
			return err
		}
	}

	if rows := rowsWithRecovery(r.Rows); len(rows) > 0 {
		if _, err := io.WriteString(w, "\njournal reopened after each idem+journal cell (medians):\n"); err != nil {
			return err
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\tconc\trecords\topen\trecords/s\theap B/op\t\n", targetWidth, "target")
		for _, row := range rows {
			rec := row.Median.Recovery
			fmt.Fprintf(tw, "%-*s\t%d\t%s\t%s\t%s\t%s\t\n", targetWidth, row.Target, row.Concurrency, formatCount(float64(rec.Records)),
				formatDuration(rec.Elapsed), formatCount(rec.RecordsPerSec), formatCount(rec.HeapBytesPerOp))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if len(r.Checks) > 0 {
		b.Reset()
		b.WriteString("\ntargets:\n")
		for _, c := range r.Checks {
			verdict := "met   "
			if !c.Met {
				verdict = "MISSED"
			}
			fmt.Fprintf(&b, "  %s  %s\n          want %s, measured %s\n", verdict, c.Name, c.Want, c.Measured)
		}
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// layerOff maps each keyed server target to its unkeyed baseline on the
// same store.
var layerOff = map[Target]Target{
	TargetServer:         TargetServerUnkeyed,
	TargetServerPostgres: TargetServerPostgresUnkeyed,
}

// writeServerTable writes, when a PostgreSQL target was measured, the
// reference server's rows side by side, counting only the requests that
// succeeded (on PostgreSQL a request whose transaction keeps colliding with
// others gets 503): each one's successful requests per second, their ratio
// to the server on SQLite (×sqlite) and, for a keyed target, to its
// unkeyed baseline on the same store (×layer-off), both the median of each
// run's ratio, and the share of requests that failed.
func writeServerTable(w io.Writer, rows []Row) error {
	find := func(t Target, n int) *Row {
		for i := range rows {
			if r := &rows[i]; r.Target == t && r.Concurrency == n && r.Client == ClientNetHTTP {
				return r
			}
		}
		return nil
	}
	var server []Row
	pg := false
	for _, r := range rows {
		if r.Client == ClientNetHTTP && (r.Target == TargetServer || slices.Contains(companions, r.Target)) {
			server = append(server, r)
			pg = pg || slices.Contains(PostgresTargets, r.Target)
		}
	}
	if !pg {
		return nil
	}
	slices.SortStableFunc(server, func(a, b Row) int { return a.Concurrency - b.Concurrency })
	if _, err := io.WriteString(w, "\nreference server, POST /reservations, net/http, successful requests only (×sqlite: over server on SQLite; ×layer-off: over the same store without the idempotency layer; medians of each run's ratio):\n"); err != nil {
		return err
	}
	ratio := func(a *Row, t Target) string {
		b := find(t, a.Concurrency)
		if b == nil {
			return "-"
		}
		if x := pairedRatio(succeeded(a.Runs), succeeded(b.Runs)); x > 0 {
			return fmt.Sprintf("%.2f", x)
		}
		return "-"
	}
	targetWidth := targetWidthOf(server)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tconc\tok req/s\t×sqlite\t×layer-off\tfailed\tp50\tp99\t\n", targetWidth, "target")
	for i := range server {
		r := &server[i]
		off := "-"
		if t, ok := layerOff[r.Target]; ok {
			off = ratio(r, t)
		}
		var ops, errs int64
		for _, s := range r.Runs {
			ops, errs = ops+s.Ops, errs+s.Errors
		}
		failed := "0"
		if errs > 0 {
			failed = fmt.Sprintf("%.1f%%", 100*float64(errs)/float64(ops))
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", targetWidth, r.Target, r.Concurrency,
			formatCount(medianSample(succeeded(r.Runs)).RequestsPerSec), ratio(r, TargetServer), off, failed,
			formatDuration(r.Median.P50), formatDuration(r.Median.P99))
	}
	return tw.Flush()
}

// succeeded returns runs with RequestsPerSec counting the requests that
// succeeded only.
func succeeded(runs []Sample) []Sample {
	out := slices.Clone(runs)
	for i := range out {
		if out[i].Ops > 0 {
			out[i].RequestsPerSec *= float64(out[i].Ops-out[i].Errors) / float64(out[i].Ops)
		}
	}
	return out
}

// clientWidth is the width of the client column, which is left-aligned by
// padding it (the tabwriter aligns the numbers to the right): the longest
// name.
const clientWidth = len(ClientNetHTTPFsync)

// targetWidthOf is the width of the target column, padded as the client
// column is: the longest of AllTargets, or of the targets of rows if one
// is longer.
func targetWidthOf(rows []Row) int {
	n := len(TargetServerUnkeyed)
	for _, r := range rows {
		n = max(n, len(r.Target))
	}
	return n
}

func rowsWithRecovery(rows []Row) []Row {
	var out []Row
	for _, row := range rows {
		if row.Median.Recovery != nil {
			out = append(out, row)
		}
	}
	return out
}

// formatDuration prints d with three significant digits in the unit that
// suits it: 850ns, 96.2µs, 1.21ms, 2.00s.
func formatDuration(d time.Duration) string {
	switch a := d.Abs(); {
	case a < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case a < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case a < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

// signedDuration is formatDuration with a sign: +3.60µs, -440ns.
func signedDuration(d time.Duration) string {
	if d < 0 {
		return formatDuration(d)
	}
	return "+" + formatDuration(d)
}

// sig3 prints x with three significant digits, without an exponent.
func sig3(x float64) string {
	switch a := math.Abs(x); {
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// formatCount prints x rounded to a whole number with thousands
// separators: 12,345.
func formatCount(x float64) string {
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
