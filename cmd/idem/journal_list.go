package main

// idem journal ls, pending, expired and completed: a table of operations
// for people, or a JSON array for programs.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/pgjournal"
)

// listAction returns the journal subcommand name, which lists the
// operations of the listing which.
func listAction(name, what string, which journal.Listing) journalAction {
	a := journalAction{name: name, args: "PATH", summary: what}
	a.run = func(ctx context.Context, e env, args []string) int {
		return runJournalList(ctx, e, "idem journal "+name, what, which, args)
	}
	return a
}

func runJournalList(ctx context.Context, e env, cmd, what string, which journal.Listing, args []string) int {
	fs := newFlagSet(cmd)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH [--json]\n\nLists %s, oldest first, from the journal at PATH,\nwhich it opens read-only.\n", cmd, what)
		writeFlags(w, fs)
		fmt.Fprint(w, listFormatHelp)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(e, cmd, "want one journal PATH, got %d arguments", len(pos))
	}
	path := pos[0]
	j, err := openForReading(ctx, e, path)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	defer j.Close()
	ops, err := j.List(ctx, which)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	if pj, ok := j.(*pgjournal.Journal); ok && len(ops) == 0 {
		if code, unknown := unknownNamespace(ctx, e, cmd, path, pj); unknown {
			return code
		}
	}
	now := e.now()
	if *asJSON {
		out := make([]operationJSON, len(ops))
		for i, op := range ops {
			out[i] = summarize(op, now)
		}
		return writeJSON(e, cmd, out)
	}
	writeTable(e.stdout, ops, now)
	return exitOK
}

// unknownNamespace reports whether j's namespace holds no operation at
// all, and if so says so on stderr, naming the namespaces that do, and
// returns the exit code.
func unknownNamespace(ctx context.Context, e env, cmd, loc string, j *pgjournal.Journal) (int, bool) {
	names, err := j.Namespaces(ctx)
	if err != nil {
		return reportJournalError(e, cmd, loc, err), true
	}
	if slices.Contains(names, j.Namespace()) {
		return exitOK, false
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	switch {
	case len(names) == 0:
		fmt.Fprintf(e.stderr, "%s: no namespace %q in %s: the database holds no operation in any namespace\n", cmd, j.Namespace(), displayLocation(loc))
	default:
		fmt.Fprintf(e.stderr, "%s: no namespace %q in %s; its namespaces: %s (name one after #, percent-encoded)\n",
			cmd, j.Namespace(), displayLocation(loc), strings.Join(quoted, ", "))
	}
	return exitPath, true
}

const listFormatHelp = `
The table has the columns ID, STATE, KEY, CREATED, AGE, STATUS, METHOD and
URL. STATE is pending, expired (pending with a key older than the key
lifetime recorded with the operation, the server's retention when it was
begun: the server has forgotten the key, so resending could apply the
operation twice),
done or rejected. STATUS is the recorded response status, "-" while pending.
Values with control characters are printed Go-quoted.

With --json, the output is one JSON array of objects with these fields:
  id           string  the operation ID
  state        string  "pending", "done" or "rejected"
  expired      bool    pending with a key older than key_ttl
  key_ttl      string  how long the server keeps the key, as recorded
                       with the operation (e.g. "24h0m0s")
  key          string  the Idempotency-Key
  fingerprint  string  SHA-256 of method, URL and body, hex
  method, url  string  the request's
  created      string  when the key was minted, RFC 3339, UTC
  completed    string  when the outcome was recorded, or null
  status       number  the recorded response status, or null
`

// operationJSON is the --json form of an operation. Its fields are part of
// the command's interface: add, never rename or remove.
type operationJSON struct {
	ID          string     `json:"id"`
	State       string     `json:"state"`
	Expired     bool       `json:"expired"`
	KeyTTL      string     `json:"key_ttl"`
	Key         string     `json:"key"`
	Fingerprint string     `json:"fingerprint"`
	Method      string     `json:"method"`
	URL         string     `json:"url"`
	Created     time.Time  `json:"created"`
	Completed   *time.Time `json:"completed"`
	Status      *int       `json:"status"`
}

// summarize returns the JSON form of op at now.
func summarize(op journal.Operation, now time.Time) operationJSON {
	s := operationJSON{
		ID:          op.ID,
		State:       op.State.String(),
		Expired:     op.Expired(now),
		KeyTTL:      op.KeyTTL.String(),
		Key:         op.Key,
		Fingerprint: op.Fingerprint.String(),
		Method:      op.Method,
		URL:         op.URL,
		Created:     op.Created.UTC(),
	}
	if op.State != journal.StatePending {
		completed, status := op.Completed.UTC(), op.Status
		s.Completed, s.Status = &completed, &status
	}
	return s
}

// writeJSON writes v as indented JSON to stdout.
func writeJSON(e env, cmd string, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: encoding JSON: %v\n", cmd, err)
		return exitFailure
	}
	b = append(b, '\n')
	if _, err := e.stdout.Write(b); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}

// writeTable writes ops as an aligned table.
func writeTable(w io.Writer, ops []journal.Operation, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKEY\tCREATED\tAGE\tSTATUS\tMETHOD\tURL")
	for _, op := range ops {
		status := "-"
		if op.State != journal.StatePending {
			status = strconv.Itoa(op.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(op.ID), displayState(op, now), cell(op.Key), op.Created.UTC().Format(time.RFC3339),
			age(now, op.Created), status, cell(op.Method), cell(op.URL))
	}
	tw.Flush()
}

// displayState is op's state for people: "expired" for a pending operation
// whose key is older than its KeyTTL.
func displayState(op journal.Operation, now time.Time) string {
	if op.Expired(now) {
		return "expired"
	}
	return op.State.String()
}

// age is how long before now t was, to the second.
func age(now, t time.Time) string {
	return now.Sub(t).Round(time.Second).String()
}

// cell returns s as it can be printed in a table or a line of text: as it
// is when it is printable UTF-8 without tabs, Go-quoted otherwise, so that
// an operation ID or URL cannot break the layout or send escape sequences
// to a terminal.
func cell(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
