package main

// idem journal migrate: create or upgrade a shared journal's tables.

import (
	"context"
	"fmt"
	"io"

	"github.com/idemkit/idem/pgjournal"
)

func runJournalMigrate(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal migrate"
	fs := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s URL\n\n", cmd)
		fmt.Fprintf(w, `Creates the tables of the shared PostgreSQL journal at URL (postgres://...),
or upgrades them to schema version %d. Clients and the other commands do
this themselves when they open the journal; run it on its own where the
machines of a fleet may not change the schema (pgjournal.Options.NoMigrate).
It is safe to run again, and from several machines at once.
`, pgjournal.SchemaVersion)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(e, cmd, "want one journal URL, got %d arguments", len(pos))
	}
	loc := pos[0]
	if !isShared(loc) {
		return usageError(e, cmd, "%s is not a postgres:// URL; a journal file needs no migration", loc)
	}
	j, err := openShared(ctx, e, loc, true, true)
	if err != nil {
		return reportJournalError(e, cmd, loc, err)
	}
	j.Close()
	fmt.Fprintf(e.stdout, "%s: %s is at schema version %d\n", cmd, displayLocation(loc), pgjournal.SchemaVersion)
	return exitOK
}
