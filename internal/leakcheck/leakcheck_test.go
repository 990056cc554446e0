package leakcheck

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what a check reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// A goroutine started after Check and still running when its function is
// called is reported, with its stack; one that ended is not.
func TestCheckReportsAGoroutineLeftRunning(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	r := &recorder{TB: t}
	check := Check(r)
	go func() {
		defer close(done)
		blockedForTheTest(stop)
	}()
	check()
	close(stop)
	<-done
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "leakcheck.blockedForTheTest") {
		t.Fatalf("a goroutine left running: reported %q, want one report naming blockedForTheTest", r.errors)
	}

	r = &recorder{TB: t}
	check = Check(r)
	stop, done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		blockedForTheTest(stop)
	}()
	close(stop)
	<-done
	check()
	if len(r.errors) != 0 {
		t.Fatalf("a goroutine that ended: reported %q, want nothing", r.errors)
	}
}

// Goroutines running before Check are not its concern.
func TestCheckIgnoresGoroutinesRunningBefore(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		blockedForTheTest(stop)
	}()
	defer func() { close(stop); <-done }()
	r := &recorder{TB: t}
	Check(r)()
	if len(r.errors) != 0 {
		t.Fatalf("reported %q, want nothing", r.errors)
	}
}

// The trace's blocks are read into their goroutine's number, state and
// functions, the testing package's waiting goroutines are background and
// a goroutine of the code under test is not.
func TestParse(t *testing.T) {
	g, ok := parse("goroutine 7 [chan receive, 2 minutes]:\n" +
		"testing.(*T).Run(0xc000102000, {0x5f2b3a, 0x4}, 0x60a1c8)\n" +
		"\t/usr/lib/go/src/testing/testing.go:1750 +0x3ab\n" +
		"created by testing.runTests in goroutine 1\n" +
		"\t/usr/lib/go/src/testing/testing.go:2100 +0x44")
	if !ok || g.id != "7" || g.state != "chan receive" || len(g.funcs) != 1 || g.funcs[0] != "testing.(*T).Run" {
		t.Fatalf("parse = %+v, %v", g, ok)
	}
	if !g.background() {
		t.Error("the testing package's waiting test runner is not background")
	}
	g, ok = parse("goroutine 9 [select]:\n" +
		"net/http.(*persistConn).writeLoop(0xc0001)\n" +
		"\t/usr/lib/go/src/net/http/transport.go:2590 +0x8c\n")
	if !ok || g.background() {
		t.Errorf("a transport's goroutine: %+v, %v; want a goroutine that is not background", g, ok)
	}
	if _, ok := parse("not a goroutine"); ok {
		t.Error("a block without a goroutine header was read as one")
	}
}

//go:noinline
func blockedForTheTest(stop chan struct{}) { <-stop }
