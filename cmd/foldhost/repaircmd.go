package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/internal/target"
	"github.com/foldhost/foldhost/protocol"
)

func cmdRepair(c *cli, args []string) error {
	fs := c.flagSet("repair", "repair [--config FILE] [--fold NAME] [--mode relist|restore|auto | --reset] [--json]", about("repair"))
	configPath := fs.String("config", "config.toml", "config `file`")
	name := fs.String("fold", "", "the fold `name` (may be omitted when the config has one fold)")
	modeText := fs.String("mode", "", "the repair `mode`: relist, restore or auto (default: the fold's repair)")
	asJSON := fs.Bool("json", false, "print the repair's record as JSON")
	reset := fs.Bool("reset", false, "refold into a fresh store from the bucket as it is now, keep the old one aside")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	f, err := target.Fold(cfg, *name)
	if err != nil {
		return err
	}
	var mode *protocol.RepairMode
	if *modeText != "" {
		var m protocol.RepairMode
		if err := m.UnmarshalText([]byte(*modeText)); err != nil || m == protocol.RepairNone {
			return usagef("--mode %q: want relist, restore or auto", *modeText)
		}
		mode = &m
	}
	if *reset && mode != nil {
		return usagef("--reset and --mode do not combine")
	}
	opts, err := cfg.HostOptions(newLogger(cfg.Log, c.stderr))
	if err != nil {
		return err
	}
	if *reset {
		return c.reset(opts, f.Name, *asJSON)
	}
	p := progress.New(c.stderr, "foldhost repair: ", 3*time.Second)
	res, err := host.RepairStopped(c.ctx, opts, f.Name, mode, func(r repair.Progress) {
		p.Status(fmt.Sprintf("%s: listed %d, compared %d, folded %d (deleted %d)", r.Phase, r.Listed, r.Diffed, r.Folded, r.Deleted))
	})
	p.End()
	if errors.Is(err, fold.ErrLocked) {
		return fmt.Errorf("%w: stop 'foldhost run' first (a running fold repairs by itself)", err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(res)
	}
	fmt.Fprintf(c.stdout, "repaired fold %s (%s): listed %d, compared %d, folded %d (deleted %d, kept %d), unchanged %d; cursor %d, in %s\n",
		f.Name, res.Plan, res.Listed, res.Diffed, res.Folded, res.Deleted, res.Kept, res.Unchanged, res.Cursor, res.Took)
	return nil
}

func (c *cli) reset(opts host.Options, name string, asJSON bool) error {
	p := progress.New(c.stderr, "foldhost repair --reset: ", 3*time.Second)
	res, err := host.ResetStopped(c.ctx, opts, name, func(st httpapi.Status) {
		p.Status(fmt.Sprintf("refolding: cursor %d of %d, %d delivered", st.Cursor, st.StreamLastSeq, st.Counters.DeliveredSinceStart))
	})
	p.End()
	if errors.Is(err, fold.ErrLocked) {
		return fmt.Errorf("%w: stop 'foldhost run' first", err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(c.stdout).Encode(res)
	}
	fmt.Fprintf(c.stdout, "refolded fold %s into a fresh store: cursor %d, %d updates, in %s; the old store is kept at %s (remove it when satisfied)\n",
		res.Fold, res.Cursor, res.Keys, res.Took.Round(time.Millisecond), res.Kept)
	return nil
}
