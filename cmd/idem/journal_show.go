package main

// idem journal show: one operation in full, with the response it recorded.

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem/journal"
)

func runJournalShow(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal show"
	fs := newFlagSet(cmd)
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH ID [--json]\n\nShows the operation ID of the journal at PATH in full, read-only.\n", cmd)
		writeFlags(w, fs)
		fmt.Fprint(w, showFormatHelp)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return usageError(e, cmd, "want a journal PATH and an operation ID, got %d arguments", len(pos))
	}
	path, id := pos[0], pos[1]
	j, err := openForReading(ctx, e, path)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	defer j.Close()
	op, found, err := j.Lookup(ctx, id)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	if !found {
		fmt.Fprintf(e.stderr, "%s: no operation %s in %s\n", cmd, cell(id), path)
		return exitFailure
	}
	now := e.now()
	if *asJSON {
		return writeJSON(e, cmd, detail(op, now))
	}
	writeOperation(e.stdout, op, now)
	return exitOK
}

const showFormatHelp = `
With --json, the output is one JSON object with the fields of
"idem journal ls --json" and one more, response: null while the operation
is pending, otherwise an object with these fields:
  header         object  the recorded response header, name to list of values
  header_truncated bool  true when some header fields were not kept: the
                         header was larger than the client's recording
                         limit, or compaction summarized the operation
  body_recorded  bool    false when the body was not kept: it was larger
                         than the client's recording limit, or compaction
                         summarized the operation (see summarized)
  summarized     bool    true when compaction kept only a summary of the
                         operation (its status, without header and body)
                         once its outcome was older than the key retention
  body_size      number  the recorded body's size in bytes
  body_encoding  string  "text" (body is the UTF-8 text) or "base64"
  body           string  the recorded body, "" when empty or not recorded
`

// operationDetailJSON is the --json form of one operation in full.
type operationDetailJSON struct {
	operationJSON
	Response *responseJSON `json:"response"`
}

// responseJSON is the recorded response of a completed operation.
type responseJSON struct {
	Header          http.Header `json:"header"`
	HeaderTruncated bool        `json:"header_truncated"`
	BodyRecorded    bool        `json:"body_recorded"`
	Summarized      bool        `json:"summarized"`
	Applied         bool        `json:"applied,omitempty"`
	KeyReused       string      `json:"key_reused,omitempty"`
	Settled         bool        `json:"settled,omitempty"`
	SettledNote     string      `json:"settled_note,omitempty"`
	Unrecorded      []string    `json:"unrecorded,omitempty"`
	BodySize        int         `json:"body_size"`
	BodyEncoding    string      `json:"body_encoding"`
	Body            string      `json:"body"`
}

func detail(op journal.Operation, now time.Time) operationDetailJSON {
	d := operationDetailJSON{operationJSON: summarize(op, now)}
	if op.State == journal.StatePending {
		return d
	}
	r := &responseJSON{
		Header:          op.Header,
		HeaderTruncated: op.HeaderTruncated,
		BodyRecorded:    !op.BodyTruncated,
		Summarized:      op.Summarized,
		Applied:         op.Applied,
		KeyReused:       op.KeyReused,
		Settled:         op.Settled,
		SettledNote:     op.SettledNote,
		Unrecorded:      op.Unrecorded,
		BodySize:        len(op.Body),
		BodyEncoding:    "text",
		Body:            string(op.Body),
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if !utf8.Valid(op.Body) {
		r.BodyEncoding, r.Body = "base64", base64.StdEncoding.EncodeToString(op.Body)
	}
	d.Response = r
	return d
}

// writeOperation writes op for people: its fields, then the recorded
// response's header and body.
func writeOperation(w io.Writer, op journal.Operation, now time.Time) {
	field := func(name, value string) { fmt.Fprintf(w, "%-12s %s\n", name+":", value) }
	field("ID", cell(op.ID))
	state := op.State.String()
	switch {
	case op.Expired(now):
		state += ", expired: the key is older than " + op.KeyTTL.String() +
			"; resending could apply it twice, so check with the server whether it was applied"
	case op.State == journal.StatePending:
		state += ": no outcome recorded; rerunning its command resumes it under this key"
	}
	field("State", state)
	field("Key", cell(op.Key))
	field("Fingerprint", op.Fingerprint.String())
	field("Request", cell(op.Method)+" "+cell(op.URL))
	field("Created", fmt.Sprintf("%s (%s ago)", op.Created.UTC().Format(time.RFC3339Nano), age(now, op.Created)))
	if op.State == journal.StatePending {
		return
	}
	field("Completed", fmt.Sprintf("%s (%s ago)", op.Completed.UTC().Format(time.RFC3339Nano), age(now, op.Completed)))
	field("Status", fmt.Sprintf("%d %s", op.Status, http.StatusText(op.Status)))
	switch {
	case op.BodyTruncated:
		field("Body", "not recorded: "+whyBodyNotRecorded(op))
	case len(op.Body) == 0:
		field("Body", "empty")
	case printable(op.Body):
		field("Body", fmt.Sprintf("%d bytes, text", len(op.Body)))
	default:
		field("Body", fmt.Sprintf("%d bytes, binary, shown in base64", len(op.Body)))
	}
	if op.Applied {
		field("Applied", "the answer says an earlier request applied it")
	}
	if op.KeyReused != "" {
		field("Key reused", "the server holds this key for another request ("+cell(op.KeyReused)+")")
	}
	if op.Settled {
		settled := "by hand"
		if op.SettledNote != "" {
			settled += ": " + cell(op.SettledNote)
		}
		field("Settled", settled)
	}
	if op.HeaderTruncated {
		field("Header", "partly recorded: "+whyHeaderTruncated(op))
	}
	if len(op.Unrecorded) > 0 {
		field("Unrecorded", cell(strings.Join(op.Unrecorded, ", "))+" (left out by the secrets rule)")
	}
	if len(op.Header) > 0 {
		fmt.Fprintln(w)
		for _, name := range slices.Sorted(maps.Keys(op.Header)) {
			for _, v := range op.Header[name] {
				fmt.Fprintf(w, "%s: %s\n", cell(name), cell(v))
			}
		}
	}
	if len(op.Body) == 0 {
		return
	}
	fmt.Fprintln(w)
	if printable(op.Body) {
		w.Write(op.Body)
		if op.Body[len(op.Body)-1] != '\n' {
			fmt.Fprintln(w)
		}
		return
	}
	enc := base64.StdEncoding.EncodeToString(op.Body)
	for len(enc) > 76 {
		fmt.Fprintln(w, enc[:76])
		enc = enc[76:]
	}
	fmt.Fprintln(w, enc)
}

// whyBodyNotRecorded says why a completed operation's body is not in the
// journal.
func whyBodyNotRecorded(op journal.Operation) string {
	if op.Summarized {
		return "compaction summarized the operation once its outcome was older than the key retention"
	}
	return "larger than the client's recording limit"
}

// whyHeaderTruncated says why some of a completed operation's header
// fields are not in the journal.
func whyHeaderTruncated(op journal.Operation) string {
	if op.Summarized {
		return "compaction summarized the operation once its outcome was older than the key retention"
	}
	return "larger than the client's recording limit; the fields that fit are shown"
}

// printable reports whether b is UTF-8 text that is safe to write to a
// terminal: printable characters, spaces, tabs and line ends.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	return strings.IndexFunc(string(b), func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t'
	}) < 0
}
