package main

// idem journal verify: read the whole journal and report every problem in
// it, with its offset and the operations around it. The reading and the
// report are shared with idem journal salvage (journal_salvage.go).
//
// A torn tail (the end of a write a crash cut short, which the next writer
// cuts, J2) is normal after a crash: verify notes it and exits 0. Damage
// anywhere else, or an operation that cannot be kept, exits exitDamaged.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemkit/idem/internal/fileengine"
)

func runJournalVerify(_ context.Context, e env, args []string) int {
	const cmd = "idem journal verify"
	fs := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH\n\n", cmd)
		fmt.Fprint(w, `Reads the whole journal at PATH, past any damage, and reports every
problem: its byte offset, why the bytes there do not read, and the
operations of the records either side of it; then the operations it costs:
lost (a completion was read whose intent, and so whose key, was not) and
ambiguous (pending, with damage after the intent: its completion may have
been in it; a rerun resumes it under its key). It opens the file read-only,
takes no lock and writes nothing.

It exits 0 with "N records, M operations, no problems" when the journal
reads whole. A torn tail, the end of a write a crash cut short, is normal:
it is noted, the exit code is 0, and the next writer cuts it. Damage
anywhere else exits 7: "idem journal salvage PATH NEWPATH" copies every
record that still reads into a new journal.
`)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(e, cmd, "want one journal PATH, got %d arguments", len(pos))
	}
	path := pos[0]
	if isShared(path) {
		return usageError(e, cmd, "a shared PostgreSQL journal has no file to verify")
	}
	rep, code, ok := scanJournal(e, cmd, path)
	if !ok {
		return code
	}
	writeScanReport(e.stdout, rep)
	damage := damageCount(rep)
	summary := fmt.Sprintf("%s: %d records, %d operations", path, len(rep.Records), len(rep.Operations))
	if damage > 0 {
		noun := "problems"
		if damage == 1 {
			noun = "problem"
		}
		fmt.Fprintf(e.stdout, "%s, %d %s: the journal is damaged; salvage what reads with: idem journal salvage %s NEWPATH\n", summary, damage, noun, path)
		return exitDamaged
	}
	if torn := tornTail(rep); torn != nil {
		fmt.Fprintf(e.stdout, "%s, no problems (a torn tail of %d bytes, which the next writer cuts)\n", summary, torn.End-torn.Offset)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "%s, no problems\n", summary)
	return exitOK
}

// scanJournal reads the journal file at path read-only, without its lock,
// and reports a failure on stderr in one line: a path problem, a file that
// is not a journal (exitDamaged), a failed read. ok is false after one.
func scanJournal(e env, cmd, path string) (rep *fileengine.ScanReport, code int, ok bool) {
	if err := requireFile(path); err != nil {
		return nil, reportJournalError(e, cmd, path, err), false
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, reportJournalError(e, cmd, path, err), false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, reportJournalError(e, cmd, path, err), false
	}
	rep, err = fileengine.Scan(f, fi.Size())
	var corrupt *fileengine.CorruptError
	switch {
	case errors.As(err, &corrupt):
		if strings.HasPrefix(corrupt.Reason, fileengine.ReasonNotJournal) {
			fmt.Fprintf(e.stderr, "%s: %s is %s\n", cmd, path, corrupt.Reason)
		} else {
			fmt.Fprintf(e.stderr, "%s: %s is not a journal: %s\n", cmd, path, corrupt.Reason)
		}
		return nil, exitDamaged, false
	case err != nil:
		return nil, reportJournalError(e, cmd, path, fmt.Errorf("reading journal %s: %w", path, err)), false
	}
	return rep, exitOK, true
}

// damageCount counts the problems that are not a torn tail and the
// operations lost.
func damageCount(rep *fileengine.ScanReport) int {
	n := len(rep.Lost)
	for _, p := range rep.Problems {
		if !p.Torn {
			n++
		}
	}
	return n
}

// tornTail returns the report's torn tail, or nil.
func tornTail(rep *fileengine.ScanReport) *fileengine.Problem {
	for i, p := range rep.Problems {
		if p.Torn {
			return &rep.Problems[i]
		}
	}
	return nil
}

// writeScanReport writes one line per problem, lost operation and
// ambiguous operation.
func writeScanReport(w io.Writer, rep *fileengine.ScanReport) {
	for _, p := range rep.Problems {
		what := "damaged"
		if p.Torn {
			what = "torn tail (a write a crash cut short; the next writer cuts it)"
		}
		fmt.Fprintf(w, "offset %d: %s, %d bytes unreadable: %s%s\n", p.Offset, what, p.End-p.Offset, p.Reason, around(p))
	}
	for _, l := range rep.Lost {
		fmt.Fprintf(w, "offset %d: operation %s lost: %s\n", l.Offset, cell(l.ID), l.Reason)
	}
	for _, id := range rep.Ambiguous {
		fmt.Fprintf(w, "operation %s ambiguous: its completion may have been in the damaged bytes; it is kept pending, and a rerun resumes it under its key\n", cell(id))
	}
}

// around names the operations of the records either side of p.
func around(p fileengine.Problem) string {
	switch {
	case p.Before != "" && p.After != "":
		return fmt.Sprintf("; between records of operations %s and %s", cell(p.Before), cell(p.After))
	case p.Before != "":
		return fmt.Sprintf("; after a record of operation %s", cell(p.Before))
	case p.After != "":
		return fmt.Sprintf("; before a record of operation %s", cell(p.After))
	}
	return "; no record reads on either side"
}
