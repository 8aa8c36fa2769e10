package top

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// View is one `foldhost top` session over the API at Base.
type View struct {
	Base     string
	Interval time.Duration
	Sort     string
	Out      io.Writer
	// Size is the terminal's width and height.
	Size func() (width, height int)
}

// Once samples twice, an interval apart, and writes one plain frame.
func (v *View) Once(ctx context.Context) error {
	prev, err := Fetch(ctx, v.Base, v.Interval)
	if err != nil {
		return err
	}
	select {
	case <-time.After(v.Interval):
	case <-ctx.Done():
		return nil
	}
	cur, err := Fetch(ctx, v.Base, v.Interval)
	if err != nil {
		return err
	}
	width, _ := v.Size()
	for _, l := range Table(prev, cur, v.Sort, width) {
		fmt.Fprintln(v.Out, l)
	}
	return nil
}

// Loop redraws a frame every interval, on the alternate screen, until q
// (read from keys, nil when the terminal gives none) or ctx ends; s
// cycles the sort.
func (v *View) Loop(ctx context.Context, keys <-chan byte) error {
	// The alternate screen keeps the shell's screen as it was; the
	// cursor is hidden while frames are drawn.
	fmt.Fprint(v.Out, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")
	defer fmt.Fprint(v.Out, "\x1b[?25h\x1b[?1049l")
	var prev, cur *Sample
	var fetchErr error
	sample := func() {
		s, err := Fetch(ctx, v.Base, v.Interval)
		if err != nil {
			fetchErr = err
			return
		}
		prev, cur, fetchErr = cur, s, nil
	}
	sample()
	ticker := time.NewTicker(v.Interval)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		width, height := v.Size()
		head := fmt.Sprintf("foldhost top  %s  every %v  sort: %s", v.Base, v.Interval, v.Sort)
		if keys != nil {
			head += "  (s: sort, q: quit)"
		}
		io.WriteString(v.Out, Frame(head, prev, cur, fetchErr, v.Sort, width, height))
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			sample()
		case k := <-keys:
			switch k {
			case 'q', 'Q':
				return nil
			case 's', 'S':
				v.Sort = Sorts[(slices.Index(Sorts, v.Sort)+1)%len(Sorts)]
			}
		}
	}
}
