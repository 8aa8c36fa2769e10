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

const pluginNewAbout = `new LANG DIR: writes a skeleton plugin in DIR (made when missing; an
existing DIR must be empty: nothing is written otherwise) for LANG, one of
go, c, rust, assemblyscript: a minimal fold whose view mirrors the bucket
(each key's value under the same key; a delete removes it), the SDK files
it needs copied in, so that it builds outside this repository, and a
README.md with its build command. The plugin's name is DIR's base name
(when it is a plain name; else "my-plugin").

Then, in DIR: build it as its README.md says, and
'foldhost plugin check plugin.wasm'.`

func cmdPluginNew(c *cli, args []string) error {
	fs := c.flagSet("plugin new", "plugin new go|c|rust|assemblyscript DIR", pluginNewAbout)
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
	fmt.Fprintf(c.stdout, "wrote the %s plugin skeleton to %s (%d files). Build it there:\n  %s\nthen check it:\n  foldhost plugin check plugin.wasm\n",
		lang, dir, len(files), skeleton.BuildSteps(lang))
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
