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
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
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
plugins load.

A fold that stops on an error (expired cursor, plugin failure) keeps being
served frozen at its cursor, /readyz answers 503 naming it, and 'run' exits
with code 1 when it is later shut down.`

func cmdRun(c *cli, args []string) error {
	fs := c.flagSet("run", "run [--config FILE]", runAbout)
	configPath := fs.String("config", "config.toml", "config `file`")
	cfg, err := c.parseConfig(fs, configPath, args)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.Log, c.stderr)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d := &daemon{cfg: cfg, log: logger, stdout: c.stdout, hup: hup}
	err = d.run(c.ctx)
	if err != nil && !d.started && c.ctx.Err() != nil {
		// A signal during the start: a shutdown, not a failure.
		logger.Info("start interrupted by a signal", "err", err)
		return nil
	}
	return err
}

func newLogger(lc LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// daemon is one `foldhost run`.
type daemon struct {
	cfg    *Config
	log    *slog.Logger
	stdout io.Writer
	// hup delivers SIGHUP: reload every fold's plugin now (an explicit
	// request; plugin files are also watched). nil in tests.
	hup <-chan os.Signal

	cleanup []func() // run in reverse order on exit
	started bool     // every fold runs; set before waiting for the signal
}

func (d *daemon) defer_(f func()) { d.cleanup = append(d.cleanup, f) }

func (d *daemon) close() {
	for i := len(d.cleanup) - 1; i >= 0; i-- {
		d.cleanup[i]()
	}
	d.cleanup = nil
}

// run starts everything, waits for ctx (the signal), then shuts down in
// order: folds (each flushes its pending batch), HTTP, stores, plugins,
// NATS.
func (d *daemon) run(ctx context.Context) error {
	defer d.close()
	cfg := d.cfg

	// Stores first: a store locked by another foldhost fails the start
	// before anything touches NATS.
	stores := make([]*fold.Store, len(cfg.Folds))
	for i, f := range cfg.Folds {
		flog := d.log.With("fold", f.Name)
		store, err := openStore(f, flog)
		if err != nil {
			return err
		}
		d.defer_(func() {
			if err := store.Close(); err != nil {
				flog.Error("closing store failed", "err", err)
			}
		})
		stores[i] = store
		if err := resetStageDir(f); err != nil {
			return err
		}
	}
	plugins := make([]fold.Plugin, len(cfg.Folds))
	for i, f := range cfg.Folds {
		p, closeFn, err := loadPlugin(ctx, f, cfg.wasmCacheDir(), d.log.With("fold", f.Name))
		if err != nil {
			return fmt.Errorf("fold %s: load plugin: %w", f.Name, err)
		}
		d.defer_(func() {
			if err := closeFn(); err != nil {
				d.log.Warn("closing plugin failed", "fold", f.Name, "err", err)
			}
		})
		plugins[i] = p
	}
	go d.reloadOnHUP(ctx, plugins)

	url := cfg.NATS.URL
	conn := cfg.NATS.connOptions(url)
	if cfg.NATS.Embedded {
		srv, err := d.startEmbedded()
		if err != nil {
			return err
		}
		url = srv.ClientURL()
		conn = natskv.ConnOptions{URL: url, Name: "foldhost", Timeout: cfg.NATS.ConnectTimeout}
	}
	d.log.Info("connecting to NATS", "url", natskv.Redact(conn.URL))
	nc, err := natskv.Connect(conn)
	if err != nil {
		return err
	}
	d.defer_(nc.Close)
	d.log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())

	exp, err := newExporter(cfg, nc, d.log)
	if err != nil {
		return err
	}
	d.log.Info("artifact store", "store", exp.where, "lease_bucket", cfg.Artifacts.LeaseBucket,
		"lease_ttl", cfg.Artifacts.LeaseTTL, "holder", cfg.Artifacts.Holder)
	metrics := httpapi.NewMetrics()
	runners := make([]*runner, len(cfg.Folds))
	folds := make([]httpapi.Fold, len(cfg.Folds))
	for i, f := range cfg.Folds {
		bucket, err := natskv.OpenBucket(ctx, nc, f.CreateBucket, natskv.Options{RequestTimeout: cfg.NATS.RequestTimeout})
		if err != nil {
			return fmt.Errorf("fold %s: %w", f.Name, err)
		}
		runners[i] = newRunner(f, stores[i], bucket, plugins[i], exp, d.log.With("fold", f.Name), metrics,
			cfg.NATS.HeadPollInterval, cfg.Log.ProgressInterval)
		folds[i] = runners[i]
	}
	metrics.Track(folds)

	if err := d.serveHTTP(httpapi.NewHandler(httpapi.Options{Folds: folds, Metrics: metrics, Logger: d.log})); err != nil {
		return err
	}

	d.started = true
	var wg sync.WaitGroup
	errs := make([]error, len(runners))
	for i, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.run(ctx)
		}()
	}
	<-ctx.Done()
	d.log.Info("shutting down: flushing pending batches")
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("fold %s stopped on an error: %w", runners[i].Name(), err))
		}
	}
	d.close()
	d.log.Info("shut down")
	return errors.Join(failed...)
}

// startEmbedded starts the in-process NATS server and prints its URL.
func (d *daemon) startEmbedded() (*embeddednats.Server, error) {
	n := d.cfg.NATS
	host, portStr, _ := net.SplitHostPort(n.EmbeddedListen) // validated
	port, _ := strconv.Atoi(portStr)
	if err := os.MkdirAll(n.EmbeddedDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	srv, err := embeddednats.Start(embeddednats.Options{Dir: n.EmbeddedDir, Host: host, Port: port, Logs: n.EmbeddedLogs})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS on %s: %w", n.EmbeddedListen, err)
	}
	d.defer_(srv.Shutdown)
	fmt.Fprintf(d.stdout, "foldhost: embedded NATS server listening on %s (JetStream in %s)\n", srv.ClientURL(), n.EmbeddedDir)
	d.log.Info("embedded NATS server started", "url", srv.ClientURL(), "dir", n.EmbeddedDir)
	return srv, nil
}

// openStore opens a fold's store, creating its data dir. A store in use
// (another foldhost, or another fold of this config) fails with
// fold.ErrLocked, whose message says so.
func openStore(f FoldConfig, log *slog.Logger) (*fold.Store, error) {
	store, _, err := fold.Open(f.DataDir, fold.Options{Sync: f.Sync, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("fold %s: %w", f.Name, err)
	}
	return store, nil
}

// serveHTTP binds the API's address, prints it, and serves until close.
func (d *daemon) serveHTTP(h http.Handler) error {
	addr := d.cfg.HTTP.Addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	if host, _, _ := net.SplitHostPort(addr); !isLoopbackHost(host) {
		d.log.Warn("the HTTP API has no authentication and listens beyond loopback", "addr", addr)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("http server failed", "err", err)
		}
	}()
	d.defer_(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			d.log.Warn("http shutdown", "err", err)
			_ = srv.Close()
		}
		<-done
	})
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(d.stdout, "foldhost: HTTP API listening on %s\n", url)
	d.log.Info("HTTP API listening", "url", url)
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reloadOnHUP reloads every WASM plugin on SIGHUP: each module is validated
// off the hot path and swapped in at its fold's next batch boundary; one
// that fails validation leaves the running module in place.
func (d *daemon) reloadOnHUP(ctx context.Context, plugins []fold.Plugin) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.hup:
		}
		for i, p := range plugins {
			if r, ok := p.(interface{ Reload(context.Context) error }); ok {
				name := d.cfg.Folds[i].Name
				if err := r.Reload(ctx); err != nil {
					d.log.Error("plugin reload refused (SIGHUP); the running module stays", "fold", name, "err", err)
				} else {
					d.log.Info("plugin reloaded (SIGHUP)", "fold", name)
				}
			}
		}
	}
}
