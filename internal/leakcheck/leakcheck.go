// Package leakcheck finds goroutines that a test left running. It is the
// root module's own check, read from runtime.Stack, so that the library's
// module requires no test library.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// wait bounds how long a check waits for goroutines to end: ones that
// are ending when a test returns are not leaks, and a loaded machine
// makes them slow.
const wait = 5 * time.Second

// Main runs the tests of m and, when they pass, fails the run if any
// goroutine is left that the tests started, as goleak.VerifyTestMain does.
func Main(m interface{ Run() int }) {
	code := m.Run()
	if code == 0 {
		if left := settle(nil); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: the tests passed but left goroutines running:\n\n%s\n",
				strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Check notes the goroutines running now and returns a function that
// fails t if others are still running when it is called:
//
//	defer leakcheck.Check(t)()
func Check(t testing.TB) func() {
	t.Helper()
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	return func() {
		t.Helper()
		if left := settle(before); len(left) > 0 {
			t.Errorf("leakcheck: goroutines left running:\n\n%s", strings.Join(left, "\n\n"))
		}
	}
}

// settle returns the traces of the goroutines other than the caller's,
// those in ignore and those the runtime and the testing package run,
// once waiting no longer makes them fewer than none, or wait has passed.
func settle(ignore map[string]bool) []string {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		var left []string
		for _, g := range goroutines()[1:] {
			if !ignore[g.id] && !g.background() {
				left = append(left, g.trace)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// goroutine is one goroutine of a trace of all of them.
type goroutine struct {
	id    string   // its number
	state string   // what it waits for, as the trace says: "chan receive", "select"
	funcs []string // the functions of its stack, innermost first
	trace string
}

// goroutines returns every goroutine, the caller's first (as
// runtime.Stack gives it).
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		if g, ok := parse(string(block)); ok {
			gs = append(gs, g)
		}
	}
	return gs
}

// parse reads one goroutine's block of a trace: a header such as
// "goroutine 7 [chan receive, 2 minutes]:", then a function line and a
// file line for each frame, then "created by …".
func parse(block string) (goroutine, bool) {
	lines := strings.Split(strings.TrimSpace(block), "\n")
	head, ok := strings.CutPrefix(lines[0], "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	id, rest, _ := strings.Cut(head, " ")
	state := strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]:")
	state, _, _ = strings.Cut(state, ",")
	g := goroutine{id: id, state: state, trace: block}
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") || strings.HasPrefix(line, "...") {
			continue
		}
		if i := strings.LastIndex(line, "("); i > 0 {
			line = line[:i]
		}
		g.funcs = append(g.funcs, line)
	}
	return g, len(g.funcs) > 0
}

// background reports whether g is one the testing package, os/signal or
// cgo runs whatever the tests do (goleak's default filters).
func (g goroutine) background() bool {
	switch g.funcs[0] {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(g.state, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	}
	for _, f := range g.funcs {
		switch {
		case f == "runtime.ensureSigM":
			return true
		case f == "runtime.goexit" && strings.HasPrefix(g.state, "syscall"):
			return true
		}
	}
	return false
}
