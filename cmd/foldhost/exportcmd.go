package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/config"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/internal/target"
)

func cmdExport(c *cli, args []string) error {
	fs := c.flagSet("export", "export [--config FILE] [--fold NAME]... [--force] [--json]", about("export"))
	configPath := fs.String("config", "config.toml", "config `file`")
	var names multiFlag
	fs.Var(&names, "fold", "export only the fold `name` (repeatable)")
	force := fs.Bool("force", false, "export without the fleet's lease")
	asJSON := fs.Bool("json", false, "print each result as a JSON object")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	folds := cfg.Folds
	if len(names) > 0 {
		folds = nil
		for _, n := range names {
			f, err := target.Fold(cfg, n)
			if err != nil {
				return err
			}
			folds = append(folds, f)
		}
	}
	log := newLogger(cfg.Log, c.stderr)
	opts, err := cfg.HostOptions(log)
	if err != nil {
		return err
	}
	var failed []error
	for _, f := range folds {
		res, err := host.ExportStopped(c.ctx, opts, f.Name, *force)
		if errors.Is(err, fold.ErrLocked) {
			res, err = target.ExportViaDaemon(c.ctx, cfg, f, *force, c.adminToken(), log)
		}
		switch {
		case errors.Is(err, host.ErrNoStore):
			err = fmt.Errorf("%w: nothing to export", err)
		case errors.Is(err, host.ErrLeaseUnavailable):
			err = fmt.Errorf("%w (--force exports without it)", err)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("fold %s: %w", f.Name, err))
			res = host.ExportResult{Fold: f.Name, Key: f.ArtifactKey, Outcome: host.ExportFailed, Error: err.Error(), Forced: *force}
			if !*asJSON {
				continue
			}
		}
		if *asJSON {
			b, _ := json.Marshal(res)
			fmt.Fprintf(c.stdout, "%s\n", b)
		} else {
			fmt.Fprintln(c.stdout, res.String())
		}
	}
	return errors.Join(failed...)
}

// adminToken is the admin token the commands send to the daemon (and the
// daemon requires): the environment's FOLDHOST_ADMIN_TOKEN, trimmed (a
// token file read into the variable brings its newline).
func (c *cli) adminToken() string {
	v, _ := c.getenv(host.AdminTokenEnv)
	return strings.TrimSpace(v)
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdBootstrap(c *cli, args []string) error {
	fs := c.flagSet("bootstrap", "bootstrap [--config FILE] [--fold NAME] [--key KEY]", about("bootstrap"))
	configPath := fs.String("config", "config.toml", "config `file`")
	name := fs.String("fold", "", "the fold `name` (may be omitted when the config has one fold)")
	key := fs.String("key", "", "the artifact `key` (default: the fold's artifact_key)")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	f, err := target.Fold(cfg, *name)
	if err != nil {
		return err
	}
	if *key != "" && !config.ValidName(*key) {
		return usagef("--key %q: use 1 to 64 of A-Z a-z 0-9 _ -", *key)
	}
	opts, err := cfg.HostOptions(newLogger(cfg.Log, c.stderr))
	if err != nil {
		return err
	}
	p := progress.New(c.stderr, "foldhost bootstrap: downloaded ", 3*time.Second)
	start := time.Now()
	res, err := host.Bootstrap(c.ctx, opts, f.Name, host.BootstrapOptions{
		Key: *key,
		OnManifest: func(m artifact.Manifest) {
			cur, _ := m.DecodeCursor() // checked
			fmt.Fprintf(c.stderr, "foldhost bootstrap: fold %s from %s key %q: artifact at cursor %d, %d files\n",
				f.Name, opts.Artifacts.Where, cmp.Or(*key, f.ArtifactKey), cur.Rev, len(m.Files))
		},
		Progress: func(read, size int64) {
			rate := int64(float64(read) / max(time.Since(start).Seconds(), 1e-9))
			p.Update(read, size, fmt.Sprintf("%s / %s, %s/s", humanBytes(read), humanBytes(size), humanBytes(rate)))
		},
	})
	p.End()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "bootstrapped fold %s from %s key %q: cursor %d, %s in %s (%s/s), verified; 'foldhost run' resumes from cursor %d\n",
		res.Fold, res.Store, res.Key, res.Cursor, humanBytes(res.Bytes), res.Took.Round(time.Millisecond),
		humanBytes(int64(float64(res.Bytes)/max(res.Took.Seconds(), 1e-9))), res.Cursor)
	if res.Warning != "" {
		fmt.Fprintf(c.stderr, "foldhost bootstrap: warning: %s\n", res.Warning)
	}
	return nil
}
