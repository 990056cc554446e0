package faultsuite

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// The event protocol between a child client and its parent: one line per
// event, written with a single write(2) each so that a SIGKILL never leaves
// half a line behind a whole one (a pipe write of less than PIPE_BUF bytes
// is atomic):
//
//	attempt OP KEY
//	failure CAUSE
//	replayed
//	outcome OP RESULT
//	final OP STATUS APPLIED
//	resumed OP
//
// Any other line is passed on as it is (see ReadEvents). Operation IDs,
// keys and causes contain no spaces.

// EventWriter is a Recorder that writes the events it receives to w, for
// a parent process to read with ReadEvents. It is safe for concurrent use.
type EventWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewEventWriter returns an EventWriter writing to w, typically os.Stdout.
func NewEventWriter(w io.Writer) *EventWriter { return &EventWriter{w: w} }

// Line writes one line that is not an event, for the parent's other
// handler; it must not contain a newline.
func (e *EventWriter) Line(format string, args ...any) {
	e.write(fmt.Sprintf(format, args...))
}

// Err returns the first write error, if any.
func (e *EventWriter) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *EventWriter) write(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		_, e.err = io.WriteString(e.w, line+"\n")
	}
}

// Attempt writes an attempt event.
func (e *EventWriter) Attempt(op, key string) { e.write("attempt " + op + " " + key) }

// Failure writes a failure event.
func (e *EventWriter) Failure(cause string) { e.write("failure " + cause) }

// Replayed writes a replayed event.
func (e *EventWriter) Replayed() { e.write("replayed") }

// Outcome writes an outcome event.
func (e *EventWriter) Outcome(op string, r Result) { e.write("outcome " + op + " " + r.String()) }

// Final writes a final event; APPLIED is true or false.
func (e *EventWriter) Final(op string, status int, applied bool) {
	e.write(fmt.Sprintf("final %s %d %t", op, status, applied))
}

// Resumed writes a resumed event.
func (e *EventWriter) Resumed(op string) { e.write("resumed " + op) }

// ReadEvents reads lines from r until it ends, passing the events to rec
// and every other line to other (when not nil). A line that starts like an
// event but does not parse is an error.
func ReadEvents(r io.Reader, rec Recorder, other func(line string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := false
		switch f[0] {
		case "attempt":
			if bad = len(f) != 3; !bad {
				rec.Attempt(f[1], f[2])
			}
		case "failure":
			if bad = len(f) != 2; !bad {
				rec.Failure(f[1])
			}
		case "replayed":
			if bad = len(f) != 1; !bad {
				rec.Replayed()
			}
		case "outcome":
			res, ok := Result(0), len(f) == 3
			if ok {
				res, ok = parseResult(f[2])
			}
			if bad = !ok; !bad {
				rec.Outcome(f[1], res)
			}
		case "final":
			if bad = len(f) != 4; !bad {
				status, err1 := strconv.Atoi(f[2])
				applied, err2 := strconv.ParseBool(f[3])
				if bad = err1 != nil || err2 != nil; !bad {
					rec.Final(f[1], status, applied)
				}
			}
		case "resumed":
			if bad = len(f) != 2; !bad {
				rec.Resumed(f[1])
			}
		default:
			if other != nil {
				other(line)
			}
		}
		if bad {
			return fmt.Errorf("faultsuite: malformed event %q", line)
		}
	}
	return sc.Err()
}
