package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// Exit codes. The package documentation lists them for users; keep the two
// in step.
const (
	// exitOK: the command did what it was asked; for send, the operation
	// is done.
	exitOK = 0
	// exitFailure: any error not listed below (an unreadable -d @file, an
	// I/O error).
	exitFailure = 1
	// exitUsage: bad flags, arguments or subcommand.
	exitUsage = 2
	// exitRejected: send's operation was rejected: the server gave a final
	// answer that did not apply it.
	exitRejected = 3
	// exitUnknown: send stopped before a final answer; the operation stays
	// pending in the journal and rerunning the same command resumes it.
	exitUnknown = 4
	// exitRefused: send refused the operation before sending anything
	// (its ID was used for a different request, or its key expired).
	exitRefused = 5
	// exitJournal: the journal is locked by another process, or its
	// database did not answer: wait, and run the command again.
	exitJournal = 6
	// exitDamaged: the journal is corrupt, or not a journal at all; for
	// verify, damage that is not a torn tail, or an operation it costs.
	exitDamaged = 7
	// exitPath: the path names no journal: nothing there, a directory, a
	// directory that does not exist, no permission, a read-only file
	// system (pathProblem).
	exitPath = 8
)

// writeExitCodes documents the exit codes for usage text.
func writeExitCodes(w io.Writer) {
	fmt.Fprint(w, `Exit codes:
  0  success; for send, the operation is done; for demo, idem was exact
  1  other error (unreadable input, I/O); for demo, a duplicate or lost
     charge with idem
  2  usage: bad flags, arguments or command
  3  send: rejected, the server answered without applying the request
  4  send: outcome unknown, the operation stays pending; rerun to resume
  5  send: refused before sending (operation ID reused, key expired)
  6  journal locked by another process, or its database down
  7  journal corrupt or not a journal; verify: damage (not a torn tail)
  8  no journal at the path: missing, a directory, no permission, read-only
`)
}

// journalExitCode returns exitJournal for a locked or corrupt journal, or
// one whose database did not answer, and exitFailure for any other error.
func journalExitCode(err error) int {
	switch {
	case errors.Is(err, journal.ErrCorrupt):
		return exitDamaged
	case errors.Is(err, filejournal.ErrLocked) || errors.Is(err, journal.ErrUnavailable):
		return exitJournal
	}
	return exitFailure
}
