package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/idemkit/idem"
)

// Exit codes. The package documentation lists them for users; keep the two
// in step.
const (
	// exitOK: the command did what it was asked; for send, the operation
	// is done.
	exitOK = 0
	// exitFailure: any error not listed below (a missing journal file, an
	// unreadable -d @file, an I/O error).
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
	// exitJournal: the journal is locked by another process, or corrupt,
	// or its database did not answer.
	exitJournal = 6
	// exitDamaged: journal verify found damage that is not a torn tail,
	// or an operation it costs; verify or salvage found no journal at all.
	exitDamaged = 7
)

// writeExitCodes documents the exit codes for usage text.
func writeExitCodes(w io.Writer) {
	fmt.Fprint(w, `Exit codes:
  0  success; for send, the operation is done; for demo, idem was exact
  1  other error (missing journal file, unreadable input, I/O);
     for demo, a duplicate or lost charge with idem
  2  usage: bad flags, arguments or command
  3  send: rejected, the server answered without applying the request
  4  send: outcome unknown, the operation stays pending; rerun to resume
  5  send: refused before sending (operation ID reused, key expired)
  6  journal locked by another process, or corrupt, or its database down
  7  journal verify: damaged (not a torn tail); verify, salvage: not a journal
`)
}

// journalExitCode returns exitJournal for a locked or corrupt journal, or
// one whose database did not answer, and exitFailure for any other error.
func journalExitCode(err error) int {
	if errors.Is(err, idem.ErrLocked) || errors.Is(err, idem.ErrCorrupt) || errors.Is(err, idem.ErrJournalUnavailable) {
		return exitJournal
	}
	return exitFailure
}
