package main

import (
	"flag"
	"fmt"
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
	v := &top.View{Base: strings.TrimRight(*base, "/"), Interval: *interval, Sort: *sortKey, Out: c.stdout,
		Size: func() (int, int) { return term.SizeOf(c.stdout, c.getenv) }}
	if *once {
		return v.Once(c.ctx)
	}
	var keys <-chan byte
	if in, ok := c.stdin.(*os.File); ok {
		if raw, err := term.EnterRaw(in); err == nil {
			defer raw.Restore()
			done := make(chan struct{})
			k := make(chan byte)
			stopped := raw.ReadKeys(k, done)
			defer func() { close(done); <-stopped }()
			keys = k
		}
	}
	return v.Loop(c.ctx, keys)
}
