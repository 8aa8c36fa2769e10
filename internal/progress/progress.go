// Package progress shows a long operation's progress on a writer: a bar
// (or a status line) redrawn in place on a terminal, otherwise a line per
// interval and the final one. The CLI's bootstrap, repair, demo and bench
// draw with it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Progress is one operation's progress display. Not safe for concurrent
// use.
type Progress struct {
	w      io.Writer
	tty    bool
	prefix string        // the line's start, off a terminal
	every  time.Duration // between lines, off a terminal
	last   time.Time
	drawn  bool
	final  bool
}

// New draws on w; off a terminal its lines start with prefix and come at
// most once per every (and the last one).
func New(w io.Writer, prefix string, every time.Duration) *Progress {
	return &Progress{w: w, tty: isTerminal(w), prefix: prefix, every: every}
}

// Update shows done of total, and what describes it.
func (p *Progress) Update(done, total int64, what string) {
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond && done != total {
			return
		}
		p.last = time.Now()
		const width = 30
		n := min(width, int(pct/100*width))
		fmt.Fprintf(p.w, "\r   [%s%s] %5.1f%%  %s", strings.Repeat("#", n), strings.Repeat(".", width-n), pct, what)
		p.drawn = true
		return
	}
	if done == total && !p.final || time.Since(p.last) >= p.every { // a line per interval, and the last one
		p.last, p.final = time.Now(), done == total
		fmt.Fprintf(p.w, "%s%s (%.0f%%)\n", p.prefix, what, pct)
	}
}

// Status shows a line of figures for work of unknown size: redrawn in place
// on a terminal, otherwise printed once per interval.
func (p *Progress) Status(what string) {
	if p.tty {
		if time.Since(p.last) < 100*time.Millisecond {
			return
		}
		p.last = time.Now()
		fmt.Fprintf(p.w, "\r\033[K   %s", what)
		p.drawn = true
		return
	}
	if time.Since(p.last) >= p.every {
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, what)
	}
}

// End finishes a drawn bar's line.
func (p *Progress) End() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
