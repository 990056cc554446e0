package main

// idem serve: the reference server, exactly as the idem-testserver binary
// runs it (testserver.Command), so that the flags are the same.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/idemkit/idem/testserver"
)

var serveCommand = command{
	name:    "serve",
	summary: "run the reference server (the flags of idem-testserver)",
	run:     runServe,
}

func runServe(ctx context.Context, e env, args []string) int {
	const cmd = "idem serve"
	// Command writes its usage and its logs to one writer. Until it says
	// it is listening, hold what it writes there: help then goes to
	// stdout, as for every other command, and a usage error to stderr.
	held := &heldWriter{dst: e.stderr}
	out := &onFirstWrite{w: e.stdout, do: held.release}
	err := testserver.Command(ctx, args, out, held)
	switch {
	case err == nil:
		held.release()
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		held.flushTo(e.stdout)
		return exitOK
	case errors.Is(err, testserver.ErrUsage):
		held.release()
		return exitUsage
	default:
		held.release()
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}
}

// heldWriter holds what is written to it until release, then writes it,
// and everything after it, to dst. Usage text held is renamed from
// idem-testserver to idem serve.
type heldWriter struct {
	mu       sync.Mutex
	dst      io.Writer
	buf      bytes.Buffer
	released bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.dst.Write(p)
	}
	return h.buf.Write(p)
}

// release writes what was held to dst and lets later writes through.
func (h *heldWriter) release() { h.flushTo(nil) }

// flushTo writes what was held to w (dst if w is nil) and lets later
// writes through to dst.
func (h *heldWriter) flushTo(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	if w == nil {
		w = h.dst
	}
	io.WriteString(w, strings.ReplaceAll(h.buf.String(), "Usage: idem-testserver", "Usage: idem serve"))
	h.buf.Reset()
}

// onFirstWrite calls do before the first write to w.
type onFirstWrite struct {
	w    io.Writer
	once sync.Once
	do   func()
}

func (o *onFirstWrite) Write(p []byte) (int, error) {
	o.once.Do(o.do)
	return o.w.Write(p)
}
