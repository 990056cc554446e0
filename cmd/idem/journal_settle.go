package main

// idem journal settle: resolve a pending or expired operation by hand,
// after a person checked the server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

func runJournalSettle(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal settle"
	fs := newFlagSet(cmd)
	done := fs.String("done", "", "record the operation as done, with this response `STATUS`")
	rejected := fs.String("rejected", "", "record the operation as rejected, with this response `STATUS`")
	note := fs.String("note", "", "a note kept with the outcome")
	forget := fs.Bool("forget", false, "drop the operation from the journal: its next run mints a NEW key")
	understood := fs.Bool("i-understand-a-new-key", false, "confirm --forget")
	completed := fs.Bool("completed", false, "with --forget: forget an operation whose outcome is recorded")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH ID (--done STATUS | --rejected STATUS) [--note TEXT]\n", cmd)
		fmt.Fprintf(w, "       %s PATH ID --forget --i-understand-a-new-key [--completed]\n\n", cmd)
		fmt.Fprint(w, `Settles operation ID of the journal at PATH (a file, or a postgres:// URL),
pending or expired, once a person has checked on the server what became of it
(list them with "idem journal pending" and "idem journal expired"):

  --done STATUS      the server applied it; later runs answer STATUS from
                     the journal and send nothing
  --rejected STATUS  the server did not apply it and never will
  --forget           drop it from the journal. The next run of ID mints a
                     NEW Idempotency-Key: if the server did apply the
                     operation, that run applies it a second time. Needs
                     --i-understand-a-new-key.

The outcome is recorded as settled by hand, with the note, if any ("idem
journal show" prints both; no response carries them). Settle waits for a running send of the
operation (and, for a shared journal, for the machine holding it). It refuses
an unknown ID and an operation already done or rejected (exit code 1).
`)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(e, cmd, "want a journal PATH and an operation ID, got %d arguments", len(pos))
	}
	var s idem.Settlement
	chosen := 0
	for _, o := range []struct {
		value string
		state journal.State
	}{{*done, journal.StateDone}, {*rejected, journal.StateRejected}} {
		if o.value == "" {
			continue
		}
		chosen++
		status, err := strconv.Atoi(o.value)
		if err != nil || status < 100 || status > 999 {
			return usageError(e, cmd, "STATUS must be a response status, 100 to 999, not %q", o.value)
		}
		s.State, s.Status = o.state, status
	}
	if *forget {
		chosen++
		s.Forget, s.ForgetCompleted = true, *completed
	}
	switch {
	case chosen != 1:
		return usageError(e, cmd, "want exactly one of --done STATUS, --rejected STATUS or --forget")
	case *forget && !*understood:
		return usageError(e, cmd, "--forget makes the next run of the operation use a NEW key; add --i-understand-a-new-key to confirm")
	case *forget && *note != "":
		return usageError(e, cmd, "--note goes with --done or --rejected: a forgotten operation keeps nothing")
	case *completed && !*forget:
		return usageError(e, cmd, "--completed goes with --forget")
	}
	s.Note = *note
	path, id := pos[0], pos[1]
	j, err := openForWriting(ctx, e, path)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	defer j.Close()
	err = idem.Settle(ctx, j, id, s)
	switch {
	case errors.Is(err, journal.ErrNoSuchOperation):
		fmt.Fprintf(e.stderr, "%s: no operation %s in %s\n", cmd, cell(id), displayLocation(path))
		return exitFailure
	case errors.Is(err, journal.ErrAlreadyCompleted):
		fmt.Fprintf(e.stderr, "%s: operation %s in %s is already completed; nothing changed (to drop it anyway: --forget --i-understand-a-new-key --completed)\n",
			cmd, cell(id), displayLocation(path))
		return exitFailure
	case errors.Is(err, journal.ErrInvalidOperation):
		return usageError(e, cmd, "%v", err)
	case err != nil:
		return reportJournalError(e, cmd, path, err)
	}
	if s.Forget {
		fmt.Fprintf(e.stdout, "forgot %s in %s: its next run mints a new key\n", cell(id), displayLocation(path))
	} else {
		fmt.Fprintf(e.stdout, "settled %s in %s: %s %d\n", cell(id), displayLocation(path), s.State, s.Status)
	}
	return exitOK
}

// openForWriting opens the journal at loc for writing: a file journal that
// must exist already (a mistyped path is not a new journal), or a shared
// PostgreSQL journal whose tables must exist already (a mistyped database
// is not a new journal either). A file journal is locked while it is open, so this
// fails with filejournal.ErrLocked while another process writes it.
func openForWriting(ctx context.Context, e env, loc string) (openedJournal, error) {
	if isShared(loc) {
		return openShared(ctx, e, loc, false, true)
	}
	if err := requireFile(loc); err != nil {
		return nil, err
	}
	return openFileForWriting(e, loc)
}

// openFileForWriting opens (or creates) the file journal at path for
// writing, compacting only when asked.
func openFileForWriting(e env, path string) (*filejournal.Journal, error) {
	return filejournal.Open(path, filejournal.Options{
		Now:            e.now,
		CompactMinSize: -1,
		Logger:         warnLogger(e.stderr),
	})
}
