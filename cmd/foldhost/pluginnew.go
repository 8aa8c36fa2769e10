package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/foldhost/foldhost/internal/skeleton"
)

func cmdPluginNew(c *cli, args []string) error {
	fs := c.flagSet("plugin new", "plugin new go|c|rust|assemblyscript DIR", about("plugin-new"))
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want: plugin new LANG DIR, LANG one of %s", strings.Join(skeleton.Langs(), ", "))
	}
	lang, dir := pos[0], pos[1]
	if !slices.Contains(skeleton.Langs(), lang) {
		return usagef("unknown language %q: want one of %s", lang, strings.Join(skeleton.Langs(), ", "))
	}
	files, err := skeleton.Files(lang, skeleton.Name(dir))
	if err != nil {
		return err
	}
	if err := emptyDir(dir); err != nil {
		return err
	}
	if err := skeleton.Write(dir, files); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wrote the %s plugin skeleton to %s (%d files). Build it there:\n  %s\n%sthen check it:\n  foldhost plugin check plugin.wasm\n"+
		"and test it against fixture.jsonl (test.sh builds, checks and tests):\n  foldhost plugin test plugin.wasm fixture.jsonl\n",
		lang, dir, len(files), skeleton.BuildSteps(lang), skeleton.BuildNote(lang))
	return nil
}

// emptyDir makes dir, or accepts it when it exists empty.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return usagef("%s: %v (nothing written)", dir, err)
	case len(ents) > 0:
		return usagef("%s is not empty (nothing written): give a new or empty directory", dir)
	}
	return nil
}
