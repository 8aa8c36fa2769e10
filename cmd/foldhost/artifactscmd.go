package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/config"
)

const artifactsAbout = `Lists what the config's artifact store ([artifacts]: a local directory or
S3) holds: for every artifact key (every fold and node that exports to it,
not only this config's folds), its artifacts, each with its ID, the cursor,
bucket, scope and plugin identity its manifest records, its size and age,
and which one is published (the pointer's: the one 'bootstrap' and a restore
download). The others are not published: older exports, which export
rounds prune once they are 4 x lease_ttl old, exports that lost to a newer
one, or one whose round died before it published. 'artifacts' alone lists
too. Reads only: nothing is changed.`

const artifactsShowAbout = `Shows one artifact of the config's artifact store in full: its key, ID,
payload, size and age, whether it is published, and its whole manifest
(cursor, origin, plugin identity, formats, every file with its size and
BLAKE3 hash). ID is an artifact ID from 'artifacts list' or a unique prefix
of one; without it, the published artifact of --key (or of the store's only
key). Reads only.`

// cmdArtifacts is `artifacts [list|show] ...`; a first argument that is
// neither (a flag, or none) lists, as the command did before it had
// subcommands.
func cmdArtifacts(c *cli, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return artifactsList(c, args[1:])
		case "show":
			return artifactsShow(c, args[1:])
		}
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
	f := &artifactsFlags{}
	f.config = fs.String("config", "config.toml", "config `file` (its [artifacts] store)")
	fs.Var(&f.keys, "key", keyHelp)
	f.json = fs.Bool("json", false, "print as JSON")
	f.timeout = fs.Duration("timeout", time.Minute, "bound for reading the store")
	return f
}

// store checks the keys and opens the config's store.
func (f *artifactsFlags) store(c *cli, cfg *config.Config) (artifact.Store, string, error) {
	for _, k := range f.keys {
		if !config.ValidName(k) {
			return nil, "", usagef("--key %q: use 1 to 64 of A-Z a-z 0-9 _ -", k)
		}
	}
	opts, err := cfg.HostOptions(newLogger(cfg.Log, c.stderr))
	if err != nil {
		return nil, "", err
	}
	return opts.Artifacts.Store, opts.Artifacts.Where, nil
}

func artifactsList(c *cli, args []string) error {
	fs := c.flagSet("artifacts list", "artifacts [list] [--config FILE] [--key KEY]... [--json]", artifactsAbout)
	f := newArtifactsFlags(fs, "list only this artifact `key` (repeatable)")
	cfg, err := c.parseConfig(fs, f.config, args)
	if err != nil {
		return err
	}
	store, where, err := f.store(c, cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, *f.timeout)
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
	fs := c.flagSet("artifacts show", "artifacts show [--config FILE] [--key KEY] [--json] [ID]", artifactsShowAbout)
	f := newArtifactsFlags(fs, "look under this artifact `key` only (repeatable); without ID, show its published artifact")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("unexpected argument %q", pos[1])
	}
	cfg, err := c.loadConfig(*f.config)
	if err != nil {
		return err
	}
	store, where, err := f.store(c, cfg)
	if err != nil {
		return err
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	ctx, cancel := context.WithTimeout(c.ctx, *f.timeout)
	defer cancel()
	sh, err := artifact.Show(ctx, store, f.keys, id)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if *f.json {
		return printJSON(c.stdout, struct {
			Store string `json:"store"`
			artifact.Shown
		}{where, sh})
	}
	fmt.Fprintf(c.stdout, "artifact store %s\n", where)
	return artifact.WriteShown(c.stdout, sh, time.Now())
}
