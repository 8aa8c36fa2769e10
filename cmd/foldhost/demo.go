package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/foldhost/foldhost/internal/demo"
)

func cmdDemo(c *cli, args []string) error {
	fs := c.flagSet("demo", "demo [--dir DIR] [--keys N] [--delta N] [--plugin FILE]", about("demo"))
	dir := fs.String("dir", "", "working `dir` (kept); default: a temporary one, removed")
	keys := fs.Int("keys", 20000, "route keys to write")
	delta := fs.Int("delta", 500, "updates (changes and deletes) to write while the fold is stopped")
	pluginPath := fs.String("plugin", "", "example-router `module` to use")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("demo takes no arguments")
	}
	if *keys < 1 || *delta < 1 || *delta > *keys {
		return usagef("--keys must be >= 1 and --delta between 1 and --keys")
	}
	keep := *dir != ""
	if *dir == "" {
		tmp, err := os.MkdirTemp("", "foldhost-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		*dir = tmp
	} else if err := demoDir(*dir); err != nil {
		return err
	}
	return demo.Run(c.ctx, demo.Config{Out: c.stdout, Dir: *dir, Keep: keep, Keys: *keys, Delta: *delta, Plugin: *pluginPath})
}

// demoDir makes --dir, parents included, or checks that an existing one
// holds no earlier demo (whose stream and folds would not add up to this
// run's figures: the tour stops halfway, on its second fold).
func demoDir(dir string) error {
	for _, name := range demo.Entries {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return usagef("--dir %s holds an earlier demo's %s: give a new directory, or remove this one first", dir, name)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo: --dir: %w", err)
	}
	return nil
}
