package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/config"
)

const artifactsAbout = `Lists what the config's artifact store ([artifacts]: a local directory or
S3) holds: for every artifact key (every fold and node that exports to it,
not only this config's folds), its payloads, which one is published (the
one 'bootstrap' and a restore download) and at which cursor, their sizes and
when each was written. The others are not published: older exports, which
export rounds prune once they are 4 x lease_ttl old, exports that lost to a
newer one, or one whose round died before it published. Reads only: nothing
is changed.`

func cmdArtifacts(c *cli, args []string) error {
	fs := c.flagSet("artifacts", "artifacts [--config FILE] [--key KEY]... [--json]", artifactsAbout)
	configPath := fs.String("config", "config.toml", "config `file` (its [artifacts] store)")
	var keys multiFlag
	fs.Var(&keys, "key", "list only this artifact `key` (repeatable)")
	asJSON := fs.Bool("json", false, "print the listing as JSON")
	timeout := fs.Duration("timeout", time.Minute, "bound for listing the store")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if !config.ValidName(k) {
			return usagef("--key %q: use 1 to 64 of A-Z a-z 0-9 _ -", k)
		}
	}
	opts, err := cfg.HostOptions(newLogger(cfg.Log, c.stderr))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, *timeout)
	defer cancel()
	ls, err := artifact.List(ctx, opts.Artifacts.Store, keys...)
	if err != nil {
		return fmt.Errorf("%s: %w", opts.Artifacts.Where, err)
	}
	if *asJSON {
		return printJSON(c.stdout, struct {
			Store string             `json:"store"`
			Keys  []artifact.Listing `json:"keys"`
		}{opts.Artifacts.Where, ls})
	}
	if len(ls) == 0 {
		fmt.Fprintf(c.stdout, "no artifacts in %s ('foldhost export' publishes them)\n", opts.Artifacts.Where)
		return nil
	}
	fmt.Fprintf(c.stdout, "artifact store %s\n", opts.Artifacts.Where)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPAYLOAD\tCURSOR\tSIZE\tWRITTEN\tSTATE")
	for _, l := range ls {
		switch {
		case l.PointerError != "":
			fmt.Fprintf(tw, "%s\t(corrupt pointer: %s; the next export replaces it)\t\t\t\t\n", l.Key, l.PointerError)
		case l.Published == nil && len(l.Payloads) == 0:
			fmt.Fprintf(tw, "%s\t(nothing published)\t\t\t\t\n", l.Key)
		case l.Published != nil && l.Published.Missing:
			fmt.Fprintf(tw, "%s\t%s\t%d\t\t\tpublished, payload MISSING\n", l.Key, l.Published.Payload, l.Published.Cursor)
		}
		for _, p := range l.Payloads {
			cursor, note := "-", "not published"
			if p.Published {
				cursor, note = strconv.FormatUint(l.Published.Cursor, 10), "published"
				if len(l.Published.Scope) > 0 {
					note += ", scope " + strings.Join(l.Published.Scope, " ")
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.Key, p.Name, cursor, humanBytes(p.Size), p.Modified.UTC().Format(time.RFC3339), note)
		}
	}
	return tw.Flush()
}
