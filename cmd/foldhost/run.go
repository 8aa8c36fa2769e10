package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/config"
)

const runAbout = `Runs every [[fold]] of the config file: each fold watches its bucket,
applies batches through its plugin and commits them to its store under its
data dir, resuming from its cursor after a restart. Serves the HTTP API
(health, readiness, metrics, status, reads) on [http] addr.

With nats.url empty or "embedded", an in-process NATS server with JetStream
(stored under nats.embedded_dir) is started on loopback and its URL printed;
it lives only while 'run' runs.

SIGINT or SIGTERM shuts down gracefully: every fold flushes its pending
batch, then the HTTP server, stores and NATS are closed. A second signal,
or a shutdown that takes longer than shutdown_grace, exits at once (exit
code 1). Signals work from the moment the process starts, also while
plugins load. SIGHUP reloads every fold's plugin and retries every failed
fold from its cursor.

Each store records what it folds (bucket, scope, the stream's identity); a
store that records another source than its fold's config is refused with
both named. --adopt FOLD accepts it once and records the config's: for a
store that really is that fold's (its bucket restored into a new stream).

A fold whose watch stops on an error (a plugin failure, an expired cursor
that cannot be repaired) is "failed": it keeps being served frozen at its
cursor with its lag still measured, /readyz answers 503 naming it, and it
retries from its cursor when its plugin file changes to a module that
validates, on SIGHUP, or on POST /v1/folds/NAME/resume. If it is still
failed at shutdown, 'run' exits with code 1.

POSTs to the HTTP API (export, pause, resume, reload, rebuild) are admin actions,
logged with their caller: served on a loopback [http] addr only (127.0.0.1,
::1, localhost; not 0.0.0.0 or ::, even to a client on this machine),
unless the environment sets FOLDHOST_ADMIN_TOKEN, which every POST must then
bear ("Authorization: Bearer TOKEN").`

func cmdRun(c *cli, args []string) error {
	fs := c.flagSet("run", "run [--config FILE] [--adopt FOLD]...", runAbout)
	configPath := fs.String("config", "config.toml", "config `file`")
	var adopt multiFlag
	fs.Var(&adopt, "adopt", "accept the store of fold `name` although it records another bucket, scope or stream, and record the config's (repeatable)")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	for _, name := range adopt {
		if _, err := cfg.Fold(name); err != nil || name == "" {
			return usagef("--adopt %q: no such fold in the config", name)
		}
	}
	log := newLogger(cfg.Log, c.stderr)
	opts, err := cfg.HostOptions(log)
	if err != nil {
		return err
	}
	for i := range opts.Folds {
		opts.Folds[i].Adopt = slices.Contains(adopt, opts.Folds[i].Name)
	}
	opts.AdminToken = c.adminToken()
	h, err := host.New(opts)
	if err != nil {
		return err
	}
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
	stopHTTP, err := serveHTTP(cfg.HTTP.Addr, h.Handler(), opts.AdminToken != "", log, c.stdout)
	if err != nil {
		return err
	}
	defer stopHTTP()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	wg.Go(func() { reloadOnHUP(ctx, h, hup, log) })

	err = h.Run(ctx)
	log.Info("shut down")
	return err
}

func newLogger(lc config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serveHTTP binds addr, prints the URL, and serves h until the returned
// function is called. The server's Addr is the listener's bound address:
// the HTTP API admits admin actions without a token only when it is
// loopback (a wildcard listener accepts loopback connections too).
func serveHTTP(addr string, h http.Handler, withToken bool, log *slog.Logger, stdout io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	if lh, _, _ := net.SplitHostPort(addr); !isLoopbackHost(lh) {
		if !withToken {
			log.Warn("the HTTP API listens beyond loopback: its reads are open to every client, its admin actions (POST) refused until "+host.AdminTokenEnv+" is set", "addr", addr)
		} else {
			log.Warn("the HTTP API listens beyond loopback: its reads are open to every client, its admin actions (POST) need the admin token", "addr", addr)
		}
	}
	// No Read or WriteTimeout: an export through POST runs as long as its
	// round (a ReadTimeout would also cancel its request's context), and
	// no endpoint reads a body; httpapi bounds the writes of reads itself.
	srv := &http.Server{Addr: ln.Addr().String(), Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "foldhost: HTTP API listening on %s\n", url)
	log.Info("HTTP API listening", "url", url)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn("http shutdown", "err", err)
			_ = srv.Close()
		}
		<-done
	}, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reloadOnHUP reloads every plugin on SIGHUP until ctx ends: each module is
// validated off the hot path and swapped in at its fold's next batch
// boundary; one that fails validation leaves the running module in place.
func reloadOnHUP(ctx context.Context, h *host.Host, hup <-chan os.Signal, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if err := h.ReloadPlugins(ctx); err != nil {
			log.Error("plugin reload refused (SIGHUP); the running modules stay", "err", err)
		} else {
			log.Info("plugins reloaded (SIGHUP)")
		}
	}
}
