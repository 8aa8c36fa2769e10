package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/config"
)

// cmdArtifacts is `artifacts [list|show] ...`; without either it lists,
// as the command did before it had subcommands.
func cmdArtifacts(c *cli, args []string) error {
	if len(args) > 0 && args[0] == "show" {
		return artifactsShow(c, args[1:])
	}
	if len(args) > 0 && args[0] == "list" {
		args = args[1:]
	}
	return artifactsList(c, args)
}

// artifactsFlags are the flags list and show share.
type artifactsFlags struct {
	config  *string
	keys    multiFlag
	json    *bool
	timeout *time.Duration
}

func newArtifactsFlags(fs *flag.FlagSet, keyHelp string) *artifactsFlags {
	f := &artifactsFlags{config: fs.String("config", "config.toml", "config `file` (its [artifacts] store)"),
		json: fs.Bool("json", false, "print as JSON"), timeout: fs.Duration("timeout", time.Minute, "bound for reading the store")}
	fs.Var(&f.keys, "key", keyHelp)
	return f
}

// open checks the keys and opens the store of cfg (nil: --config's),
// with the context bounding the reads.
func (f *artifactsFlags) open(c *cli, cfg *config.Config) (_ artifact.Store, _ string, _ context.Context, _ context.CancelFunc, err error) {
	if cfg == nil {
		if cfg, err = c.loadConfig(*f.config); err != nil {
			return nil, "", nil, nil, err
		}
	}
	for _, k := range f.keys {
		if !config.ValidName(k) {
			return nil, "", nil, nil, usagef("--key %q: use 1 to 64 of A-Z a-z 0-9 _ -", k)
		}
	}
	opts, err := cfg.HostOptions(newLogger(cfg.Log, c.stderr))
	if err != nil {
		return nil, "", nil, nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, *f.timeout)
	return opts.Artifacts.Store, opts.Artifacts.Where, ctx, cancel, nil
}

func artifactsList(c *cli, args []string) error {
	fs := c.flagSet("artifacts list", "artifacts [list] [--config FILE] [--key KEY]... [--json]", about("artifacts"))
	f := newArtifactsFlags(fs, "list only this artifact `key` (repeatable)")
	cfg, err := c.parseConfig(fs, f.config, args)
	if err != nil {
		return err
	}
	store, where, ctx, cancel, err := f.open(c, cfg)
	if err != nil {
		return err
	}
	defer cancel()
	ls, err := artifact.List(ctx, store, f.keys...)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if *f.json {
		return printJSON(c.stdout, struct {
			Store string             `json:"store"`
			Keys  []artifact.Listing `json:"keys"`
		}{where, ls})
	}
	return artifact.WriteListing(c.stdout, where, ls, time.Now())
}

func artifactsShow(c *cli, args []string) error {
	fs := c.flagSet("artifacts show", "artifacts show [--config FILE] [--key KEY] [--json] [ID]", about("artifacts-show"))
	f := newArtifactsFlags(fs, "look under this artifact `key` only (repeatable); without ID, show its published artifact")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("unexpected argument %q", pos[1])
	}
	store, where, ctx, cancel, err := f.open(c, nil)
	if err != nil {
		return err
	}
	defer cancel()
	sh, err := artifact.Show(ctx, store, f.keys, strings.Join(pos, ""))
	if errors.Is(err, artifact.ErrNoArtifact) {
		return notFoundf("%s: %v", where, err) // exit 3, like inspect get and kv get
	}
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if *f.json {
		return printJSON(c.stdout, struct {
			Store string `json:"store"`
			artifact.Shown
		}{where, sh})
	}
	return artifact.WriteShown(c.stdout, where, sh, time.Now())
}
