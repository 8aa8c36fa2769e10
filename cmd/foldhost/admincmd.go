package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/target"
)

var adminActions = []string{"pause", "resume", "reload", "rebuild", "release-effects", "replay"}

func cmdAdmin(c *cli, args []string) error {
	fs := c.flagSet("admin", "admin ACTION [--config FILE] [--fold NAME] [--key KEY]", about("admin"))
	configPath := fs.String("config", "config.toml", "config `file`")
	name := fs.String("fold", "", "the fold `name` (may be omitted when the config has one fold)")
	key := fs.String("key", "", "replay: only the dead letters of `key`")
	// The action is the one positional argument, wherever it stands among
	// the flags (as for every command).
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	var action string
	if len(pos) > 0 {
		action = pos[0]
	}
	if !slices.Contains(adminActions, action) {
		return usagef("want an action: %s (got %q)", strings.Join(adminActions, ", "), action)
	}
	if len(pos) > 1 {
		return usagef("unexpected argument %q", pos[1])
	}
	cfg, err := c.loadConfig(*configPath)
	if err != nil {
		return err
	}
	if *key != "" && action != "replay" {
		return usagef("--key goes with replay only")
	}
	f, err := target.Fold(cfg, *name)
	if err != nil {
		return err
	}
	base, err := target.DaemonURL(cfg)
	if err != nil {
		return fmt.Errorf("foldhost's HTTP API: %w", err)
	}
	q, path := url.Values{}, action
	if action == "replay" {
		path = "deadletter/replay"
		if *key != "" {
			q.Set("key", *key)
		}
	}
	var out json.RawMessage
	if err := httpapi.Admin(c.ctx, base, f.Name, path, q, c.adminToken(), &out); err != nil {
		return fmt.Errorf("fold %s: %s: %w", f.Name, action, err)
	}
	fmt.Fprintf(c.stdout, "%s\n", out)
	return nil
}
