package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/pgjournal"
)

var journalCommand = command{
	name:    "journal",
	summary: "list, show, settle, verify, salvage, copy or compact a journal",
	run:     runJournal,
}

// A journalAction is one subcommand of idem journal.
type journalAction struct {
	name    string
	args    string // the positional arguments, for usage
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

// journalActions are the subcommands of idem journal, in the order usage
// lists them. The listing ones are in journal_list.go.
var journalActions = []journalAction{
	listAction("ls", "every operation", journal.ListAll),
	listAction("pending", "pending operations whose key has not expired (what a rerun resumes)", journal.ListPending),
	listAction("expired", "pending operations whose key is older than its recorded lifetime (to reconcile by hand)", journal.ListExpired),
	listAction("completed", "done and rejected operations", journal.ListCompleted),
	{name: "show", args: "PATH ID", summary: "one operation in full, with its recorded response", run: runJournalShow},
	{name: "compact", args: "PATH", summary: "rewrite the journal with only its live operations", run: runJournalCompact},
	{name: "verify", args: "PATH", summary: "read the whole journal and report every damaged record", run: runJournalVerify},
	{name: "salvage", args: "SRC DST", summary: "copy every record that still reads into a new journal", run: runJournalSalvage},
	{name: "migrate", args: "URL", summary: "create or upgrade a shared PostgreSQL journal's tables", run: runJournalMigrate},
	{name: "settle", args: "PATH ID", summary: "record a stuck operation as done or rejected, or forget it (new key)", run: runJournalSettle},
	{name: "resend", args: "PATH", summary: "forget the refusals that applied nothing: the next run resends them (new keys)", run: runJournalResend},
	{name: "dump", args: "PATH", summary: "print every operation in full as JSON lines", run: runJournalDump},
	{name: "load", args: "PATH", summary: "write operations dumped as JSON lines (stdin) into a journal", run: runJournalLoad},
	{name: "copy", args: "SRC DST", summary: "copy every operation into another journal (file or postgres://)", run: runJournalCopy},
}

func runJournal(ctx context.Context, e env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "idem journal: no subcommand given")
		pointToHelp(e, "idem journal")
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		writeJournalUsage(e.stdout)
		return exitOK
	}
	for _, a := range journalActions {
		if a.name == args[0] {
			return a.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "idem journal: unknown subcommand %q\n", args[0])
	pointToHelp(e, "idem journal")
	return exitUsage
}

func writeJournalUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: idem journal <subcommand> [flags] PATH|URL [ID]\n\nSubcommands:\n")
	for _, a := range journalActions {
		fmt.Fprintf(w, "  %-9s %-8s %s\n", a.name, a.args, a.summary)
	}
	fmt.Fprint(w, `
A journal is a file PATH or a shared journal's postgres:// URL (its
#fragment is the namespace). ls, pending, expired, completed, show, dump,
verify and salvage open a file read-only: they take no lock, write nothing
to it, and may run while another process writes it; on a URL they, and
settle, create and migrate nothing (migrate does). compact, settle, load
and copy write: on a file they take its lock, so they fail (exit code 6)
while another process writes it. Run "idem journal <subcommand> -h" for
its flags.

`)
	writeExitCodes(w)
}

// openForReading opens the journal at path read-only, so that nothing in the
// file or beside it changes, and notes on stderr a torn tail it ignored.
func openForReading(ctx context.Context, e env, path string) (openedJournal, error) {
	if isShared(path) {
		return openShared(ctx, e, path, false, false)
	}
	j, err := filejournal.Open(path, filejournal.Options{
		ReadOnly: true,
		Now:      e.now,
		Logger:   warnLogger(e.stderr),
	})
	if err != nil {
		return nil, err
	}
	if n := j.Stats().Truncated; n > 0 {
		fmt.Fprintf(e.stderr, "idem: note: %s ends with %d bytes of a write a crash cut short; they are ignored (the next writer removes them)\n", path, n)
	}
	return j, nil
}

// warnLogger returns a logger of the journal's warnings (such as a torn
// tail cut) to w.
func warnLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// pathProblem says, in the words every command uses, what is wrong with a
// journal path that failed with err: a directory where the file should be,
// a directory that does not exist, no journal, no permission, a read-only
// file system. It returns "" for any other failure.
func pathProblem(path string, err error) string {
	if isShared(path) {
		return ""
	}
	fi, serr := os.Stat(path)
	switch {
	case serr == nil && fi.IsDir():
		return fmt.Sprintf("%s is a directory, not a journal", path)
	case errors.Is(err, fs.ErrNotExist):
		if dir := filepath.Dir(path); !exists(dir) {
			return fmt.Sprintf("no journal at %s: directory %s does not exist", path, dir)
		}
		return fmt.Sprintf("no journal at %s", path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("journal %s: permission denied", path)
	case errors.Is(err, syscall.EROFS):
		return fmt.Sprintf("journal %s: the file system is read-only", path)
	}
	return ""
}

// exists reports whether something is at path.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// requireFile returns an error matching fs.ErrNotExist if no file is at
// path: commands that only act on an existing journal check first, so that
// a writable open does not create one.
func requireFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: %w", path, syscall.EISDIR)
	}
	return nil
}

// reportJournalError explains a failure to open or use the journal at path
// on stderr and returns the exit code for it.
func reportJournalError(e env, cmd, path string, err error) int {
	if msg := pathProblem(path, err); msg != "" {
		fmt.Fprintf(e.stderr, "%s: %s\n", cmd, msg)
		return exitPath
	}
	var corrupt *filejournal.CorruptError
	switch {
	case errors.As(err, &corrupt) && corrupt.Offset == 0 && strings.HasPrefix(corrupt.Reason, fileengine.ReasonNotJournal):
		fmt.Fprintf(e.stderr, "%s: %s is %s\n", cmd, corrupt.Path, corrupt.Reason)
	case errors.As(err, &corrupt):
		fmt.Fprintf(e.stderr, "%s: journal %s is corrupt at offset %d: %s\n", cmd, corrupt.Path, corrupt.Offset, corrupt.Reason)
		fmt.Fprintf(e.stderr, "%s: the file was not changed; keep it for inspection: no writer will use it as it is\n", cmd)
		if !strings.HasSuffix(cmd, " verify") && !strings.HasSuffix(cmd, " salvage") {
			fmt.Fprintf(e.stderr, "%s: \"idem journal verify %s\" lists every damaged record; \"idem journal salvage %s NEW\" copies every record that still reads\n",
				cmd, path, path)
		}
	case errors.Is(err, filejournal.ErrLocked):
		fmt.Fprintf(e.stderr, "%s: journal %s is locked: another process has it open for writing; wait for it to finish\n", cmd, path)
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(e.stderr, "%s: no journal at %s\n", cmd, path)
	case errors.Is(err, pgjournal.ErrNotMigrated):
		fmt.Fprintf(e.stderr, "%s: no idem journal tables in %s (or older ones); nothing was created or changed.\n"+
			"%s: if this is the right database, run: idem journal migrate URL\n", cmd, displayLocation(path), cmd)
		return exitPath
	case errors.Is(err, pgjournal.ErrAsyncReplication):
		fmt.Fprintf(e.stderr, "%s: journal %s: %v\n", cmd, displayLocation(path), err)
		fmt.Fprintf(e.stderr, "%s: nothing was written; to accept the risk, add %s=true to the URL\n", cmd, allowAsyncParam)
		return exitFailure
	case errors.Is(err, errBadNamespace):
		return usageError(e, cmd, "%v", err)
	case errors.Is(err, journal.ErrUnavailable):
		// pgx lists each address it tried on a line of its own.
		msg := strings.Join(strings.Fields(err.Error()), " ")
		fmt.Fprintf(e.stderr, "%s: journal %s: the database did not answer: %s\n", cmd, displayLocation(path), msg)
	default:
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
	}
	return journalExitCode(err)
}
