package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/foldhost/foldhost/internal/fleetview"
	"github.com/foldhost/foldhost/internal/target"
)

func cmdFleet(c *cli, args []string) error {
	fs := c.flagSet("fleet", "fleet status [--url URL | --config FILE] [--json]", about("fleet"))
	base := fs.String("url", "", "a node's HTTP API `URL` (default: the config's http.addr)")
	configPath := fs.String("config", "config.toml", "config `file` (for its http.addr)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "status" {
		return usagef("want: fleet status")
	}
	if *base == "" {
		cfg, err := c.loadConfig(*configPath)
		if err != nil {
			return err
		}
		if *base, err = target.DaemonURL(cfg); err != nil {
			return fmt.Errorf("foldhost's HTTP API: %w", err)
		}
	}
	folds, err := fleetview.Fetch(c.ctx, strings.TrimRight(*base, "/"))
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(folds)
	}
	return fleetview.WriteTable(c.stdout, folds)
}
