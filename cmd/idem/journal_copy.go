package main

// idem journal copy: every operation of one journal into another, to move
// a file journal into a shared PostgreSQL journal, or back.

import (
	"context"
	"fmt"
	"io"

	"github.com/idemkit/idem/journal"
)

func runJournalCopy(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal copy"
	fs := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s SRC DST\n\nCopies every operation of the journal SRC (read-only) into the journal DST,\neach a file (DST created if missing) or a postgres:// URL, as\n\"idem journal dump SRC | idem journal load DST\" would.\n", cmd)
		writeFlags(w, fs)
		fmt.Fprint(w, loadHelp)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(e, cmd, "want a SRC and a DST journal, got %d arguments", len(pos))
	}
	srcLoc, dstLoc := pos[0], pos[1]
	if srcLoc == dstLoc {
		return usageError(e, cmd, "SRC and DST are the same journal")
	}
	src, err := openForReading(ctx, e, srcLoc)
	if err != nil {
		return reportJournalError(e, cmd, srcLoc, err)
	}
	defer src.Close()
	ops, err := src.List(ctx, journal.ListAll)
	if err != nil {
		return reportJournalError(e, cmd, srcLoc, err)
	}
	dst, err := openDestination(ctx, e, dstLoc)
	if err != nil {
		return reportJournalError(e, cmd, dstLoc, err)
	}
	defer dst.Close()
	return writeOperations(ctx, e, cmd, dst, dstLoc, ops)
}
