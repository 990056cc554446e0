package loadbench

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows which cell is being measured and how many are left.
type progress struct {
	bar *progressbar.ProgressBar
	w   io.Writer
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w}
}

// update is Config.Progress.
func (p *progress) update(done, total int, c Cell) {
	if p.bar == nil {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetWidth(24),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionClearOnFinish(),
		)
	}
	if c != (Cell{}) {
		p.bar.Describe(c.String())
	}
	p.bar.Set(done)
}

// finish clears the bar.
func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
