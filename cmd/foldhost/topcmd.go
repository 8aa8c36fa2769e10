package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/foldhost/foldhost/internal/target"
	"github.com/foldhost/foldhost/internal/term"
	"github.com/foldhost/foldhost/internal/top"
)

func cmdTop(c *cli, args []string) error {
	fs := c.flagSet("top", "top [--url URL | --config FILE] [--interval D] [--sort KEY] [--once]", about("top"))
	base := fs.String("url", "http://127.0.0.1:8080", "the daemon's HTTP API `URL` (the default http.addr)")
	configPath := fs.String("config", "", "take the URL from this config `file`'s http.addr")
	interval := fs.Duration("interval", time.Second, "refresh `interval` (and, with --once, the time between the two samples)")
	sortKey := fs.String("sort", "name", "sort rows by `key`: "+strings.Join(top.Sorts, ", "))
	once := fs.Bool("once", false, "print one frame, without escape codes, and exit")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if !slices.Contains(top.Sorts, *sortKey) {
		return usagef("--sort %q: want one of %s", *sortKey, strings.Join(top.Sorts, ", "))
	}
	if *interval <= 0 {
		return usagef("--interval %v: want a positive duration", *interval)
	}
	var urlSet bool
	fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
	if *configPath != "" {
		if urlSet {
			return usagef("--url and --config: give one")
		}
		cfg, err := c.loadConfig(*configPath)
		if err != nil {
			return err
		}
		if *base, err = target.DaemonURL(cfg); err != nil {
			return fmt.Errorf("foldhost's HTTP API: %w", err)
		}
	}
	t := &topView{c: c, base: strings.TrimRight(*base, "/"), interval: *interval, sort: *sortKey}
	if *once {
		return t.once()
	}
	return t.interactive()
}

// topView is one `foldhost top` session.
type topView struct {
	c        *cli
	base     string
	interval time.Duration
	sort     string
}

// once samples twice, an interval apart, and prints one plain frame.
func (t *topView) once() error {
	prev, err := top.Fetch(t.c.ctx, t.base, t.interval)
	if err != nil {
		return err
	}
	select {
	case <-time.After(t.interval):
	case <-t.c.ctx.Done():
		return nil
	}
	cur, err := top.Fetch(t.c.ctx, t.base, t.interval)
	if err != nil {
		return err
	}
	width, _ := t.size()
	for _, l := range top.Table(prev, cur, t.sort, width) {
		fmt.Fprintln(t.c.stdout, l)
	}
	return nil
}

// interactive redraws a frame every interval until q, Ctrl-C or a
// cancelled context; the terminal is restored on the way out.
func (t *topView) interactive() error {
	ctx := t.c.ctx
	var keys <-chan byte
	if in, ok := t.c.stdin.(*os.File); ok {
		if raw, err := term.EnterRaw(in); err == nil {
			defer raw.Restore()
			done := make(chan struct{})
			k := make(chan byte)
			stopped := raw.ReadKeys(k, done)
			defer func() { close(done); <-stopped }()
			keys = k
		}
	}
	// The alternate screen keeps the shell's screen as it was; the
	// cursor is hidden while frames are drawn.
	fmt.Fprint(t.c.stdout, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")
	defer fmt.Fprint(t.c.stdout, "\x1b[?25h\x1b[?1049l")

	var prev, cur *top.Sample
	var fetchErr error
	sample := func() {
		s, err := top.Fetch(ctx, t.base, t.interval)
		if err != nil {
			fetchErr = err
			return
		}
		prev, cur, fetchErr = cur, s, nil
	}
	sample()
	ticker := time.NewTicker(t.interval)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		t.draw(prev, cur, fetchErr, keys != nil)
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
				t.sort = top.Sorts[(slices.Index(top.Sorts, t.sort)+1)%len(top.Sorts)]
			}
		}
	}
}

// draw writes one frame over the last.
func (t *topView) draw(prev, cur *top.Sample, fetchErr error, keys bool) {
	width, height := t.size()
	head := fmt.Sprintf("foldhost top  %s  every %v  sort: %s", t.base, t.interval, t.sort)
	if keys {
		head += "  (s: sort, q: quit)"
	}
	io.WriteString(t.c.stdout, top.Frame(head, prev, cur, fetchErr, t.sort, width, height))
}

func (t *topView) size() (width, height int) { return term.SizeOf(t.c.stdout, t.c.getenv) }
