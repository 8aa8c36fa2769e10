package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// The report of an export round (package round), under the names the
// host's API has always given it.
type (
	ExportResult  = round.Report
	ExportOutcome = round.Outcome
)

// Export round outcomes (round.Outcome).
const (
	ExportPublished  = round.Published
	ExportSuperseded = round.Superseded
	ExportSkipped    = round.Skipped
	ExportFailed     = round.Failed
	// SkipEmpty is the Reason of a round skipped because the fold has
	// folded nothing yet.
	SkipEmpty = round.SkipEmpty
)

// ExportStopped runs an export round of the fold named name from its
// store while no host runs it: the store is opened (fold.ErrLocked when a
// host holds it: ask that host, through its HTTP API), its recorded bucket
// and scope checked against the fold's ([*OriginError]), its stale staging
// cleared, and the round run with the fleet's lease unless force, or
// unless NATS is embedded (the lease bucket lives in a server that runs
// only inside a host: a single node exports without it).
func ExportStopped(ctx context.Context, o Options, name string, force bool) (ExportResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return ExportResult{}, fmt.Errorf("host: invalid options: %w", err)
	}
	fo, err := o.fold(name)
	if err != nil {
		return ExportResult{}, err
	}
	if o.Artifacts.Store == nil {
		return ExportResult{}, errors.New("no artifact store is configured")
	}
	st, err := OpenStopped(fo.DataDir, o.Logger)
	if err != nil {
		return ExportResult{}, err
	}
	defer st.Close()
	_, u, err := foldrun.DecideOrigin(st, fo, fo.Origin(time.Time{}))
	if err == nil {
		err = u.Apply(o.Logger)
	}
	if err != nil {
		return ExportResult{}, err
	}
	if err := datadir.ResetStageDir(fo.DataDir); err != nil {
		return ExportResult{}, err
	}
	var nc *nats.Conn
	switch {
	case force: // no lease, so no NATS
	case o.NATS.Embedded != nil:
		o.Logger.Info("the embedded NATS server runs only inside a running host: exporting without the fleet lease (a single node)")
	default:
		if nc, err = natskv.Connect(o.NATS.Conn); err != nil {
			return ExportResult{}, fmt.Errorf("%w: %w", ErrLeaseUnavailable, err)
		}
		defer nc.Close()
	}
	return o.exporter(nc).Round(ctx, fo.Exportee(), st, nil, force, nil)
}

// ErrLeaseUnavailable: the fleet's export lease cannot be reached (it
// lives in NATS). Exporting without the lease (force) is safe.
var ErrLeaseUnavailable = errors.New("the export lease lives in NATS, which cannot be reached")

// ErrNoStore: a fold has no store yet (nothing was ever folded or
// bootstrapped into its data dir).
var ErrNoStore = errors.New("no fold store")

// OpenStopped opens an existing fold store that no host runs, for offline
// work (export, inspection), and clears what a killed bootstrap left beside
// it. A directory without a store is ErrNoStore, never created.
func OpenStopped(dir string, log *slog.Logger) (*fold.Store, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w at %s (no such directory)", ErrNoStore, dir)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*")); len(m) == 0 {
		return nil, fmt.Errorf("%w at %s (not a pebble directory)", ErrNoStore, dir)
	}
	s, _, err := fold.Open(dir, fold.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	datadir.ClearStaleImportsIfIdle(dir)
	return s, nil
}

// exporter is the host's exporter over nc (nil: rounds without the
// lease); nil with no artifact store.
func (o Options) exporter(nc *nats.Conn) *round.Exporter {
	a := o.Artifacts
	return round.NewExporter(round.ExporterOptions{Store: a.Store, Where: a.Where, LeaseBucket: a.LeaseBucket, LeaseTTL: a.LeaseTTL,
		Holder: a.Holder, NC: nc, RequestTimeout: o.NATS.RequestTimeout, Logger: o.Logger})
}

// RepairStopped runs one repair of the stopped fold named name, with mode
// (the fold's configured one when mode is nil), whether or not its cursor
// expired: it starts the host for that fold alone (store, plugin, NATS,
// the origin check), plans the repair from the live retention as a running
// fold would, runs it, and stops. progress, if set, receives the figures
// as it goes. It returns the repair's record; a refused repair is an error
// matching fold.ErrRepairRefused. A running fold's store is locked: the
// error matches fold.ErrLocked.
func RepairStopped(ctx context.Context, o Options, name string, mode *protocol.RepairMode, progress func(repair.Progress)) (httpapi.RepairRun, error) {
	fo, err := o.fold(name)
	if err != nil {
		return httpapi.RepairRun{}, err
	}
	if mode != nil {
		fo.Repair = *mode
	}
	fo.ExportInterval = 0
	o.Folds = []FoldOptions{fo}
	h, err := New(o)
	if err != nil {
		return httpapi.RepairRun{}, err
	}
	if err := h.Start(ctx); err != nil {
		return httpapi.RepairRun{}, err
	}
	defer h.Close()
	return h.folds[0].RepairNow(ctx, progress)
}

// ResetResult is what ResetStopped did.
type ResetResult struct {
	Fold string `json:"fold"`
	// Cursor and Keys describe the fresh store.
	Cursor uint64 `json:"cursor"`
	Keys   uint64 `json:"delivered"`
	// Kept is where the replaced store now is.
	Kept string        `json:"kept"`
	Took time.Duration `json:"took_ns"`
}

// ResetStopped refolds the stopped fold named name from the bucket as it
// is now into a fresh store (a state-sync through the fold's plugin, so the
// views are rebuilt), and swaps it in only once it caught up with the
// stream head it saw at its start. The replaced store is kept beside the
// data dir (ResetResult.Kept) for the operator to remove. It is the way out
// for a store whose bucket was deleted and made again (another stream: the
// start is refused, naming both), where neither repair applies: the kernels
// never move a cursor backward. progress, if set, gets the fresh fold's
// status while it hydrates. A running fold's store is locked
// (fold.ErrLocked).
func ResetStopped(ctx context.Context, o Options, name string, progress func(httpapi.Status)) (ResetResult, error) {
	start := time.Now()
	fo, err := o.fold(name)
	if err != nil {
		return ResetResult{}, err
	}
	if !filepath.IsAbs(fo.DataDir) {
		return ResetResult{}, fmt.Errorf("fold %s: DataDir %q is not an absolute path", name, fo.DataDir)
	}
	dataDir := filepath.Clean(fo.DataDir)
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, err := datadir.FinishSwap(dataDir, log); err != nil { // an earlier reset killed mid-swap
		return ResetResult{}, fmt.Errorf("fold %s: %w", name, err)
	}
	old, _, err := fold.Open(dataDir, fold.Options{Logger: o.Logger})
	if err != nil {
		return ResetResult{}, fmt.Errorf("fold %s: %w", name, err) // held by a running fold: ErrLocked
	}
	fresh := datadir.ResetFreshDir(dataDir)
	if err := os.RemoveAll(fresh); err != nil {
		old.Close()
		return ResetResult{}, err
	}
	fo.DataDir, fo.ExportInterval = fresh, 0
	fo.Refold = true // its plugin's effects are dropped: history, announced by the old store already
	o.Folds = []FoldOptions{fo}
	abandon := func() { // the old store stays as it was
		old.Close()
		os.RemoveAll(fresh)
	}
	h, err := New(o)
	if err == nil {
		err = h.Start(ctx)
	}
	if err != nil {
		abandon()
		return ResetResult{}, err
	}
	f := h.folds[0]
	// The head to reach, read before the fold starts: the fresh store is
	// complete once its cursor is there.
	head, err := f.StreamHead(ctx)
	if err != nil {
		h.Close()
		abandon()
		return ResetResult{}, fmt.Errorf("fold %s: %w", name, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(runCtx) }()
	err = f.WaitCursor(ctx, uint64(head), 250*time.Millisecond, progress)
	cancel()
	if rerr := <-done; err == nil {
		err = rerr
	}
	res := ResetResult{Fold: name, Cursor: uint64(f.Store().Cursor().Rev), Keys: f.Status().Counters.DeliveredSinceStart}
	h.Close()
	if err != nil {
		abandon()
		return res, fmt.Errorf("fold %s: refolding into a fresh store: %w (the old store is untouched)", name, err)
	}
	res.Kept = dataDir + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
	for i := 2; datadir.Exists(res.Kept); i++ { // two resets in one second
		res.Kept = fmt.Sprintf("%s.replaced-%s-%d", dataDir, time.Now().UTC().Format("20060102T150405Z"), i)
	}
	if err := old.Close(); err != nil {
		return res, err
	}
	// Crash-safe (datadir.Swap): a kill from here on leaves the swap
	// recorded, and the next open of the fold completes it.
	if err := (datadir.Swap{Data: dataDir, Fresh: fresh, Kept: res.Kept}).Do(testhook.ResetStep); err != nil {
		return res, fmt.Errorf("fold %s: %w", name, err)
	}
	res.Took = time.Since(start)
	return res, nil
}
