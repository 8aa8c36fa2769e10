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
	"github.com/foldhost/foldhost/protocol"
)

const repairAbout = `Runs one cursor-expiry repair of a stopped fold now, whether or not its
cursor expired ('foldhost run' repairs by itself when it does): it connects
to NATS (starting the embedded server of an embedded config), checks the
store's origin, reads the bucket's retention and plans the repair as a
running fold would:

  relist   the key-listing repair: the bucket's listing, matched as it
           comes against the fold's entries sorted on disk, the
           difference folded through the plugin (keys the bucket no
           longer lists are deleted); refused
           where the listing is not the truth (max_age, per-message TTLs,
           discard-old limits, or the fold saw eviction once).
  restore  from the newest artifact under the fold's artifact_key, if it
           is of the same bucket and stream, covers the scope, and is
           ahead of the fold's cursor (a node's own exports never are).
  auto     relist where the listing is the truth, restore elsewhere.

--reset refolds the fold from the bucket as it is now into a fresh store
(a state-sync through the plugin), swaps it in once it caught up, and keeps
the old store beside the data dir: the way out for a bucket deleted and made
again while the fold was down (the start then refuses the store, naming
both streams), where no repair applies.

--mode overrides the fold's configured repair. Progress goes to stderr, the
result to stdout (--json: the repair's record). Exits 1 when the repair is
refused or fails; the fold is then as it was (a repair interrupted midway
leaves the old cursor, and the next repair or run finishes it).`

func cmdRepair(c *cli, args []string) error {
	fs := c.flagSet("repair", "repair [--config FILE] [--fold NAME] [--mode relist|restore|auto | --reset] [--json]", repairAbout)
	configPath := fs.String("config", "config.toml", "config `file`")
	name := fs.String("fold", "", "the fold `name` (may be omitted when the config has one fold)")
	modeText := fs.String("mode", "", "the repair `mode`: relist, restore or auto (default: the fold's repair)")
	asJSON := fs.Bool("json", false, "print the repair's record as JSON")
	reset := fs.Bool("reset", false, "refold into a fresh store from the bucket as it is now, keep the old one aside")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	f, err := pickFold(cfg, *name)
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
