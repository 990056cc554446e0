package main

// idem journal dump and load: a journal's operations as JSON lines, in
// full, to move them between journals (file or PostgreSQL) or keep them.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// dumpedOperation is one line of a dump: every field of an operation.
// Its fields are part of the command's interface: add, never rename or
// remove.
type dumpedOperation struct {
	ID              string      `json:"id"`
	Key             string      `json:"key"`
	Fingerprint     string      `json:"fingerprint"`
	Method          string      `json:"method"`
	URL             string      `json:"url"`
	Created         time.Time   `json:"created"`
	KeyTTL          string      `json:"key_ttl,omitempty"`
	State           string      `json:"state"`
	Completed       *time.Time  `json:"completed,omitempty"`
	Status          *int        `json:"status,omitempty"`
	Header          http.Header `json:"header,omitempty"`
	Body            []byte      `json:"body,omitempty"`
	BodyTruncated   bool        `json:"body_truncated,omitempty"`
	HeaderTruncated bool        `json:"header_truncated,omitempty"`
	Summarized      bool        `json:"summarized,omitempty"`
	Applied         bool        `json:"applied,omitempty"`
	KeyReused       string      `json:"key_reused,omitempty"`
	Settled         bool        `json:"settled,omitempty"`
	SettledNote     string      `json:"settled_note,omitempty"`
	Unrecorded      []string    `json:"unrecorded,omitempty"`
	// Base64 names the fields among id, key, method, url and header
	// (its names and values) that are written in base64 because they are
	// not valid UTF-8, which JSON cannot carry as it is.
	Base64 []string `json:"base64,omitempty"`
}

const dumpFormatHelp = `
Each line is one JSON object, oldest operation first:
  id, key, method, url  string  as journaled
  fingerprint           string  SHA-256 of method, URL and body, hex
  created               string  when the key was minted, RFC 3339 to the ns
  key_ttl               string  how long the server keeps the key, as
                                recorded with the operation ("24h0m0s");
                                absent, in a dump of an earlier release,
                                it loads as 24h
  state                 string  "pending", "done" or "rejected"
  completed, status             when the outcome was recorded, and its
                                status (absent while pending)
  header                object  the recorded response header, name: [values]
  body                  string  the recorded response body, base64
  body_truncated, header_truncated, summarized  bool, absent when false
  applied               bool    the answer said an earlier request applied it
  key_reused            string  the server's code refusing a key it holds
                                for another request
  settled, settled_note         recorded by hand (idem journal settle),
                                with its note
  unrecorded            array   header fields the secrets rule left out
                                (each of these is absent when empty; in a
                                dump of an earlier release they are header
                                fields named Idem-*, and load as these)
  base64                array   the fields among id, key, method, url and
                                header (names and values) written in
                                base64 because they are not valid UTF-8
`

func dumped(op journal.Operation) dumpedOperation {
	d := dumpedOperation{
		ID: op.ID, Key: op.Key, Fingerprint: op.Fingerprint.String(), Method: op.Method, URL: op.URL,
		Created: op.Created.UTC(), KeyTTL: op.KeyTTL.String(), State: op.State.String(),
		Header: op.Header, Body: op.Body,
		BodyTruncated: op.BodyTruncated, HeaderTruncated: op.HeaderTruncated, Summarized: op.Summarized,
		Applied: op.Applied, KeyReused: op.KeyReused, Settled: op.Settled, SettledNote: op.SettledNote, Unrecorded: op.Unrecorded,
	}
	if op.State != journal.StatePending {
		completed, status := op.Completed.UTC(), op.Status
		d.Completed, d.Status = &completed, &status
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"id", &d.ID}, {"key", &d.Key}, {"method", &d.Method}, {"url", &d.URL}} {
		if !utf8.ValidString(*f.v) {
			*f.v = base64.StdEncoding.EncodeToString([]byte(*f.v))
			d.Base64 = append(d.Base64, f.name)
		}
	}
	if !validHeader(d.Header) {
		h := make(http.Header, len(d.Header))
		for name, values := range d.Header {
			enc := make([]string, len(values))
			for i, v := range values {
				enc[i] = base64.StdEncoding.EncodeToString([]byte(v))
			}
			h[base64.StdEncoding.EncodeToString([]byte(name))] = enc
		}
		d.Header = h
		d.Base64 = append(d.Base64, "header")
	}
	return d
}

// validHeader reports whether every name and value of h is valid UTF-8.
func validHeader(h http.Header) bool {
	for name, values := range h {
		if !utf8.ValidString(name) {
			return false
		}
		for _, v := range values {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// decodeBase64 decodes the fields d.Base64 names, in place.
func (d *dumpedOperation) decodeBase64() error {
	dec := func(s string) (string, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	}
	for _, name := range d.Base64 {
		var v *string
		switch name {
		case "id":
			v = &d.ID
		case "key":
			v = &d.Key
		case "method":
			v = &d.Method
		case "url":
			v = &d.URL
		case "header":
			h := make(http.Header, len(d.Header))
			for name, values := range d.Header {
				n, err := dec(name)
				if err != nil {
					return fmt.Errorf("header name %q: %w", name, err)
				}
				out := make([]string, len(values))
				for i, value := range values {
					if out[i], err = dec(value); err != nil {
						return fmt.Errorf("header %q: %w", n, err)
					}
				}
				h[n] = out
			}
			d.Header = h
			continue
		default:
			return fmt.Errorf("base64: unknown field %q", name)
		}
		s, err := dec(*v)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*v = s
	}
	return nil
}

// operation returns the operation d describes.
func (d dumpedOperation) operation() (journal.Operation, error) {
	if err := d.decodeBase64(); err != nil {
		return journal.Operation{}, err
	}
	op := journal.Operation{
		ID: d.ID, Key: d.Key, Method: d.Method, URL: d.URL, Created: d.Created.UTC(),
		Body:          d.Body,
		BodyTruncated: d.BodyTruncated, HeaderTruncated: d.HeaderTruncated, Summarized: d.Summarized,
	}
	// A dump of an earlier release holds the marks as header fields.
	var m journalkit.Marks
	op.Header, m = journalkit.SplitMarks(d.Header)
	op.Applied, op.KeyReused = d.Applied || m.Applied, cmp.Or(d.KeyReused, m.KeyReused)
	op.Settled, op.SettledNote = d.Settled || m.Settled, cmp.Or(d.SettledNote, m.SettledNote)
	op.Unrecorded = d.Unrecorded
	if op.Unrecorded == nil {
		op.Unrecorded = m.Unrecorded
	}
	fp, err := hex.DecodeString(d.Fingerprint)
	if err != nil || len(fp) != len(op.Fingerprint) {
		return op, fmt.Errorf("fingerprint %q is not %d hexadecimal bytes", d.Fingerprint, len(op.Fingerprint))
	}
	copy(op.Fingerprint[:], fp)
	if d.ID == "" || d.Key == "" || d.Created.IsZero() {
		return op, errors.New("id, key and created are required")
	}
	op.KeyTTL = idem.DefaultKeyTTL
	if d.KeyTTL != "" {
		if op.KeyTTL, err = time.ParseDuration(d.KeyTTL); err != nil || op.KeyTTL <= 0 {
			return op, fmt.Errorf("key_ttl %q is not a positive duration", d.KeyTTL)
		}
	}
	switch d.State {
	case "pending":
		op.State = journal.StatePending
		if d.Completed != nil || d.Status != nil || d.Header != nil || d.Body != nil {
			return op, errors.New("a pending operation has no outcome")
		}
		return op, nil
	case "done":
		op.State = journal.StateDone
	case "rejected":
		op.State = journal.StateRejected
	default:
		return op, fmt.Errorf("state %q is not pending, done or rejected", d.State)
	}
	if d.Completed == nil || d.Status == nil {
		return op, fmt.Errorf("a %s operation needs completed and status", d.State)
	}
	op.Completed, op.Status = d.Completed.UTC(), *d.Status
	return op, nil
}

func runJournalDump(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal dump"
	fs := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH\n\nPrints every operation of the journal at PATH (a file, read-only, or a\npostgres:// URL) in full, one JSON object a line, for idem journal load.\n", cmd)
		writeFlags(w, fs)
		fmt.Fprint(w, dumpFormatHelp)
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
	ops, err := j.List(ctx, journal.ListAll)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	w := bufio.NewWriter(e.stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, op := range ops {
		if err := enc.Encode(dumped(op)); err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return exitFailure
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}

const loadHelp = `
Each operation is written as a run would write it, through the journal's
claim (so a running send of the same ID is waited for): its intent with its
key, fingerprint and created time, then its outcome with its completed
time, status, header and body. Nothing is sent anywhere.

An ID the destination already holds is left as it is when it is the same
operation (same key, fingerprint, created time, state and outcome): loading
twice changes nothing. A pending operation there that the input has
completed, under the same key and fingerprint, gets the outcome. Any other
operation under an existing ID is a conflict: it is reported on stderr, not
written, and the others are still written; the exit code is then 1.
A summary (compaction kept only ID, key, fingerprint, state and status) is
written as an outcome without header and body.
`

func runJournalLoad(ctx context.Context, e env, args []string) int {
	const cmd = "idem journal load"
	fs := newFlagSet(cmd)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s PATH < dump.jsonl\n\nWrites the operations of a dump (idem journal dump) read from stdin into the\njournal at PATH: a file, created if missing, or a postgres:// URL.\n", cmd)
		writeFlags(w, fs)
		fmt.Fprint(w, loadHelp)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(e, cmd, "want one journal PATH, got %d arguments", len(pos))
	}
	// Read the whole input first: a malformed line writes nothing.
	var ops []journal.Operation
	dec := json.NewDecoder(e.stdin)
	dec.DisallowUnknownFields()
	for line := 1; ; line++ {
		var d dumpedOperation
		err := dec.Decode(&d)
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: input operation %d: %v; nothing was written\n", cmd, line, err)
			return exitFailure
		}
		op, err := d.operation()
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: input operation %d (%s): %v; nothing was written\n", cmd, line, cell(d.ID), err)
			return exitFailure
		}
		ops = append(ops, op)
	}
	path := pos[0]
	dst, err := openDestination(ctx, e, path)
	if err != nil {
		return reportJournalError(e, cmd, path, err)
	}
	defer dst.Close()
	return writeOperations(ctx, e, cmd, dst, path, ops)
}

// openDestination opens the journal at loc for writing, creating a missing
// journal file.
func openDestination(ctx context.Context, e env, loc string) (openedJournal, error) {
	if isShared(loc) {
		return openShared(ctx, e, loc, true, true)
	}
	return openFileForWriting(e, loc)
}

// writeOperations writes ops into dst (see loadHelp), reports what it did,
// and returns the exit code.
func writeOperations(ctx context.Context, e env, cmd string, dst journal.Journal, loc string, ops []journal.Operation) int {
	var written, same, conflicts int
	for _, op := range ops {
		wrote, err := loadOperation(ctx, dst, op)
		switch {
		case errors.Is(err, errConflict):
			conflicts++
			fmt.Fprintf(e.stderr, "%s: %s: %v; not written\n", cmd, cell(op.ID), err)
		case err != nil:
			fmt.Fprintf(e.stderr, "%s: %s: %v\n", cmd, cell(op.ID), err)
			fmt.Fprintf(e.stderr, "%s: stopped after writing %d operations\n", cmd, written)
			return reportJournalError(e, cmd, loc, err)
		case wrote:
			written++
		default:
			same++
		}
	}
	fmt.Fprintf(e.stdout, "wrote %d operations into %s; %d were there already; %d conflicts\n",
		written, displayLocation(loc), same, conflicts)
	if conflicts > 0 {
		return exitFailure
	}
	return exitOK
}

// errConflict: the destination holds another operation under the ID.
var errConflict = errors.New("the journal holds a different operation under this ID")

// loadOperation writes op into j under a claim, and reports whether it
// wrote anything.
func loadOperation(ctx context.Context, j journal.Journal, op journal.Operation) (bool, error) {
	claim, err := j.Claim(ctx, op.ID)
	if err != nil {
		return false, err
	}
	defer claim.Release()
	final := op.State != journal.StatePending
	outcome := op
	outcome.Summarized = false // only compaction summarizes; a summary is an outcome without header and body
	if have, ok := claim.Operation(); ok {
		switch {
		case have.Key != op.Key || have.Fingerprint != op.Fingerprint || !have.Created.Equal(op.Created) || have.KeyTTL != op.KeyTTL:
			return false, fmt.Errorf("%w (key %s, created %s; the input has key %s, created %s)", errConflict,
				have.Key, have.Created.UTC().Format(time.RFC3339Nano), op.Key, op.Created.UTC().Format(time.RFC3339Nano))
		case have.State == op.State && (!final || have.Status == op.Status && have.Completed.Equal(op.Completed)):
			return false, nil
		case have.State == journal.StatePending && final:
			return true, claim.Complete(ctx, outcome)
		}
		return false, fmt.Errorf("%w (it is %s, status %d; the input's is %s, status %d)", errConflict,
			have.State, have.Status, op.State, op.Status)
	}
	intent := journal.Operation{ID: op.ID, Key: op.Key, Fingerprint: op.Fingerprint, Method: op.Method, URL: op.URL,
		Created: op.Created, KeyTTL: op.KeyTTL, State: journal.StatePending}
	if err := claim.Begin(ctx, intent); err != nil {
		return false, err
	}
	if final {
		if err := claim.Complete(ctx, outcome); err != nil {
			return true, fmt.Errorf("intent written, outcome not: %w", err)
		}
	}
	return true, nil
}
