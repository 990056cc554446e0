package main

// What the demo shows while it works: the story on stdout, and a progress
// bar on stderr when stderr is a terminal (and --no-progress is not given).
// Both may be the same terminal, so the bar is cleared before each line of
// the story and redrawn after it.

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// screen writes the demo's story and draws its progress bar. It is used
// from one goroutine.
type screen struct {
	out    io.Writer // the story
	barOut io.Writer // the bar's terminal; nil for no bar
	bar    *progressbar.ProgressBar
	n      int
}

// newScreen returns a screen that tells the story on e.stdout and draws a
// bar on e.stderr if it is a terminal and bars are wanted.
func newScreen(e env, bars bool) *screen {
	s := &screen{out: e.stdout}
	if f, ok := e.stderr.(*os.File); ok && bars && term.IsTerminal(int(f.Fd())) {
		s.barOut = f
	}
	return s
}

// startBar starts a bar counting up to total, labelled desc.
func (s *screen) startBar(total int, desc string) {
	s.endBar()
	s.n = 0
	if s.barOut == nil || total <= 0 {
		return
	}
	s.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(s.barOut),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(65*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
}

// set moves the bar to n.
func (s *screen) set(n int) {
	if s.bar == nil || n == s.n {
		return
	}
	s.n = n
	s.bar.Set(n)
}

// say writes a line of the story.
func (s *screen) say(format string, args ...any) {
	if s.bar != nil {
		s.bar.Clear()
	}
	fmt.Fprintf(s.out, format+"\n", args...)
	if s.bar != nil && !s.bar.IsFinished() {
		s.bar.RenderBlank()
	}
}

// endBar removes the bar, finished or not.
func (s *screen) endBar() {
	if s.bar == nil {
		return
	}
	if !s.bar.IsFinished() {
		s.bar.Exit()
		s.bar.Clear()
	}
	s.bar = nil
}
