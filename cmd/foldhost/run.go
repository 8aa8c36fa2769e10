package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/internal/daemon"
)

func cmdRun(c *cli, args []string) error {
	fs := c.flagSet("run", "run [--config FILE] [--adopt FOLD]...", about("run"))
	configPath := fs.String("config", "config.toml", "config `file`")
	var adopt multiFlag
	fs.Var(&adopt, "adopt", "accept the store of fold `name` although it records another bucket, scope or stream, and record the config's (repeatable)")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	for _, name := range adopt {
		if _, err := cfg.Fold(name); err != nil || name == "" {
			return usagef("--adopt %q: %v", name, cmp.Or(err, errors.New("give a fold's name")))
		}
	}
	log := newLogger(cfg.Log, c.stderr)
	opts, err := cfg.HostOptions(log)
	if err != nil {
		return err
	}
	for i := range opts.Folds {
		opts.Folds[i].Adopt = host.Adopts(adopt, opts.Folds[i].Name)
	}
	opts.AdminToken = c.adminToken()
	h, err := host.New(opts)
	if err != nil {
		return err
	}
	ln, err := daemon.Listen(cfg.HTTP.Addr) // before NATS and the buckets
	if err != nil {
		return err
	}
	defer ln.Close() // once served, closed by the server too
	defer h.Close()
	if err := h.Start(c.ctx); err != nil {
		if c.ctx.Err() != nil { // a signal during the start: a shutdown, not a failure
			log.Info("start interrupted by a signal", "err", err)
			return nil
		}
		return err
	}
	if url := h.EmbeddedURL(); url != "" {
		fmt.Fprintf(c.stdout, "foldhost: embedded NATS server listening on %s (JetStream in %s)\n", url, cfg.NATS.EmbeddedDir)
	}
	defer daemon.Serve(ln, cfg.HTTP.Addr, h.Handler(), opts.AdminToken != "", log, c.stdout)()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	wg.Go(func() { daemon.ReloadOnHUP(ctx, h, hup, log) })

	err = h.Run(ctx)
	log.Info("shut down")
	return err
}

// newLogger is the logger of the config's [log] section (daemon.Logger).
var newLogger = daemon.Logger
