package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress shows a long operation's progress: a bar redrawn in place on a
// terminal, otherwise a line per interval and the final one.
type progress struct {
	w      io.Writer
	tty    bool
	prefix string        // the line's start, off a terminal
	every  time.Duration // between lines, off a terminal
	last   time.Time
	drawn  bool
	final  bool
}

func newProgress(w io.Writer, prefix string, every time.Duration) *progress {
	return &progress{w: w, tty: isTerminal(w), prefix: prefix, every: every}
}

// update shows done of total, and what describes it.
func (p *progress) update(done, total int64, what string) {
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

// status shows a line of figures for work of unknown size: redrawn in place
// on a terminal, otherwise printed once per interval.
func (p *progress) status(what string) {
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

// end finishes a drawn bar's line.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// humanBytes formats n bytes in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
