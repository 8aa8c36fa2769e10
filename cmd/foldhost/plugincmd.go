package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/plugincheck"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/internal/pluginrecords"
	"github.com/foldhost/foldhost/internal/target"
	"github.com/foldhost/foldhost/internal/textfmt"
)

const pluginsAbout = `Lists the plugin module each node runs, for the folds that load their
module from a NATS object store (plugin = "nats-object://BUCKET/NAME"): every
such node records it in the KV bucket ` + pluginobj.DefaultRecordBucket + ` when it loads
or reloads one, and every 30 s. SEEN is the age of that record: a node that
stopped stops renewing it (records expire after a day).

The server: --nats URL; else the config's (--config FILE; an embedded
server's listen address while 'foldhost run' runs).`

func cmdPlugins(c *cli, args []string) error {
	fs := c.flagSet("plugins", "plugins [--config FILE] [--nats URL] [--json]", pluginsAbout)
	configPath := fs.String("config", "", "config `file` (server and credentials)")
	natsURL := fs.String("nats", "", "NATS server `url` (overrides the config)")
	asJSON := fs.Bool("json", false, "print the records as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "bound for connecting and listing")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	var cfg *config.Config
	if *configPath != "" {
		if cfg, err = config.Load(*configPath, c.getenv); err != nil {
			return err
		}
	}
	nc, js, err := target.JetStream(cfg, *natsURL, c.getenv, *timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(c.ctx, *timeout)
	defer cancel()
	recs, unreadable, err := pluginobj.List(ctx, js, pluginobj.DefaultRecordBucket)
	if err != nil {
		return err
	}
	if unreadable > 0 {
		fmt.Fprintf(c.stderr, "foldhost: %d records of %s could not be read\n", unreadable, pluginobj.DefaultRecordBucket)
	}
	if *asJSON {
		if recs == nil {
			recs = []pluginobj.Record{}
		}
		return printJSON(c.stdout, recs)
	}
	if len(recs) == 0 {
		fmt.Fprintf(c.stdout, "no node records a plugin module (bucket %s is empty or missing)\n", pluginobj.DefaultRecordBucket)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, row := range append([][]string{pluginrecords.Header}, pluginrecords.Rows(recs, time.Now())...) {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func cmdPlugin(c *cli, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			return cmdPluginCheck(c, args[1:])
		case "test":
			return cmdPluginTest(c, args[1:])
		case "call":
			return cmdPluginCall(c, args[1:])
		case "new":
			return cmdPluginNew(c, args[1:])
		}
	}
	fs := c.flagSet("plugin", "plugin push FILE [--fold NAME | --to nats-object://BUCKET/NAME] [--config FILE] [--nats URL]\n"+
		"plugin check FILE [--memory-mb N] [--max-mb N] [--call-timeout D]\n"+
		"plugin test FILE FIXTURE... [--update] [--batch-size N]\n"+
		"plugin call FILE QUERY [--input TEXT | --input-file FILE] [--fixture FIXTURE]\n"+
		"plugin new go|c|rust|assemblyscript DIR", about("plugin"))
	configPath := fs.String("config", "", "config `file` (the fold's plugin setting, server and credentials)")
	natsURL := fs.String("nats", "", "NATS server `url` (overrides the config)")
	foldName := fs.String("fold", "", "push to the object of fold `name`")
	to := fs.String("to", "", "push to this nats-object://BUCKET/NAME `reference` instead of a fold's")
	timeout := fs.Duration("timeout", time.Minute, "bound for connecting and uploading")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "push" {
		return usagef("want: plugin push FILE, check FILE, test FILE FIXTURE..., call FILE QUERY or new LANG DIR")
	}
	if len(pos) != 2 {
		return usagef("push takes one FILE")
	}
	file := pos[1]
	var cfg *config.Config
	if *configPath != "" {
		if cfg, err = config.Load(*configPath, c.getenv); err != nil {
			return err
		}
	}
	ref, limits, err := target.PluginObject(cfg, *foldName, *to)
	if err != nil {
		return err
	}
	b, err := files.ReadRegular(file, limits.MaxModuleBytes)
	if err != nil {
		return err
	}
	id, err := plugincheck.Validate(c.ctx, b, limits)
	if r := (*plugincheck.Refused)(nil); errors.As(err, &r) {
		return fmt.Errorf("%s is not a plugin foldhost can run (nothing pushed): %w", file, r.Err)
	}
	if err != nil {
		return err
	}
	if ref.Pin != "" && ref.Pin != id.SHA256 {
		fmt.Fprintf(c.stderr, "foldhost: warning: %s pins sha256 %s: its nodes refuse this module (sha256 %s) until the pin changes\n", ref, ref.Pin, id.SHA256)
	}
	nc, js, err := target.JetStream(cfg, *natsURL, c.getenv, *timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(c.ctx, *timeout)
	defer cancel()
	ref.Pin = ""
	info, err := pluginobj.Push(ctx, js, ref, b, fmt.Sprintf("%s %s (view schema %d)", id.Name, id.Version, id.ViewSchema))
	if err != nil {
		return err
	}
	return printJSON(c.stdout, struct {
		Object     string `json:"object"`
		Size       uint64 `json:"size"`
		Digest     string `json:"digest"`
		SHA256     string `json:"sha256"`
		Name       string `json:"name"`
		Version    string `json:"version"`
		ViewSchema uint32 `json:"view_schema"`
	}{ref.String(), info.Size, info.Digest, id.SHA256, id.Name, id.Version, id.ViewSchema})
}

// humanBytes is textfmt's, under the name the commands use.
var humanBytes = textfmt.HumanBytes
