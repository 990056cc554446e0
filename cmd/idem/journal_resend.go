package main

// idem journal resend: forget the refusals that applied nothing, so that
// the next run sends them again under new keys.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/idemkit/idem/journal"
)

func runJournalResend(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal resend"
	fs := newFlagSet(cmd)
	statuses := fs.String("status", "", "only the refusals with these `STATUSES`, comma-separated (401,403)")
	dryRun := fs.Bool("dry-run", false, "list what would be forgotten, and change nothing")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH [--status 401,403] [--dry-run]\n\n", cmd)
		fmt.Fprint(w, `Forgets every operation of the journal at PATH (a file, or a postgres:// URL)
that the server refused without applying it: rejected with a 4xx other than
408, 409 and 429, and not settled by hand. The next run of each sends it
again, under a NEW key: do this once the cause (an expired token, a bad
field) is fixed. A redirect, a 5xx and anything that may have applied are
never chosen. A library caller does the same with BatchOptions.Resend.
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
	only := map[int]bool{}
	for _, s := range strings.Split(*statuses, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 400 || n > 499 {
			return usageError(e, cmd, "--status takes 4xx statuses, not %q", s)
		}
		only[n] = true
	}
	path := pos[0]
	j, err := openForWriting(ctx, e, path)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	defer j.Close()
	f, ok := j.(journal.Forgetter)
	if !ok {
		fmt.Fprintf(e.stderr, "%s: journal %s cannot forget operations\n", cmd, displayLocation(path))
		return exitFailure
	}
	ops, err := j.List(ctx, journal.ListCompleted)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	n := 0
	for _, op := range ops {
		if !op.RefusedWithoutEffect() || len(only) > 0 && !only[op.Status] {
			continue
		}
		if !*dryRun {
			if err := f.ForgetCompleted(ctx, op.ID, op.Key); err != nil {
				return reportJournalError(e, cmd, path, err)
			}
		}
		n++
		fmt.Fprintf(e.stdout, "%s\trejected %d\n", cell(op.ID), op.Status)
	}
	switch {
	case *dryRun:
		fmt.Fprintf(e.stdout, "%d refusals would be forgotten in %s; nothing changed\n", n, displayLocation(path))
	default:
		fmt.Fprintf(e.stdout, "forgot %d refusals in %s: their next run sends them under new keys\n", n, displayLocation(path))
	}
	return exitOK
}
