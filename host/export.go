package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/lease"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// ExportOutcome is how an export round ended.
type ExportOutcome int

const (
	// ExportPublished: the round's artifact is the key's pointer now.
	ExportPublished ExportOutcome = iota + 1
	// ExportSuperseded: the store already holds a newer artifact; nothing
	// was published (a normal outcome).
	ExportSuperseded
	// ExportSkipped: another node (or this one) holds the key's lease:
	// it exported within the lease's TTL. Nothing was exported.
	ExportSkipped
	// ExportFailed: the round failed (ExportResult.Error says why).
	ExportFailed
)

var exportOutcomes = [...]string{ExportPublished: "published", ExportSuperseded: "superseded", ExportSkipped: "skipped", ExportFailed: "failed"}

func (o ExportOutcome) String() string {
	if o >= ExportPublished && o <= ExportFailed {
		return exportOutcomes[o]
	}
	return fmt.Sprintf("ExportOutcome(%d)", int(o))
}

// MarshalText is the outcome's name.
func (o ExportOutcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads an outcome's name.
func (o *ExportOutcome) UnmarshalText(b []byte) error {
	if i := slices.Index(exportOutcomes[:], string(b)); i > 0 {
		*o = ExportOutcome(i)
		return nil
	}
	return fmt.Errorf("unknown export outcome %q", b)
}

// ExportResult is a round's outcome, as the CLI prints it and the HTTP API
// returns it.
type ExportResult struct {
	Fold    string        `json:"fold"`
	Key     string        `json:"key"`
	Store   string        `json:"store"`
	Outcome ExportOutcome `json:"outcome"`
	// Cursor is the exported cursor (published, superseded).
	Cursor uint64   `json:"cursor,omitempty"`
	Pruned []string `json:"pruned,omitempty"`
	// LeaseHolder and LeaseExpires name the node holding the lease when
	// the round was skipped.
	LeaseHolder  string    `json:"lease_holder,omitempty"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	// LeaseCompleted is when the holder's round completed; zero while the
	// round runs, or when it died without completing (the lease then
	// holds until it expires).
	LeaseCompleted time.Time `json:"lease_completed,omitzero"`
	Forced         bool      `json:"forced,omitempty"`
	TookMS         int64     `json:"took_ms"`
	// Reason says why a round skipped without asking for the lease:
	// SkipEmpty. "" for a lease skip.
	Reason string `json:"reason,omitempty"`
	// Error says why a round failed (outcome failed).
	Error string `json:"error,omitempty"`
}

// SkipEmpty is the Reason of a round skipped because the fold has folded
// nothing yet (no cursor): there is nothing to publish, which is no failure.
const SkipEmpty = "empty"

func (r ExportResult) String() string {
	switch r.Outcome {
	case ExportSkipped:
		if r.Reason == SkipEmpty {
			return fmt.Sprintf("fold %s: skipped: the fold has folded nothing yet (no cursor): nothing to export", r.Fold)
		}
		what := "its round has not completed: it is still running, or it died (the lease then holds until it expires)"
		if !r.LeaseCompleted.IsZero() {
			what = "it completed a round at " + r.LeaseCompleted.Format(time.RFC3339) + ", and a round holds the key for lease_ttl"
		}
		return fmt.Sprintf("fold %s: skipped: %s holds the export lease of %q until %s: %s; --force exports anyway",
			r.Fold, r.LeaseHolder, r.Key, r.LeaseExpires.Format(time.RFC3339), what)
	case ExportSuperseded:
		return fmt.Sprintf("fold %s: superseded: %s already holds a newer artifact of %q than cursor %d; nothing published",
			r.Fold, r.Store, r.Key, r.Cursor)
	case ExportFailed:
		return fmt.Sprintf("fold %s: export failed: %s", r.Fold, r.Error)
	}
	return fmt.Sprintf("fold %s: published artifact %q at cursor %d to %s in %s (pruned %d old payloads)",
		r.Fold, r.Key, r.Cursor, r.Store, time.Duration(r.TookMS)*time.Millisecond, len(r.Pruned))
}

// exporter runs the export rounds of one host: one artifact store and one
// lease bucket for every fold.
type exporter struct {
	o ArtifactOptions
	// nc is the NATS connection the lease bucket is opened on (lazily, so
	// a host that never exports needs no permission to create it); nil
	// runs every round without the lease (a single node on a stopped
	// embedded server).
	nc         *nats.Conn
	reqTimeout time.Duration
	log        *slog.Logger

	mu    sync.Mutex
	lease *lease.Lease
}

// newExporter is nil when no artifact store is configured.
func newExporter(o ArtifactOptions, nc *nats.Conn, reqTimeout time.Duration, log *slog.Logger) *exporter {
	if o.Store == nil {
		return nil
	}
	return &exporter{o: o, nc: nc, reqTimeout: reqTimeout, log: log}
}

// leaseFor opens the lease bucket on first use.
func (e *exporter) leaseFor(ctx context.Context) (*lease.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease != nil {
		return e.lease, nil
	}
	b, err := natskv.OpenBucket(ctx, e.nc, natskv.BucketConfig{Name: e.o.LeaseBucket, History: 1, Replicas: 1},
		natskv.Options{RequestTimeout: e.reqTimeout})
	if err != nil {
		return nil, fmt.Errorf("export lease bucket %s: %w", e.o.LeaseBucket, err)
	}
	e.lease = lease.New(b.KV(), lease.Options{RequestTimeout: e.reqTimeout})
	return e.lease, nil
}

// round runs one export round of the fold o from store (loop nil: nothing
// folds into the store meanwhile). force, or no NATS connection, skips the
// lease.
func (e *exporter) round(ctx context.Context, o FoldOptions, store *fold.Store, loop *fold.Loop, force bool, settle func(context.Context, fold.Target) error) (ExportResult, error) {
	start := time.Now()
	res := ExportResult{Fold: o.Name, Key: o.ArtifactKey, Store: e.o.Where, Forced: force}
	if store.Cursor().Rev == protocol.NoRevision {
		res.Outcome, res.Reason = ExportSkipped, SkipEmpty
		return res, nil
	}
	var ls *lease.Lease
	if !force && e.nc != nil {
		var err error
		if ls, err = e.leaseFor(ctx); err != nil {
			return res, err
		}
	}
	rr, err := RunRound(ctx, loop, store, e.o.Store, ls, RoundConfig{
		Key: o.ArtifactKey, Holder: e.o.Holder, TTL: e.o.LeaseTTL,
		StageDir: datadir.StageDir(o.DataDir), IgnoreLease: ls == nil, Logger: e.log.With("fold", o.Name), Settle: settle,
	})
	res.TookMS = time.Since(start).Milliseconds()
	if err != nil {
		return res, err
	}
	switch {
	case rr.Skipped:
		res.Outcome = ExportSkipped
		res.LeaseHolder = rr.Holder.HolderID
		res.LeaseExpires = time.Unix(rr.Holder.ExpiresAtUnix, 0).UTC()
		if c := rr.Holder.CompletedAtUnix; c != nil {
			res.LeaseCompleted = time.Unix(*c, 0).UTC()
		}
	case rr.Outcome == artifact.SupersededByNewer:
		res.Outcome, res.Cursor = ExportSuperseded, uint64(rr.Cursor.Rev)
	default:
		res.Outcome, res.Cursor, res.Pruned = ExportPublished, uint64(rr.Cursor.Rev), rr.Pruned
	}
	return res, nil
}

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
	res, err := f.h.exp.round(ctx, f.o, f.store, loop, force, f.settleNow)
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
	return newExporter(o.Artifacts, nc, o.NATS.RequestTimeout, o.Logger).round(ctx, fo, st, nil, force, nil)
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
