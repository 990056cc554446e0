package main

// idem journal salvage: copy every record of a damaged journal that still
// reads into a new journal, and say what was lost.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/idemkit/idem/internal/fileengine"
)

func runJournalSalvage(_ context.Context, e env, args []string) int {
	const cmd = "idem journal salvage"
	flags := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s SRC DST\n\n", cmd)
		fmt.Fprint(w, `Writes a new journal at DST holding every record of the journal at SRC
that still reads, records after damage included: past a damaged record it
looks, at every 8-byte boundary, for the next record whose checksums hold,
as recovery does to tell damage from a torn tail. Each operation is kept
with its key and its latest readable outcome. It then lists the problems
(as idem journal verify does) and the operations they cost: lost (a
completion was read whose intent, and so whose key, was not: reconcile it
by its ID) and ambiguous (kept pending, because its completion may have
been in the damaged bytes: safe, a rerun resumes it under its key).

SRC is opened read-only and never changed. DST must not exist: it is
written beside its final name, fsync'd and renamed into place, with SRC's
permissions. Stop the journal's writers, salvage, check DST (idem journal
ls DST), then move DST over SRC, keeping SRC for inspection.

It exits 0 once DST is written, 7 when SRC is not a journal at all (nothing
is written), 1 when DST exists or cannot be written.
`)
		writeFlags(w, flags)
	}
	pos, code, ok := parseFlags(flags, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(e, cmd, "want SRC and DST, got %d arguments", len(pos))
	}
	src, dst := pos[0], pos[1]
	if isShared(src) || isShared(dst) {
		return usageError(e, cmd, "a shared PostgreSQL journal has no file to salvage")
	}
	if exists(dst) {
		fmt.Fprintf(e.stderr, "%s: %s exists; salvage writes a new journal and never replaces a file\n", cmd, dst)
		return exitFailure
	}
	rep, code, ok := scanJournal(e, cmd, src)
	if !ok {
		return code
	}
	perm := fileengine.DefaultFileMode
	if fi, err := os.Stat(src); err == nil {
		perm = fi.Mode().Perm()
	}
	if err := fileengine.WriteSalvaged(dst, rep.Operations, perm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			fmt.Fprintf(e.stderr, "%s: %s exists; salvage writes a new journal and never replaces a file\n", cmd, dst)
			return exitFailure
		}
		// The destination is not a journal yet: say what failed in
		// writing it, not that there is no journal.
		fmt.Fprintf(e.stderr, "%s: writing %s: %v\n", cmd, dst, err)
		return exitFailure
	}
	writeScanReport(e.stdout, rep)
	fmt.Fprintf(e.stdout, "salvaged %s to %s: %d operations in %d records kept, %d lost, %d kept pending as ambiguous\n",
		src, dst, len(rep.Operations), recordsWritten(rep.Operations), len(rep.Lost), len(rep.Ambiguous))
	return exitOK
}

// recordsWritten counts the records of ops in a journal: an intent each,
// and a completion for each final one.
func recordsWritten(ops []fileengine.Record) int {
	n := 0
	for _, r := range ops {
		n++
		if r.State != fileengine.Pending {
			n++
		}
	}
	return n
}
