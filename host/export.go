package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// settleNow settles the store's cursor, when a prefix watch left it
// unsettled, before an export round checkpoints it. On the loop with
// nothing pending, every update delivered up to the cursor's position is
// committed, so a retention reading that shows nothing evicted above the
// settled point settles all of it (protocol.SettleDelivered): the artifact
// then carries a settled cursor, which a node restoring from it can resume
// from even after retention passed the old settled point. A reading that
// fails or cannot settle it exports the cursor as it is (the artifact says
// it is unsettled; the watch's own probe judges the fold).
func (f *Fold) settleNow(ctx context.Context, t fold.Target) error {
	c := t.Cursor()
	if !c.Unsettled {
		return nil
	}
	ret, now, err := f.bucket.Retention(ctx)
	if err != nil {
		f.log.Warn("export: could not read retention to settle the cursor; exporting it unsettled", "cursor", uint64(c.Rev), "err", err)
		return nil
	}
	s, ok := protocol.SettleDelivered(c.Settled, c.Rev, ret, 0, now.UnixNano())
	if !ok {
		return nil
	}
	return t.Commit(fold.Commit{Cursor: protocol.Settle(c, s, 0, false)})
}

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

// exportState is what a fold's rounds report.
type exportState struct {
	mu             sync.Mutex // serializes rounds
	metaMu         sync.Mutex // guards the fields below
	last           *ExportResult
	lastAt         time.Time
	lastPublished  time.Time
	exportedCursor uint64 // the highest cursor a round published or found superseded
	rounds         httpapi.ExportRounds
}

// Export implements httpapi.Exporter: a round now, on the live loop. It
// runs under the fold's context, not the request's: a client that goes away
// does not cut a round short (its work would be lost and its lease held);
// a shutdown does.
func (f *Fold) Export(_ context.Context, force bool) (any, error) {
	if f.h.exp == nil {
		return nil, httpapi.ErrExportNotConfigured
	}
	ctx := f.runCtx.Load()
	if ctx == nil {
		return nil, errors.New("the fold is not running")
	}
	res, err := f.exportRound(*ctx, force)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// exportRound runs one round on the fold's live loop; rounds of one fold
// never overlap.
func (f *Fold) exportRound(ctx context.Context, force bool) (ExportResult, error) {
	f.export.mu.Lock()
	defer f.export.mu.Unlock()
	loop := f.loop.Load()
	if loop == nil {
		return ExportResult{Fold: f.o.Name}, errors.New("the fold is not running yet")
	}
	if st := f.state.Load(); st == httpapi.StateFailed || st == httpapi.StateStopped || st == httpapi.StateDraining {
		return ExportResult{Fold: f.o.Name}, fmt.Errorf("the fold is %s: export it with 'foldhost export' once foldhost is stopped", st)
	} else if st == httpapi.StatePaused {
		return ExportResult{Fold: f.o.Name}, errors.New("the fold is paused: resume it to export (a round runs on the fold's live watch)")
	} else if st == httpapi.StateRepairing {
		// The repair runs with no loop, so the round could not run on
		// one anyway (a stopped loop refuses): say why.
		return ExportResult{Fold: f.o.Name}, errors.New("the fold is repairing an expired cursor: no artifact of a half-repaired store; the next round after the repair exports")
	}
	res, err := f.h.exp.Round(ctx, f.o.exportee(), f.store, loop, force, f.settleNow)
	if err != nil {
		res.Outcome, res.Error = ExportFailed, err.Error()
	}
	now := time.Now().UTC()
	x := &f.export
	x.metaMu.Lock()
	defer x.metaMu.Unlock()
	x.last, x.lastAt = &res, now
	switch res.Outcome {
	case ExportFailed:
		x.rounds.Failed++
	case ExportPublished:
		x.rounds.Published++
		x.lastPublished = now
		x.exportedCursor = max(x.exportedCursor, res.Cursor)
	case ExportSuperseded:
		x.rounds.Superseded++
		x.exportedCursor = max(x.exportedCursor, res.Cursor)
	case ExportSkipped:
		x.rounds.Skipped++
	}
	return res, err
}

// lastPublishedCursor is the cursor this process' rounds last published
// or found superseded (0: none).
func (f *Fold) lastPublishedCursor() uint64 {
	f.export.metaMu.Lock()
	defer f.export.metaMu.Unlock()
	return f.export.exportedCursor
}

// exportStatus is the fold's export status; nil when exporting is not
// configured.
func (f *Fold) exportStatus() *httpapi.ExportStatus {
	if f.h.exp == nil {
		return nil
	}
	st := &httpapi.ExportStatus{Key: f.o.ArtifactKey, Store: f.h.o.Artifacts.Where, Interval: f.o.ExportInterval.String()}
	x := &f.export
	x.metaMu.Lock()
	defer x.metaMu.Unlock()
	st.Rounds = x.rounds
	if !x.lastPublished.IsZero() {
		at := x.lastPublished
		st.LastPublishedAt = &at
	}
	if le := x.last; le != nil {
		at := x.lastAt
		st.LastAt, st.LastOutcome, st.LastCursor, st.LastError = &at, le.Outcome.String(), le.Cursor, le.Error
	}
	return st
}

// exportEvery runs a round every ExportInterval once the fold caught up
// (an artifact of a hydrating fold is behind the fleet's). Failures are
// logged; the next tick retries.
func (f *Fold) exportEvery(ctx context.Context) {
	if f.h.exp == nil || f.o.ExportInterval <= 0 {
		return
	}
	t := time.NewTicker(f.o.ExportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f.ready.Load() || f.state.Load() != httpapi.StateFollowing {
			continue
		}
		// Nothing new to export: an empty fold, or the cursor a round of
		// this process already published (a new artifact of the same
		// cursor would only add a payload for prune to collect).
		if cur := uint64(f.store.Cursor().Rev); cur == 0 || cur <= f.lastPublishedCursor() {
			continue
		}
		res, err := f.exportRound(ctx, false)
		switch {
		case err != nil && ctx.Err() == nil:
			f.log.Error("export round failed; the next one retries", "key", f.o.ArtifactKey, "err", err)
		case err == nil && res.Outcome == ExportSkipped:
			f.log.Debug("export round skipped: another node holds the lease", "key", f.o.ArtifactKey, "holder", res.LeaseHolder)
		case err == nil:
			f.log.Info("export round done", "key", f.o.ArtifactKey, "outcome", res.Outcome, "cursor", res.Cursor,
				"took", (time.Duration(res.TookMS) * time.Millisecond).String())
		}
	}
}

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
	_, u, err := decideOrigin(st, fo, fo.origin(time.Time{}))
	if err == nil {
		err = u.apply(o.Logger)
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
	return o.exporter(nc).Round(ctx, fo.exportee(), st, nil, force, nil)
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

// exportee names the fold to an export round.
func (o FoldOptions) exportee() round.Fold {
	return round.Fold{Name: o.Name, ArtifactKey: o.ArtifactKey, DataDir: o.DataDir}
}

// exporter is the host's exporter over nc (nil: rounds without the
// lease); nil with no artifact store.
func (o Options) exporter(nc *nats.Conn) *round.Exporter {
	a := o.Artifacts
	return round.NewExporter(round.ExporterOptions{Store: a.Store, Where: a.Where, LeaseBucket: a.LeaseBucket, LeaseTTL: a.LeaseTTL,
		Holder: a.Holder, NC: nc, RequestTimeout: o.NATS.RequestTimeout, Logger: o.Logger})
}
