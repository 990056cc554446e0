package main

// What the demo's batch process tells the demo, one line at a time on its
// stdout, so that the demo can draw progress, pick the moment to kill it,
// and tell what the journal held when it came back:
//
//	journal DONE REJECTED PENDING TRUNCATED   the journal as the process opened it
//	op ID OUTCOME                             an operation ended: done, rejected, unknown or failed
//	round DONE REJECTED PENDING FAILED        a pass over the batch ended
//
// Every line is written with one write(2) as the event happens, so the
// demo sees an operation end before the next one is reported, and a kill
// loses no line that was written.

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// batchEvent is one line of the batch process's report.
type batchEvent struct {
	kind string // "journal", "op" or "round"

	// op: the operation and how it ended.
	id      string
	outcome string

	// journal and round: counts of operations.
	done, rejected, pending int
	// failed: operations refused before sending (round).
	failed int
	// truncated: torn-tail bytes cut when the journal was opened (journal).
	truncated int64
}

// Outcome words of op lines.
const (
	opDone     = "done"
	opRejected = "rejected"
	opUnknown  = "unknown"
	opFailed   = "failed"
)

// outcomeWord names how a batch operation ended, for an op line.
func outcomeWord(r idem.BatchResult) string {
	switch r.Outcome {
	case idem.OutcomeDone:
		return opDone
	case idem.OutcomeRejected:
		return opRejected
	case idem.OutcomeUnknown:
		return opUnknown
	}
	return opFailed
}

func writeJournalEvent(w io.Writer, done, rejected, pending int, truncated int64) error {
	_, err := fmt.Fprintf(w, "journal %d %d %d %d\n", done, rejected, pending, truncated)
	return err
}

func writeOpEvent(w io.Writer, r idem.BatchResult) error {
	_, err := fmt.Fprintf(w, "op %s %s\n", r.ID, outcomeWord(r))
	return err
}

func writeRoundEvent(w io.Writer, s idem.BatchSummary) error {
	_, err := fmt.Fprintf(w, "round %d %d %d %d\n", s.Done, s.Rejected, s.Unknown, s.Failed+s.Expired+s.Skipped)
	return err
}

// parseBatchEvent parses one line of the batch process's report.
func parseBatchEvent(line string) (batchEvent, error) {
	f := strings.Fields(line)
	bad := func() (batchEvent, error) {
		return batchEvent{}, fmt.Errorf("unexpected line from the batch process: %q", line)
	}
	if len(f) == 0 {
		return bad()
	}
	ev := batchEvent{kind: f[0]}
	var nums []int64
	switch {
	case ev.kind == "op" && len(f) == 3:
		ev.id, ev.outcome = f[1], f[2]
		return ev, nil
	case (ev.kind == "journal" || ev.kind == "round") && len(f) == 5:
		for _, s := range f[1:] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return bad()
			}
			nums = append(nums, n)
		}
	default:
		return bad()
	}
	ev.done, ev.rejected, ev.pending = int(nums[0]), int(nums[1]), int(nums[2])
	if ev.kind == "journal" {
		ev.truncated = nums[3]
	} else {
		ev.failed = int(nums[3])
	}
	return ev, nil
}
