package main

// idem send: one HTTP request as an idempotent operation, curl-style, for
// shell scripts and cron jobs.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

var sendCommand = command{
	name:    "send",
	summary: "send one HTTP request as an idempotent operation, curl-style",
	run:     runSend,
}

// sendOptions are the flags of idem send.
type sendOptions struct {
	journal    string
	op         string
	method     string
	headers    headerFlags
	data       dataFlag
	timeout    time.Duration
	attempts   int
	maxElapsed time.Duration
	ttl        time.Duration
	include    bool
	verbose    bool
	keyHeader  string
	quotedKey  bool
	dialect    dialectFlag
	insecure   bool
	caCert     string
	wait       time.Duration
	mustExist  bool
}

// memoryOp is the operation ID of a send without --journal and --op: the
// key lives in this process only, so the ID names nothing beyond it.
const memoryOp = "send"

const sendHelp = `
Sends the request as the operation ID, under one Idempotency-Key for every
attempt. With --journal, the key is written to the journal (and fsync'd)
before the first byte is sent, so after a crash or an unknown outcome the
same command resends under the same key, and once the operation is done or
rejected the same command prints the recorded response without sending.

With --dialect, the key goes where that API wants it: its own header, or
a field of the JSON body (the body must then be a JSON object), and its
answers are read as that API means them (docs/real-apis.md lists each
dialect). --key-header and --ttl, when given, take the place of the
dialect's.

The method is POST unless -X says otherwise, also without -d: an
idempotency key is for requests that change something. No Content-Type is
added; pass one with -H. The body is sent byte for byte.

The response body goes to stdout (with -i, the status line and header
first), also for a rejection; what happened goes to stderr.
`

func runSend(ctx context.Context, e env, args []string) int {
	const cmd = "idem send"
	fs := newFlagSet(cmd)
	var o sendOptions
	fs.StringVar(&o.journal, "journal", "", "journal `PATH` (or postgres:// URL of a shared journal) that keeps the operation's key across runs; created if missing (default: keys in memory only)")
	fs.StringVar(&o.op, "op", "", "operation `ID`, stable across reruns; required with --journal")
	fs.StringVar(&o.method, "X", http.MethodPost, "request `METHOD`")
	fs.Var(&o.headers, "H", "request `header` as \"Name: value\"; repeatable")
	fs.Var(&o.data, "d", "request body: `DATA` as given, @FILE for a file's bytes, @- for stdin")
	fs.DurationVar(&o.timeout, "timeout", idem.DefaultAttemptTimeout, "limit of each attempt, reading the response included")
	fs.IntVar(&o.attempts, "attempts", idem.DefaultMaxAttempts, "most attempts, the first included")
	fs.DurationVar(&o.maxElapsed, "max-elapsed", idem.DefaultMaxElapsed, "no retry starts after this long")
	fs.DurationVar(&o.ttl, "ttl", idem.DefaultKeyTTL, "how long the server keeps a key: a pending operation with an older key is refused, not resent")
	fs.StringVar(&o.keyHeader, "key-header", keyHeader, "the header that carries the key")
	fs.BoolVar(&o.quotedKey, "quoted-key", false, "send the key as a structured-field string (\"...\"), as the IETF draft does")
	fs.Var(&o.dialect, "dialect", "the API's idempotency `NAME`: where the key goes (its header, or a field of a JSON body), its retention (the default of --ttl) and how answers read; one of "+dialectNames())
	fs.BoolVar(&o.insecure, "k", false, "do not verify the server's TLS certificate")
	fs.StringVar(&o.caCert, "cacert", "", "verify the server's TLS certificate against the CA certificates in PEM `FILE`")
	fs.BoolVar(&o.mustExist, "journal-must-exist", false, "refuse a missing journal file instead of creating it: for every run after the first, so a lost journal stops the job")
	fs.DurationVar(&o.wait, "wait", 0, "when another process holds the journal, wait this long for it instead of failing at once")
	fs.BoolVar(&o.include, "i", false, "print the response's status line and header before its body")
	fs.BoolVar(&o.verbose, "v", false, "report every attempt on stderr")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [--journal PATH --op ID] [-X METHOD] [-H 'Name: value']... [-d DATA|@FILE|@-] [-i] URL\n", cmd)
		fmt.Fprint(w, sendHelp)
		writeFlags(w, fs)
		fmt.Fprintln(w)
		writeExitCodes(w)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	d := o.dialect.Dialect
	switch {
	case d.KeyField != "" && set["key-header"]:
		return usageError(e, cmd, "--dialect %s puts the key in the body field %q, not in --key-header", d.Name, d.KeyField)
	case d.KeyField != "":
		o.keyHeader = ""
	case !set["key-header"] && d.KeyHeader != "":
		o.keyHeader = d.KeyHeader
	}
	if !set["ttl"] && d.Retention > 0 {
		o.ttl = d.Retention
	}
	switch {
	case len(pos) != 1:
		return usageError(e, cmd, "want one URL, got %d arguments", len(pos))
	case o.journal != "" && o.op == "":
		return usageError(e, cmd, "--journal needs --op: the operation ID that a rerun resumes")
	case o.mustExist && (o.journal == "" || isShared(o.journal)):
		return usageError(e, cmd, "--journal-must-exist needs --journal with the path of a journal file")
	case o.attempts < 1:
		return usageError(e, cmd, "--attempts must be at least 1")
	case o.timeout <= 0 || o.maxElapsed <= 0 || o.ttl <= 0 || o.wait < 0:
		return usageError(e, cmd, "--timeout, --max-elapsed and --ttl must be positive, and --wait not negative")
	case o.keyHeader != "" && !validHeaderName(o.keyHeader):
		return usageError(e, cmd, "--key-header %q is not a valid header name", o.keyHeader)
	case !validHeaderName(o.method):
		return usageError(e, cmd, "-X %q is not a valid method", o.method)
	}
	if _, err := parseTarget(pos[0]); err != nil {
		return usageError(e, cmd, "%v", err)
	}
	if err := o.headers.without(o.keyHeader); o.keyHeader != "" && err != nil {
		return usageError(e, cmd, "-H %v", err)
	}
	body, err := o.data.read(e.stdin)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	req, err := newRequest(ctx, o.method, pos[0], o.headers, body)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	return send(e, cmd, o, req)
}

// send opens the journal, sends req as the operation and reports how it
// ended.
func send(e env, cmd string, o sendOptions, req *http.Request) int {
	var j openedJournal
	if o.journal != "" {
		var err error
		if isShared(o.journal) {
			j, err = openShared(req.Context(), e, o.journal, true, true)
		} else {
			j, err = openWaiting(req.Context(), o.journal, filejournal.Options{
				Now:       e.now,
				Logger:    warnLogger(e.stderr),
				MustExist: o.mustExist,
			}, o.wait)
		}
		if err != nil {
			return reportJournalError(e, cmd, o.journal, err)
		}
		defer func() {
			// Close fsyncs the outcome. Were it lost, the next run would
			// resend under the same key and get the server's replay, so
			// the exit code stands.
			if err := j.Close(); err != nil {
				fmt.Fprintf(e.stderr, "%s: closing the journal: %v\n", cmd, err)
			}
		}()
	} else {
		fmt.Fprintf(e.stderr, "%s: warning: no --journal: the key lives in this process only; if it dies before an answer, a rerun sends a new key and the server may apply the request twice\n", cmd)
		if o.op == "" {
			o.op = memoryOp
		}
	}

	tr := newTransport()
	defer tr.CloseIdleConnections()
	if err := o.configureTLS(tr); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	d := o.dialect.Dialect
	if d.KeyField == "" {
		d.KeyHeader = o.keyHeader
	}
	d.QuotedKey = d.QuotedKey || o.quotedKey
	d.Retention = o.ttl // recorded with the operation, which every later reader judges by
	cfg := idem.Config{
		Dialect:        d,
		HTTPClient:     &http.Client{Transport: tr},
		AttemptTimeout: o.timeout,
		MaxAttempts:    o.attempts,
		MaxElapsed:     o.maxElapsed,
	}
	if j != nil {
		cfg.Journal = j
	}
	if o.verbose {
		cfg.OnAttempt = func(a idem.Attempt) { reportAttempt(e.stderr, cmd, a) }
	}
	c, err := idem.New(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
	resp, err := c.Do(o.op, req)
	if err != nil {
		return reportNotDone(e, cmd, o, j, req, err)
	}
	defer resp.Body.Close()
	return writeDone(e, cmd, o, j, resp)
}

// newTransport returns a transport of send's own, like
// http.DefaultTransport (proxies from the environment included), whose
// connections send closes when it is done.
func newTransport() *http.Transport {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return t.Clone()
	}
	return &http.Transport{Proxy: http.ProxyFromEnvironment}
}

// writeDone writes the response of a done operation to stdout.
func writeDone(e env, cmd string, o sendOptions, j journal.Journal, resp *http.Response) int {
	var recorded journal.Operation
	if idem.Recorded(resp) && j != nil {
		when := ""
		if op, ok, _ := j.Lookup(context.Background(), o.op); ok {
			when = " at " + op.Completed.UTC().Format(time.RFC3339)
			recorded = op
		}
		fmt.Fprintf(e.stderr, "%s: operation %s was already done: this is the response recorded%s; nothing was sent\n", cmd, cell(o.op), when)
	}
	if idem.AlreadyApplied(resp) {
		fmt.Fprintf(e.stderr, "%s: the API answered %d: it had already applied operation %s, and did not replay its response; the operation is done\n", cmd, resp.StatusCode, cell(o.op))
	}
	if o.include {
		writeHead(e.stdout, resp.Proto, resp.StatusCode, resp.Header)
	}
	_, err := io.Copy(e.stdout, resp.Body)
	switch {
	case errors.Is(err, idem.ErrBodyNotRecorded) && recorded.Summarized:
		fmt.Fprintf(e.stderr, "%s: the response body was not recorded (%s), so it cannot be printed\n", cmd, whyBodyNotRecorded(recorded))
	case errors.Is(err, idem.ErrBodyNotRecorded):
		fmt.Fprintf(e.stderr, "%s: the response body was larger than the recording limit (%d bytes) when it arrived, so it was not recorded and cannot be printed\n", cmd, idem.DefaultMaxRecordedBody)
	case err != nil:
		fmt.Fprintf(e.stderr, "%s: the operation is done, but reading its response failed: %v\n", cmd, err)
		return exitFailure
	}
	return exitOK
}

// writeHead writes a status line and header the way curl -i does.
func writeHead(w io.Writer, proto string, code int, h http.Header) {
	fmt.Fprintf(w, "%s %d %s\r\n", proto, code, http.StatusText(code))
	h.Write(w)
	io.WriteString(w, "\r\n")
}

// reportAttempt writes one attempt's fate to w, for -v.
func reportAttempt(w io.Writer, cmd string, a idem.Attempt) {
	msg := fmt.Sprintf("%s: attempt %d (key %s):", cmd, a.Number, a.Key)
	if a.Status != 0 {
		msg += fmt.Sprintf(" status %d", a.Status)
	}
	if a.Err != nil {
		msg += fmt.Sprintf(" %v", a.Err)
	}
	if a.Retry {
		msg += fmt.Sprintf("; retrying in %s", a.Wait.Round(time.Millisecond))
	}
	fmt.Fprintln(w, msg)
}

// configureTLS applies -k and --cacert to tr.
func (o sendOptions) configureTLS(tr *http.Transport) error {
	if !o.insecure && o.caCert == "" {
		return nil
	}
	cfg := &tls.Config{InsecureSkipVerify: o.insecure}
	if o.caCert != "" {
		pem, err := os.ReadFile(o.caCert)
		if err != nil {
			return fmt.Errorf("--cacert: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--cacert: no PEM certificate in %s", o.caCert)
		}
	}
	tr.TLSClientConfig = cfg
	return nil
}

// journalPoll is how often openWaiting tries a held journal again.
const journalPoll = 50 * time.Millisecond

// openWaiting opens the journal for writing; while another process holds
// it, it tries again until wait has passed or ctx ends.
func openWaiting(ctx context.Context, path string, o filejournal.Options, wait time.Duration) (*filejournal.Journal, error) {
	deadline := time.Now().Add(wait)
	for {
		j, err := filejournal.Open(path, o)
		if !errors.Is(err, filejournal.ErrLocked) || !time.Now().Before(deadline) {
			return j, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(journalPoll):
		}
	}
}
