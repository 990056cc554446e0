package main

// How idem send reports an operation that did not end done: rejected,
// unknown, or refused before sending.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/journal"
)

// reportNotDone explains err, from Client.Do, and returns its exit code. A
// rejection's body still goes to stdout.
func reportNotDone(e env, cmd string, o sendOptions, j journal.Journal, req *http.Request, err error) int {
	var oe *idem.OutcomeError
	switch {
	case errors.As(err, &oe) && oe.Outcome == idem.OutcomeRejected:
		return reportRejected(e, cmd, o, oe)
	case errors.As(err, &oe):
		return reportUnknown(e, cmd, o, oe)
	case errors.Is(err, idem.ErrMismatch):
		fmt.Fprintf(e.stderr, "%s: refused, nothing sent: %v\n", cmd, err)
		fmt.Fprintf(e.stderr, "%s: operation %s was first sent %s; a new request needs a new --op\n", cmd, cell(o.op), difference(j, o.op, req))
		return exitRefused
	case errors.Is(err, idem.ErrKeyExpired):
		fmt.Fprintf(e.stderr, "%s: refused, nothing sent: %v\n", cmd, err)
		fmt.Fprintf(e.stderr, "%s: the server keeps keys for %s (recorded with the operation when it was first sent), so a resend could apply the request twice: check with the server whether operation %s was applied, and send anything still needed under a new --op\n", cmd, recordedTTL(j, o, req), cell(o.op))
		return exitRefused
	case errors.Is(err, idem.ErrInvalidRequest):
		fmt.Fprintf(e.stderr, "%s: refused, nothing sent: %v\n", cmd, err)
		return exitRefused
	case errors.Is(err, filejournal.ErrLocked), errors.Is(err, journal.ErrCorrupt):
		return reportJournalError(e, cmd, o.journal, err)
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(e.stderr, "%s: interrupted before sending: %v\n", cmd, err)
		return exitFailure
	}
	fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
	return exitFailure
}

// reportRejected writes a rejection: the server's answer to stdout, and a
// line on stderr.
func reportRejected(e env, cmd string, o sendOptions, oe *idem.OutcomeError) int {
	if o.include {
		writeHead(e.stdout, "HTTP/1.1", oe.Status, oe.Header)
	}
	e.stdout.Write(oe.Body)
	how := ""
	if oe.Recorded {
		how = "; this is the recorded answer, nothing was sent"
	}
	fmt.Fprintf(e.stderr, "%s: rejected: the server answered %d %s and did not apply the request (operation %s, key %s)%s\n",
		cmd, oe.Status, http.StatusText(oe.Status), cell(o.op), oe.Key, how)
	if loc := oe.Header.Get("Location"); loc != "" && oe.Status >= 300 && oe.Status < 400 {
		fmt.Fprintf(e.stderr, "%s: the server points to %s; an operation never follows a redirect that could apply it elsewhere or as another request: send it there under a new --op\n", cmd, cell(loc))
	}
	switch {
	case oe.BodyTruncated && oe.Recorded:
		fmt.Fprintf(e.stderr, "%s: the response body was not recorded; see idem journal show for why\n", cmd)
	case oe.BodyTruncated:
		fmt.Fprintf(e.stderr, "%s: the response body was larger than the recording limit (%d bytes) and is shown cut short\n", cmd, idem.DefaultMaxRecordedBody)
	}
	return exitRejected
}

// reportUnknown explains an operation that ended without a final answer,
// and how to resume it.
func reportUnknown(e env, cmd string, o sendOptions, oe *idem.OutcomeError) int {
	last := "no response"
	if oe.Status != 0 {
		last = fmt.Sprintf("last status %d %s", oe.Status, http.StatusText(oe.Status))
	}
	fmt.Fprintf(e.stderr, "%s: outcome unknown: operation %s, %d attempt(s), %s, key %s\n", cmd, cell(o.op), oe.Attempts, last, oe.Key)
	if oe.Err != nil {
		fmt.Fprintf(e.stderr, "%s: last error: %v\n", cmd, oe.Err)
	}
	if o.journal != "" {
		fmt.Fprintf(e.stderr, "%s: the operation stays pending in %s: rerun the same command to resume it under the same key\n", cmd, o.journal)
	} else {
		fmt.Fprintf(e.stderr, "%s: without --journal the key is lost when this process exits: a rerun sends a new key, and the server may apply the request twice\n", cmd)
	}
	return exitUnknown
}

// difference says how req differs from the request the operation id was
// first sent with, as the journal recorded it.
// recordedTTL is the key lifetime the journal recorded with operation
// o.op, or --ttl if it cannot be read.
func recordedTTL(j journal.Journal, o sendOptions, req *http.Request) time.Duration {
	if j != nil {
		if op, ok, err := j.Lookup(req.Context(), o.op); err == nil && ok {
			return op.KeyTTL
		}
	}
	return o.ttl
}

func difference(j journal.Journal, id string, req *http.Request) string {
	if j == nil {
		return "with a different method, URL or body"
	}
	op, ok, err := j.Lookup(req.Context(), id)
	switch {
	case err != nil || !ok:
		return "with a different method, URL or body"
	case op.Method != req.Method:
		return fmt.Sprintf("with method %s, not %s", cell(op.Method), req.Method)
	case op.URL != redact.Default.URL(req.URL):
		return fmt.Sprintf("to %s, not %s", cell(op.URL), cell(redact.Default.URL(req.URL)))
	case redact.Default.URL(req.URL) != req.URL.String():
		return "with a different body, or other credentials in the URL (the journal keeps them redacted)"
	}
	return "with a different body"
}
