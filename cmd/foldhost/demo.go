package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/foldhost/foldhost/internal/demo"
)

const demoAbout = `A self-contained tour on embedded defaults: starts an embedded NATS server,
writes a synthetic route workload (route.<host> keys with upstream lists),
folds it through the example-router WASM plugin, stops, writes a delta,
restarts, and shows that the restart received only the delta. Then it
exports the fold as an artifact to a local artifact store, writes another
delta, bootstraps a second fold (a new node) from the artifact, and shows
that it received only that delta and ends identical to the first. Nothing
outside --dir is touched; --dir is made when missing, and must not hold an
earlier demo; without --dir a temporary directory is used and removed at
the end.

The plugin defaults to the first build found under
plugins/example-router/build/ (scripts/build-plugins makes them, in the
repository); anywhere else, to the C build the binary carries.`

func cmdDemo(c *cli, args []string) error {
	fs := c.flagSet("demo", "demo [--dir DIR] [--keys N] [--delta N] [--plugin FILE]", demoAbout)
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
