package main

// idem journal compact: rewrite a journal with only its live operations.

import (
	"context"
	"fmt"
	"io"

	"github.com/idemkit/idem/filejournal"
)

func runJournalCompact(_ context.Context, e env, args []string) int {
	const cmd = "idem journal compact"
	fs := newFlagSet(cmd)
	forget := fs.Duration("forget-after", 0, "drop completed operations recorded longer ago, summaries included (0: never)")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH [--forget-after 0]\n\n", cmd)
		fmt.Fprint(w, `Rewrites the journal at PATH with only its live operations: pending ones
(expired included: they wait for a person) and completed ones recorded less
than their key lifetime ago (the server's retention, recorded with each
operation), whole. Completed operations recorded longer ago keep a
summary without their response header and body, so their IDs are still
answered and never sent again, until --forget-after. It takes the journal's
lock, so it fails while another process writes the journal. A torn tail
left by a crash is cut first.
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
	if *forget < 0 {
		return usageError(e, cmd, "--forget-after must not be negative")
	}
	path := pos[0]
	if isShared(path) {
		return usageError(e, cmd, "a shared PostgreSQL journal has no file to compact; its rows are deleted with SQL")
	}
	// Opening for writing creates a missing journal; compacting one that
	// is not there is a mistake in the path.
	if err := requireFile(path); err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	j, err := filejournal.Open(path, filejournal.Options{
		ForgetAfter:    *forget,
		Now:            e.now,
		CompactMinSize: -1, // only the compaction asked for
		Logger:         warnLogger(e.stderr),
	})
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	before := j.Stats()
	err = j.Compact()
	after := j.Stats()
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	fmt.Fprintf(e.stdout, "compacted %s: %d of %d operations kept, %d records in %d bytes (was %d records in %d bytes)\n",
		path, after.Operations, before.Operations, after.Records, after.FileSize, before.Records, before.FileSize)
	return exitOK
}
