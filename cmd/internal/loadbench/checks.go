package loadbench

import (
	"fmt"
	"slices"
	"time"
)

// Check is one of the targets the figures are held against.
type Check struct {
	Name     string `json:"name"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// The targets.
const (
	wantIdemVsPlain       = 0.95                  // idem without a journal, over go-retryablehttp (else net/http), trivial, highest concurrency
	wantIdemExtraAllocs   = 15                    // idem's allocations per request over go-retryablehttp's, same cell
	wantJournalVsIdem     = 0.70                  // idem+journal over idem, trivial, highest concurrency
	wantJournalVsFsyncP50 = 1.10                  // idem+journal p50 over net/http+fsync's at c=1 (one fsync, the floor)
	wantJournalExtraP50   = 50 * time.Microsecond // without a net/http+fsync row: idem+journal p50 over net/http's at c=1, beyond one fsync
	wantRecoveryPerSec    = 1_000_000             // journal records read per second when opening
	wantServerLayerVsNone = 0.80                  // reference server, layer on over off, net/http, c=16
	wantPostgresVsIdem    = 0.90                  // idem+postgres over idem, reference server, highest concurrency
	wantPostgresVsFile    = 0.50                  // idem+postgres over idem+journal, trivial, highest concurrency
)

// checks holds the report's rows against the targets; a target whose rows
// were not measured is left out.
func checks(r *Report) []Check {
	find := func(t Target, n int, c Client) *Row {
		for i := range r.Rows {
			if row := &r.Rows[i]; row.Target == t && row.Concurrency == n && row.Client == c {
				return row
			}
		}
		return nil
	}
	conc := r.Settings.Concurrency
	if len(conc) == 0 {
		return nil
	}
	lo, hi := slices.Min(conc), slices.Max(conc)
	var out []Check

	if row, rh := find(TargetTrivial, hi, ClientIdem), find(TargetTrivial, hi, ClientRetryable); row != nil && rh != nil {
		// The library idem wraps, with the same transport: what idem adds.
		if ratio := pairedRatio(row.Runs, rh.Runs); ratio > 0 {
			extra := row.Median.AllocsPerOp - rh.Median.AllocsPerOp
			out = append(out, Check{
				Name: fmt.Sprintf("idem without a journal vs go-retryablehttp, trivial handler, c=%d", hi),
				Want: fmt.Sprintf("≥ %.2f×, ≤ %+d allocations per request", wantIdemVsPlain, wantIdemExtraAllocs),
				Measured: fmt.Sprintf("%.2f×, %+.0f allocations (CPU per request %s vs %s)", ratio, extra,
					formatDuration(row.Median.CPUPerOp), formatDuration(rh.Median.CPUPerOp)),
				Met: ratio >= wantIdemVsPlain && extra <= wantIdemExtraAllocs,
			})
		}
	} else if row != nil && row.Ratio > 0 {
		measured := fmt.Sprintf("%.2f×", row.Ratio)
		if p := find(TargetTrivial, hi, ClientNetHTTP); p != nil && p.Median.CPUPerOp > 0 && row.Median.CPUPerOp > 0 {
			measured += fmt.Sprintf(" (CPU per request %s vs %s)", formatDuration(row.Median.CPUPerOp), formatDuration(p.Median.CPUPerOp))
		}
		out = append(out, Check{
			Name:     fmt.Sprintf("idem without a journal vs net/http, trivial handler, c=%d", hi),
			Want:     fmt.Sprintf("≥ %.2f×", wantIdemVsPlain),
			Measured: measured,
			Met:      row.Ratio >= wantIdemVsPlain,
		})
	}
	if j, i := find(TargetTrivial, hi, ClientIdemJournal), find(TargetTrivial, hi, ClientIdem); j != nil && i != nil {
		if ratio := pairedRatio(j.Runs, i.Runs); ratio > 0 {
			out = append(out, Check{
				Name:     fmt.Sprintf("idem with the journal vs idem without, trivial handler, c=%d", hi),
				Want:     fmt.Sprintf("≥ %.2f×", wantJournalVsIdem),
				Measured: fmt.Sprintf("%.2f× (%.3f fsyncs/op)", ratio, j.Median.FsyncsPerOp),
				Met:      ratio >= wantJournalVsIdem,
			})
		}
	}
	if pg, i := find(TargetServer, hi, ClientIdemPostgres), find(TargetServer, hi, ClientIdem); pg != nil && i != nil {
		if ratio := pairedRatio(pg.Runs, i.Runs); ratio > 0 {
			out = append(out, Check{
				Name:     fmt.Sprintf("idem with the PostgreSQL journal vs idem without, reference server, c=%d", hi),
				Want:     fmt.Sprintf("≥ %.2f×", wantPostgresVsIdem),
				Measured: fmt.Sprintf("%.2f× (%.3f intent commits/op)", ratio, pg.Median.FsyncsPerOp),
				Met:      ratio >= wantPostgresVsIdem,
			})
		}
	}
	if pg, f := find(TargetTrivial, hi, ClientIdemPostgres), find(TargetTrivial, hi, ClientIdemJournal); pg != nil && f != nil {
		if ratio := pairedRatio(pg.Runs, f.Runs); ratio > 0 {
			out = append(out, Check{
				Name:     fmt.Sprintf("idem with the PostgreSQL journal vs the file journal, trivial handler, c=%d", hi),
				Want:     fmt.Sprintf("≥ %.2f×", wantPostgresVsFile),
				Measured: fmt.Sprintf("%.2f× (%.3f intent commits/op, %.3f fsyncs/op)", ratio, pg.Median.FsyncsPerOp, f.Median.FsyncsPerOp),
				Met:      ratio >= wantPostgresVsFile,
			})
		}
	}
	if j, f := find(TargetTrivial, lo, ClientIdemJournal), find(TargetTrivial, lo, ClientNetHTTPFsync); j != nil && f != nil && len(j.Runs) == len(f.Runs) {
		// The floor: a request after one fsync of its own.
		ratios := make([]float64, len(j.Runs))
		for i := range j.Runs {
			if f.Runs[i].P50 > 0 {
				ratios[i] = float64(j.Runs[i].P50) / float64(f.Runs[i].P50)
			}
		}
		ratio := median(ratios)
		out = append(out, Check{
			Name:     fmt.Sprintf("idem with the journal, p50 latency over net/http after one fsync, trivial handler, c=%d", lo),
			Want:     fmt.Sprintf("≤ %.2f×", wantJournalVsFsyncP50),
			Measured: fmt.Sprintf("%.2f× (%s vs %s; fsync p50 %s)", ratio, formatDuration(j.Median.P50), formatDuration(f.Median.P50), formatDuration(r.Machine.Fsync.P50)),
			Met:      ratio > 0 && ratio <= wantJournalVsFsyncP50,
		})
	} else if j, p := find(TargetTrivial, lo, ClientIdemJournal), find(TargetTrivial, lo, ClientNetHTTP); j != nil && p != nil && len(j.Runs) == len(p.Runs) {
		extra := make([]time.Duration, len(j.Runs))
		for i := range j.Runs {
			extra[i] = j.Runs[i].P50 - p.Runs[i].P50
		}
		d := median(extra)
		limit := r.Machine.Fsync.P50 + wantJournalExtraP50
		out = append(out, Check{
			Name:     fmt.Sprintf("idem with the journal, p50 latency over net/http's, trivial handler, c=%d", lo),
			Want:     fmt.Sprintf("≤ one fsync (%s) + %s = %s", formatDuration(r.Machine.Fsync.P50), formatDuration(wantJournalExtraP50), formatDuration(limit)),
			Measured: fmt.Sprintf("%s (%s vs %s)", signedDuration(d), formatDuration(j.Median.P50), formatDuration(p.Median.P50)),
			Met:      d <= limit,
		})
	}
	if rec := largestRecovery(r.Rows); rec != nil {
		out = append(out, Check{
			Name: "journal recovery: reopening the largest journal a cell wrote",
			Want: fmt.Sprintf("≥ %s records/s", formatCount(wantRecoveryPerSec)),
			Measured: fmt.Sprintf("%s records/s (%s records in %s; %s B of heap per operation)",
				formatCount(rec.RecordsPerSec), formatCount(float64(rec.Records)), formatDuration(rec.Elapsed), formatCount(rec.HeapBytesPerOp)),
			Met: rec.RecordsPerSec >= wantRecoveryPerSec,
		})
	}
	n := 16
	if !slices.Contains(conc, n) {
		n = hi
	}
	if on, off := find(TargetServer, n, ClientNetHTTP), find(TargetServerUnkeyed, n, ClientNetHTTP); on != nil && off != nil {
		if ratio := pairedRatio(on.Runs, off.Runs); ratio > 0 {
			out = append(out, Check{
				Name:     fmt.Sprintf("reference server, idempotency layer on vs off, net/http, c=%d", n),
				Want:     fmt.Sprintf("≥ %.2f×", wantServerLayerVsNone),
				Measured: fmt.Sprintf("%.2f× (%s vs %s req/s)", ratio, formatCount(on.Median.RequestsPerSec), formatCount(off.Median.RequestsPerSec)),
				Met:      ratio >= wantServerLayerVsNone,
			})
		}
	}
	return out
}

// largestRecovery returns the median recovery of the row whose journals
// held the most records.
func largestRecovery(rows []Row) *Recovery {
	var best *Recovery
	for _, row := range rows {
		if rec := row.Median.Recovery; rec != nil && (best == nil || rec.Records > best.Records) {
			best = rec
		}
	}
	return best
}
