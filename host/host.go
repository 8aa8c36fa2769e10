package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// Host runs folds: each watches its bucket, applies batches through its
// plugin and commits to its store, resuming from its cursor after a
// restart; it exports artifacts on schedule or on demand and serves its
// folds' status and data (Handler).
//
// The life of a Host: New (checks the options, starts nothing), Start
// (opens every store, loads every plugin, starts or connects to NATS,
// opens the buckets: a failure undoes what was done; a fold whose plugin
// object has not been pushed is left waiting, not a failure), Run (folds
// until its context ends: each fold flushes its pending batch; a waiting
// fold starts once its module loads), Close (releases
// everything, waiting for every goroutine the host started). Start and Run
// honour their contexts; Close may be called at any point after New.
type Host struct {
	o   Options
	log *slog.Logger

	folds   []*Fold
	units   map[string]protocol.Unit // each fold's unit, by the fold's name (every read asks)
	env     foldrun.Env              // what the folds share, filled as Start goes
	fleet   *fleet.Fleet             // nil: no fleet (every fold runs here)
	runner  *fleetRunner
	reads   *fleetReads // a fleet's reads routed to their owner (nil: no fleet)
	metrics *httpapi.Metrics
	srv     *embeddednats.Server
	nc      *nats.Conn
	health  natskv.Health // the connection's state, for status and readiness
	exp     *round.Exporter

	// The NATS account the host's connection is in ("" with the reason
	// when the server did not say), for the admin service's caller check.
	adminAccount, adminAccountErr string

	closers []func() // undone in reverse by Close
	started bool
	ran     bool
}

// New checks o and returns a Host that has started nothing.
func New(o Options) (*Host, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("host: invalid options: %w", err)
	}
	units := make(map[string]protocol.Unit, len(o.Folds))
	for _, f := range o.Folds {
		units[f.Name] = f.Unit()
	}
	return &Host{o: o, log: o.Logger, units: units}, nil
}

// Start opens the folds' stores (first: a store in use fails the start
// before anything touches NATS), loads their plugins, starts the embedded
// NATS server or connects to NATS, and opens the buckets. On an error (or
// when ctx ends) what was started is released before it returns.
func (h *Host) Start(ctx context.Context) (err error) {
	if h.started {
		return errors.New("host: started twice")
	}
	h.started = true
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	// Each phase of the start is logged at debug level with its time: a
	// slow start says where it went.
	t0, last := time.Now(), time.Now()
	phase := func(name string) {
		now := time.Now()
		h.log.Debug("start phase done", "phase", name, "took", now.Sub(last).Round(time.Microsecond).String(), "since_start", now.Sub(t0).Round(time.Microsecond).String())
		last = now
	}
	h.env = foldrun.Env{Logger: h.log, Health: &h.health, Artifacts: h.o.Artifacts.Store, ArtifactsWhere: h.o.Artifacts.Where,
		Node: h.o.Admin.Node, PluginCacheDir: h.o.PluginCacheDir, RequestTimeout: h.o.NATS.RequestTimeout,
		DisconnectGrace: h.o.NATS.DisconnectGrace, HeadPollInterval: h.o.HeadPollInterval, ProgressInterval: h.o.ProgressInterval,
		Fleet: h.o.Fleet.Name != ""}
	for _, f := range h.o.Folds {
		if f.Partition == 0 {
			if err := checkPartitionLayout(f); err != nil {
				return err
			}
		}
	}
	h.folds = make([]*Fold, len(h.o.Folds))
	warm := h.toWarmUp() // opened once warmed up, after NATS connects
	for i := range h.o.Folds {
		if !warm[i] {
			if err := h.openFold(ctx, i, false); err != nil {
				return err
			}
		}
	}
	phase("stores opened")
	// Plugin files load before NATS is touched (a bad module fails the
	// start first); modules from a NATS object store once it is connected.
	loadPlugins := func(fromObjectStore bool) error {
		for _, f := range h.folds {
			if f == nil || f.UsesObjectStore() != fromObjectStore {
				continue
			}
			if err := h.loadPlugin(ctx, f); err != nil {
				return err
			}
		}
		return nil
	}
	if err := loadPlugins(false); err != nil {
		return err
	}
	phase("plugin files loaded")
	if err := h.connect(ctx); err != nil {
		return err
	}
	phase("NATS connected")
	// A warm-up downloads and installs an artifact: I/O mostly, so the
	// folds warm up side by side, warmUpParallel at a time; only the
	// units the placement will likely give this node (warmShare).
	share := h.warmShare(ctx, warm)
	var wg sync.WaitGroup
	slots := make(chan struct{}, warmUpParallel)
	for i := range warm {
		if share[i] {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				h.warmUp(ctx, h.o.Folds[i])
			})
		}
	}
	wg.Wait()
	for i := range warm {
		if warm[i] {
			if err := h.openFold(ctx, i, true); err != nil {
				return err
			}
		}
	}
	phase("folds warmed up")
	if err := loadPlugins(true); err != nil {
		return err
	}
	phase("object-store plugins loaded")
	h.exp = h.o.exporter(h.nc)
	h.env.Exporter = h.exp
	if h.exp != nil {
		h.log.Info("artifact store", "store", h.o.Artifacts.Where, "lease_bucket", h.o.Artifacts.LeaseBucket,
			"lease_ttl", h.o.Artifacts.LeaseTTL.String(), "holder", h.o.Artifacts.Holder)
	}
	h.metrics = httpapi.NewMetrics()
	h.env.Metrics = h.metrics
	for _, f := range h.folds {
		if err := f.Attach(ctx, h.nc); err != nil {
			return err
		}
	}
	phase("buckets opened")
	if err := h.settleOrigins(ctx); err != nil {
		return err
	}
	phase("origins checked")
	h.metrics.Track(h.httpFolds())
	if fl := h.o.Fleet; fl.Name != "" {
		if err := h.joinFleet(ctx); err != nil {
			return err
		}
	}
	if h.o.Admin.NATS {
		actx, cancel := context.WithCancel(context.Background())
		stop, err := h.serveAdmin(actx)
		if err != nil {
			cancel()
			return err
		}
		h.closers = append(h.closers, func() { cancel(); stop() })
	}
	return nil
}

// openFold opens fold i's store (New); withPlugin also loads its plugin
// file (one from the object store loads with the others).
func (h *Host) openFold(ctx context.Context, i int, withPlugin bool) error {
	f, err := foldrun.New(h.o.Folds[i], &h.env)
	if err != nil {
		return err
	}
	h.folds[i] = f
	h.closers = append(h.closers, f.CloseStore)
	if withPlugin && !f.UsesObjectStore() {
		return h.loadPlugin(ctx, f)
	}
	return nil
}

func (h *Host) loadPlugin(ctx context.Context, f *Fold) error {
	if err := f.LoadPlugin(ctx); err != nil {
		return err
	}
	h.closers = append(h.closers, f.ClosePlugin)
	return nil
}

// settleOrigins checks every fold's store against its config and live
// stream, reporting every mismatch at once, and records origins only when
// all agree (a start refused for a mismatch writes no record).
func (h *Host) settleOrigins(ctx context.Context) error {
	var errs []error
	updates := make([]foldrun.OriginUpdate, len(h.folds))
	for i, f := range h.folds {
		u, err := f.CheckOrigin(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("fold %s: %w", f.Name(), err))
		}
		updates[i] = u
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, u := range updates {
		if err := u.Apply(h.log); err != nil {
			return fmt.Errorf("fold %s: %w", h.folds[i].Name(), err)
		}
	}
	return nil
}

// connect starts the embedded server, if configured, and dials NATS.
func (h *Host) connect(ctx context.Context) error {
	conn := h.o.NATS.Conn
	if e := h.o.NATS.Embedded; e != nil {
		if err := os.MkdirAll(e.Dir, 0o755); err != nil {
			return fmt.Errorf("embedded NATS: %w", err)
		}
		srv, err := embeddednats.Start(embeddednats.Options{Dir: e.Dir, Host: e.Host, Port: e.Port, Logs: e.Logs})
		if errors.Is(err, embeddednats.ErrListen) {
			return fmt.Errorf("embedded NATS: its address %s:%d is in use or refused (another 'foldhost run', or a NATS server?): "+
				"stop what holds it, or set [nats] embedded_listen in the config to another (port 0 picks a free one), "+
				"or use that server with [nats] url: %w", e.Host, e.Port, err)
		}
		if err != nil {
			return fmt.Errorf("embedded NATS on %s:%d: %w", e.Host, e.Port, err)
		}
		h.srv = srv
		h.closers = append(h.closers, srv.Shutdown)
		h.log.Info("embedded NATS server started", "url", srv.ClientURL(), "dir", e.Dir)
		conn = natskv.ConnOptions{URL: srv.ClientURL(), Name: "foldhost", Timeout: h.o.NATS.Conn.Timeout}
	}
	h.health.Logger = h.log
	conn.Health = &h.health
	if err := ctx.Err(); err != nil {
		return err
	}
	h.log.Info("connecting to NATS", "url", natskv.Redact(conn.URL))
	nc, err := h.dial(ctx, conn)
	if err != nil {
		return err
	}
	h.nc = nc
	h.env.NATS = nc
	h.closers = append(h.closers, nc.Close)
	if !noDemux {
		h.env.Demux = natskv.NewDemux()
		h.closers = append(h.closers, h.env.Demux.Close)
	}
	h.log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
	return nil
}

// EmbeddedURL is the embedded NATS server's client URL, "" when the host
// uses an external server (or has not started).
func (h *Host) EmbeddedURL() string {
	if h.srv == nil {
		return ""
	}
	return h.srv.ClientURL()
}

// Run folds every fold until ctx ends, then waits for each to flush its
// pending batch. It returns the errors of the folds that stopped on one
// (their stores stay served, frozen at their cursors, until Close).
func (h *Host) Run(ctx context.Context) error {
	if !h.started || h.nc == nil {
		return errors.New("host: Run before a successful Start")
	}
	if h.ran {
		return errors.New("host: Run twice")
	}
	h.ran = true
	if h.fleet != nil {
		return h.runFleet(ctx)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(h.folds))
	for i, f := range h.folds {
		wg.Go(func() { errs[i] = f.Run(ctx) })
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("fold %s stopped on an error: %w", h.folds[i].Name(), err))
		}
	}
	return errors.Join(failed...)
}

// Close releases everything Start acquired (plugins, stores, the NATS
// connection, the embedded server), in reverse order, once Run returned.
// Safe to call more than once.
func (h *Host) Close() {
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
	h.closers = nil
}

// Fold is one running fold of a Host (package foldrun runs it).
type Fold = foldrun.Fold

// Folds are the host's folds, in the order of Options.Folds (after Start).
func (h *Host) Folds() []*Fold { return h.folds }

// Fold is the fold named name, or nil.
func (h *Host) Fold(name string) *Fold {
	for _, f := range h.folds {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

func (h *Host) httpFolds() []httpapi.Fold {
	out := make([]httpapi.Fold, len(h.folds))
	for i, f := range h.folds {
		out[i] = f
	}
	return out
}

// Handler serves the host's HTTP API (package httpapi) over its folds:
// health, readiness, metrics, status, reads, export. Valid after Start.
func (h *Host) Handler() http.Handler {
	if h.reads != nil {
		return h.routePartitions(h.reads.handler()) // a fleet's reads find their owner (fleetread.go)
	}
	return h.routePartitions(h.apiHandler())
}

// apiHandler is the HTTP API over this node's folds.
func (h *Host) apiHandler() http.Handler {
	return httpapi.NewHandler(httpapi.Options{Folds: h.httpFolds(), Metrics: h.metrics, Logger: h.log, AdminToken: h.o.AdminToken,
		Placement: h.placement, Groups: h.groups()})
}

// Metrics is the registry behind GET /metrics, for a program that adds its
// own collectors or gathers it. Valid after Start.
func (h *Host) Metrics() *httpapi.Metrics { return h.metrics }

// ReloadPlugins validates every fold's plugin file again and swaps each
// changed one in at its fold's next batch boundary; a module that fails
// validation is refused and the running one stays. A failed fold (not a
// paused one) is retried from its cursor, whatever stopped it. It returns
// the refusals. (Plugin files are also watched; this is the explicit
// request, SIGHUP for the CLI.)
func (h *Host) ReloadPlugins(ctx context.Context) error {
	var errs []error
	for _, f := range h.folds {
		if err := f.Reload(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
