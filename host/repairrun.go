package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// RepairDir is where a repair of the fold in dataDir keeps its scratch
// store (the sorted bucket listing): a hidden sibling of the data dir
// (".<name>.repair"), beside and never inside the fold's pebble directory.
func RepairDir(dataDir string) string {
	dataDir = filepath.Clean(dataDir) // "/x/fold/" must not give "/x/fold/.fold.repair"
	return filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".repair")
}

// repair is the fold's fold.FollowConfig.Repair: it runs on Follow's
// goroutine, between loops, so it may commit to the store directly.
func (f *Fold) repair(ctx context.Context, feed fold.Feed, plugin fold.Plugin, cause error) (fold.Source, error) {
	defer f.pruneDeadLetters() // of a repair under on_plugin_error = "skip"
	ret, err := f.retention(ctx, f.store.Commit)
	if err != nil {
		return nil, fmt.Errorf("planning the repair: %w", err)
	}
	mode := f.o.Repair
	truth := protocol.ListingTruth(&ret, f.store.Cursor().EvictionSeen)
	if cause == nil {
		has, err := hasRawData(f.store)
		if err != nil {
			return nil, err
		}
		if !protocol.CursorlessStartNeedsRepair(mode, has, truth) {
			return nil, nil
		}
		if has {
			f.log.Warn("the store holds data but no cursor (a first commit that did not complete, or a store filled elsewhere): repairing before following")
		} else {
			f.log.Info("a first start on a bucket whose listing is not the truth (its retention evicts current values): looking for an artifact to restore from before following",
				"eviction", evictionOf(ret))
		}
	}
	plan := protocol.PlanRepair(mode, truth)
	switch plan {
	case protocol.PlanRefuse:
		err := refusal(f.o.Repair, ret, f.store.Cursor(), cause)
		f.endRepair(plan, "refused", err, repair.Result{})
		return nil, err
	case protocol.PlanRestore:
		return f.restore(ctx, feed, plugin, ret, cause)
	}
	src, err := feed.Watch(ctx, protocol.Cursor{}) // a state-sync, on the fold's stream
	if err != nil {
		return nil, err
	}
	f.log.Warn("repair starting", "plan", plan.String(), "cursor", uint64(f.store.Cursor().Rev), "retains", fmt.Sprintf("%d..%d", ret.First, ret.Last), "cause", errString(cause))
	unpin := f.pinForRepair(plan)
	res, err := repair.Relist(ctx, src, f.store, plugin, repair.Config{
		Deletes:    plan == protocol.PlanKeyListingDiff,
		Scope:      f.o.Scope,
		ScratchDir: RepairDir(f.o.DataDir),
		MaxBatch:   f.o.BatchSize,
		Poison:     f.countedPoison(),
		Verify: func(ctx context.Context) error {
			if plan != protocol.PlanKeyListingDiff {
				return nil
			}
			ret, err := f.retention(ctx, f.store.Commit)
			if err != nil {
				return fmt.Errorf("re-reading retention after the listing: %w", err)
			}
			if protocol.ListingTruth(&ret, f.store.Cursor().EvictionSeen) != protocol.TruthYes {
				return refusal(f.o.Repair, ret, f.store.Cursor(), cause)
			}
			return nil
		},
		Progress: f.repairProgress,
		Logger:   f.log,
	})
	unpin()
	if err != nil {
		src.Stop()
		f.repairFailed(ctx, plan, err, res)
		return nil, err
	}
	f.endRepair(plan, "done", nil, res)
	f.log.Warn("repair done; following", "plan", plan.String(), "cursor", res.Cursor, "listed", res.Listed,
		"folded", res.Folded, "deleted", res.Deleted, "unchanged", res.Unchanged, "took", res.Took.Round(time.Millisecond).String())
	if res.Kept > 0 {
		f.log.Warn("repair = \"none\": fold keys the bucket no longer lists were kept; keys deleted while the cursor was expired may persist", "kept", res.Kept)
	}
	f.state.Store(httpapi.StateFollowing)
	f.ready.Store(true)
	return src, nil
}

func errString(err error) string {
	if err == nil {
		return "a start without a cursor"
	}
	return err.Error()
}

// refusal explains a key-listing repair that cannot run.
func refusal(mode protocol.RepairMode, ret protocol.Retention, cur protocol.Cursor, cause error) error {
	err := fmt.Errorf("%w (repair = %q): %s, so a key missing from the bucket's listing may have aged out rather than been deleted, and a key-listing repair would delete it; "+
		"set repair = \"auto\" or \"restore\" with an artifact store other nodes export to, and keep this data_dir (it holds values NATS no longer has)",
		fold.ErrRepairRefused, mode, evictionWhy(ret, cur))
	return withCause(err, cause)
}

func evictionWhy(ret protocol.Retention, cur protocol.Cursor) string {
	var why []string
	if ret.EvictsCurrentValues() {
		why = append(why, "the bucket's retention evicts current values ("+evictionOf(ret)+")")
	}
	if cur.EvictionSeen {
		why = append(why, "this fold has seen retention evict current values (the cursor's eviction memo, kept after eviction is switched off)")
	}
	if len(why) == 0 {
		return "the bucket's retention could not be read"
	}
	return strings.Join(why, "; ")
}

func withCause(err, cause error) error {
	if cause != nil {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

func evictionOf(r protocol.Retention) string {
	var s []string
	if r.MaxAge > 0 {
		s = append(s, "max_age "+r.MaxAge.String())
	}
	if r.PerMessageTTL {
		s = append(s, "per-message TTLs")
	}
	if r.DiscardOldLimit {
		s = append(s, "a discard-old limit")
	}
	return strings.Join(s, ", ")
}

// retention reads the stream's live retention, refreshes the lag's head,
// and commits the eviction memo (through commit) the first time the
// reading shows retention evicting current values.
func (f *Fold) retention(ctx context.Context, commit func(fold.Commit) error) (protocol.Retention, error) {
	ret, _, err := f.bucket.Retention(ctx)
	if err != nil {
		return ret, err
	}
	f.lastSeq.Store(uint64(ret.Last))
	if err := f.noteEviction(ret, commit); err != nil {
		return ret, err
	}
	return ret, nil
}

// noteEviction sets the cursor's eviction memo when ret shows eviction and
// the memo is not set yet. Once set it is never cleared (the store refuses).
//
// A reading that shows eviction is remembered even when the commit cannot
// be made (the loop stopped for an expiry): the repair that follows commits
// the memo from it, even if eviction was switched off in between.
func (f *Fold) noteEviction(ret protocol.Retention, commit func(fold.Commit) error) error {
	cur := f.store.Cursor()
	if ret.HasEvicted() {
		f.sawEviction.Store(true)
	}
	if cur.EvictionSeen || !f.sawEviction.Load() {
		return nil
	}
	cur.EvictionSeen = true
	if err := commit(fold.Commit{Cursor: cur}); err != nil {
		return fmt.Errorf("recording the eviction memo: %w", err)
	}
	f.log.Warn("retention has evicted current values of the bucket: this fold will never trust a key listing again (eviction memo set on the cursor)",
		"eviction", evictionOf(ret), "first_retained", ret.First)
	return nil
}

// hasRawData reports whether the store holds any raw entry.
func hasRawData(r fold.Reader) (bool, error) {
	errFound := errors.New("found")
	err := r.RawKeys("", func([]byte) error { return errFound })
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}

// pinForRepair marks the fold repairing and pins its pre-repair state for
// readers (Snapshot hands out shares of it); the returned func unpins.
func (f *Fold) pinForRepair(plan protocol.RepairPlan) func() {
	prev := f.state.Load()
	f.state.Store(httpapi.StateRepairing)
	f.ready.Store(false)
	p := repair.Progress{Phase: "listing", StartedAt: time.Now().UTC().Format(time.RFC3339)}
	f.repairMu.Lock()
	f.repairs.Running = &p
	f.repairMu.Unlock()
	// Unpinned, the fold is back in its state before the repair (the
	// successful end sets its own): a failed repair that will be retried
	// is not "repairing" while it waits.
	restore := func() { f.state.CompareAndSwap(httpapi.StateRepairing, prev) }
	sn, err := f.store.Snapshot()
	if err != nil {
		f.log.Warn("could not pin the pre-repair state; reads see the repair in progress", "err", err)
		return restore
	}
	f.pinned.Store(sn)
	var once sync.Once
	return func() {
		once.Do(func() {
			f.pinned.Store(nil)
			_ = sn.Close()
			restore()
		})
	}
}

func (f *Fold) repairProgress(p repair.Progress) {
	f.repairMu.Lock()
	f.repairs.Running = &p
	f.repairMu.Unlock()
	if f.onRepair != nil {
		f.onRepair(p)
	}
}

// repairFailed records a repair that ended without completing: refused
// (the fold stops), cancelled (shutdown), or failed (retried, unless the
// error stops the fold: a plugin error, persistent commit failures).
func (f *Fold) repairFailed(ctx context.Context, plan protocol.RepairPlan, err error, res repair.Result) {
	outcome := "failed"
	switch {
	case ctx.Err() != nil:
		outcome = "cancelled"
	case errors.Is(err, fold.ErrRepairRefused):
		outcome = "refused"
	case errors.Is(err, fold.ErrPlugin):
		f.pluginErrs.Add(1)
	}
	f.endRepair(plan, outcome, err, res)
	if outcome == "cancelled" {
		f.log.Info("repair interrupted by shutdown; the next start finishes it", "plan", plan.String(), "folded", res.Folded)
		return
	}
	f.log.Error("repair ended without completing", "plan", plan.String(), "outcome", outcome, "err", err)
}

// endRepair records an ended repair in the status and metrics.
func (f *Fold) endRepair(plan protocol.RepairPlan, outcome string, err error, res repair.Result) {
	run := &httpapi.RepairRun{Plan: plan.String(), Outcome: outcome, At: time.Now().UTC(), Took: res.Took.Round(time.Millisecond).String(), Progress: res.Progress}
	if err != nil {
		run.Error = err.Error()
	}
	f.repairMu.Lock()
	defer f.repairMu.Unlock()
	f.repairs.Running = nil
	f.repairs.Last = run
	for i := range f.repairs.Counts {
		if c := &f.repairs.Counts[i]; c.Plan == run.Plan && c.Outcome == outcome {
			c.N++
			return
		}
	}
	f.repairs.Counts = append(f.repairs.Counts, httpapi.RepairCount{Plan: run.Plan, Outcome: outcome, N: 1})
}

// repairStatus copies the repair status for Status.
func (f *Fold) repairStatus() httpapi.RepairStatus {
	f.repairMu.Lock()
	defer f.repairMu.Unlock()
	st := httpapi.RepairStatus{Counts: append([]httpapi.RepairCount{}, f.repairs.Counts...)}
	st.Pending, _ = f.store.RepairPending() // after Close: false
	if r := f.repairs.Running; r != nil {
		p := *r
		st.Running = &p
	}
	if l := f.repairs.Last; l != nil {
		c := *l
		st.Last = &c
	}
	return st
}

// errNoRestoreSource: no artifact to restore from (none configured or none
// published); a cursorless start then state-syncs instead.
var errNoRestoreSource = errors.New("no artifact to restore from")

// restore runs the artifact restore: the newest artifact of the fold's key,
// checked (bucket, scope coverage, stream, protocol.RestoreAllowed) before
// anything is downloaded, imported into the scratch dir, checked again, and
// the difference folded through the plugin (repair.Restore). It returns
// the watch that resumes from the artifact's cursor.
func (f *Fold) restore(ctx context.Context, feed fold.Feed, plugin fold.Plugin, ret protocol.Retention, cause error) (fold.Source, error) {
	const plan = protocol.PlanRestore
	refuse := func(format string, args ...any) error {
		err := withCause(fmt.Errorf("%w (repair = %q): "+format, append([]any{fold.ErrRepairRefused, f.o.Repair}, args...)...), cause)
		f.endRepair(plan, "refused", err, repair.Result{})
		return err
	}
	store := f.h.o.Artifacts.Store
	if store == nil {
		if cause == nil {
			return f.noRestoreSource(ret, "no artifact store is configured")
		}
		return nil, refuse("%s and no artifact store is configured to restore from; keep this data_dir (it holds values NATS no longer has)", evictionWhy(ret, f.store.Cursor()))
	}
	key := f.o.ArtifactKey
	local := f.store.Cursor()
	check := func(m artifact.Manifest) error { return restoreCheck(m, f.o, f.origin, local, ret) }
	scratch := RepairDir(f.o.DataDir)
	if err := os.RemoveAll(scratch); err != nil {
		return nil, fmt.Errorf("clearing the repair's scratch dir: %w", err)
	}
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	f.log.Warn("restore starting", "key", key, "store", f.h.o.Artifacts.Where, "cursor", uint64(local.Rev), "retains", fmt.Sprintf("%d..%d", ret.First, ret.Last), "cause", errString(cause))
	unpin := f.pinForRepair(plan)
	defer unpin()
	var vetted error
	dest := filepath.Join(scratch, "artifact")
	m, err := artifact.Download(ctx, store, key, dest, artifact.DownloadOptions{Check: func(m artifact.Manifest) error {
		vetted = check(m)
		return vetted
	}})
	switch {
	case errors.Is(err, artifact.ErrNoPointer):
		if cause == nil {
			unpin()
			f.endRepair(plan, "skipped", nil, repair.Result{})
			return f.noRestoreSource(ret, fmt.Sprintf("no artifact is published under key %q", key))
		}
		return nil, refuse("%s and no artifact is published under key %q in %s to restore from; keep this data_dir (it holds values NATS no longer has)",
			evictionWhy(ret, local), key, f.h.o.Artifacts.Where)
	case err != nil && vetted != nil:
		return nil, refuse("the newest artifact under key %q cannot restore this fold: %v", key, vetted)
	case err != nil:
		f.endRepair(plan, "failed", err, repair.Result{})
		return nil, fmt.Errorf("restore: %w", err) // transient: the next attempt downloads again
	}
	art, _, err := fold.Open(dest, fold.Options{Logger: f.log, MemTableSize: 4 << 20, CacheSize: 8 << 20})
	if err != nil {
		f.endRepair(plan, "failed", err, repair.Result{})
		return nil, fmt.Errorf("restore: opening the imported artifact: %w", err)
	}
	defer art.Close()
	if o, ok, err := art.Origin(); err != nil || !ok || o.Bucket != m.Bucket || !o.StreamCreated.Equal(m.StreamCreated) {
		return nil, refuse("the imported artifact's store records origin %v (%t, %v), its manifest says %v", o, ok, err, m.Origin())
	}
	res, err := repair.Restore(ctx, f.store, art, plugin, repair.RestoreConfig{
		Scope:    f.o.Scope,
		MaxBatch: f.o.BatchSize,
		Listed:   f.bucket.Listed,
		Poison:   f.countedPoison(),
		Verify: func(ctx context.Context, c protocol.Cursor) error {
			ret, err := f.retention(ctx, f.store.Commit)
			if err != nil {
				return fmt.Errorf("re-reading retention before moving the cursor: %w", err)
			}
			if v := protocol.CheckCursorResume(c, ret.Window); v != protocol.ResumeOK {
				return fmt.Errorf("%w: retention passed the artifact's cursor %d while it was folded in (the stream retains %d..%d: %s); the next attempt takes a newer artifact",
					fold.ErrCursorExpired, c.Rev, ret.First, ret.Last, v)
			}
			return nil
		},
		Progress: f.repairProgress,
		Logger:   f.log,
	})
	if err != nil {
		f.repairFailed(ctx, plan, err, res)
		return nil, err
	}
	f.endRepair(plan, "done", nil, res)
	f.log.Warn("restore done; resuming from the artifact's cursor", "cursor", res.Cursor, "folded", res.Folded,
		"deleted", res.Deleted, "unchanged", res.Unchanged, "took", res.Took.Round(time.Millisecond).String())
	unpin()
	f.state.Store(httpapi.StateHydrating)
	return feed.Watch(ctx, f.store.Cursor())
}

// noRestoreSource lets a cursorless start state-sync when there is nothing
// to restore from (the first node of a fleet): keys already evicted from
// the bucket are then missing, and the log says so.
func (f *Fold) noRestoreSource(ret protocol.Retention, why string) (fold.Source, error) {
	f.log.Warn("starting without a cursor on a bucket whose listing is incomplete, and "+why+": values the bucket already evicted are not in the fold",
		"eviction", evictionOf(ret))
	return nil, nil
}

// covers reports whether an artifact of scope theirs holds every key of
// scope ours (no prefixes: the whole bucket).
func covers(theirs, ours []string) bool {
	if len(theirs) == 0 {
		return true
	}
	if len(ours) == 0 {
		return false
	}
	for _, p := range ours {
		if !slices.ContainsFunc(theirs, func(q string) bool { return strings.HasPrefix(p, q) }) {
			return false
		}
	}
	return true
}

// restoreCheck vets an artifact for restoring the fold o (whose store
// records origin and cursor local) against the live retention ret, before
// anything is downloaded: same bucket and stream, a scope covering the
// fold's, protocol.RestoreAllowed.
func restoreCheck(m artifact.Manifest, o FoldOptions, origin fold.Origin, local protocol.Cursor, ret protocol.Retention) error {
	if m.Bucket != o.Bucket {
		return fmt.Errorf("it folds bucket %q, the fold %q", m.Bucket, o.Bucket)
	}
	if !covers(m.Scope, o.Scope) {
		return fmt.Errorf("its scope %s does not cover the fold's %s", scopeText(m.Scope), scopeText(o.Scope))
	}
	if m.StreamCreated.IsZero() {
		return errors.New("it does not record its stream (an artifact of an older foldhost): it may be of a previous incarnation of the bucket")
	}
	if !m.StreamCreated.Equal(origin.StreamCreated) {
		return fmt.Errorf("it is of another incarnation of the bucket (its stream was created at %s, the fold's at %s)",
			m.StreamCreated.UTC().Format(time.RFC3339Nano), origin.StreamCreated.UTC().Format(time.RFC3339Nano))
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return err
	}
	if !protocol.RestoreAhead(c.Rev, local.Rev) {
		return fmt.Errorf("its cursor %d is not ahead of the fold's %d (a node never restores from its own exports: restore needs another node's newer one)", c.Rev, local.Rev)
	}
	if !protocol.RestoreAllowed(c.Rev, local.Rev, ret.Window) {
		return fmt.Errorf("a resume from its cursor %d is not sound: the stream retains %d..%d (%s)", c.Rev, ret.First, ret.Last, protocol.CheckResume(c.Rev, ret.Window))
	}
	if v := protocol.CheckCursorResume(c, ret.Window); v != protocol.ResumeOK {
		return fmt.Errorf("a resume from its cursor %v is not sound: the stream retains %d..%d past the revision its prefix watch had settled (%s)", c, ret.First, ret.Last, v)
	}
	return nil
}

// errOperator is the cause of a repair an operator asked for.
var errOperator = errors.New("an operator asked for a repair")

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
	f := h.folds[0]
	f.onRepair = progress
	src, err := f.repair(ctx, f.feed(), f.applier(), errOperator)
	if src != nil {
		src.Stop()
	}
	var run httpapi.RepairRun
	if last := f.repairStatus().Last; last != nil {
		run = *last
	}
	return run, err
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
	old, _, err := fold.Open(dataDir, fold.Options{Logger: o.Logger})
	if err != nil {
		return ResetResult{}, fmt.Errorf("fold %s: %w", name, err) // held by a running fold: ErrLocked
	}
	fresh := filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".reset")
	if err := os.RemoveAll(fresh); err != nil {
		old.Close()
		return ResetResult{}, err
	}
	fo.DataDir, fo.ExportInterval = fresh, 0
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
	ret, _, err := f.bucket.Retention(ctx)
	if err != nil {
		h.Close()
		abandon()
		return ResetResult{}, fmt.Errorf("fold %s: %w", name, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(runCtx) }()
	err = f.WaitCursor(ctx, uint64(ret.Last), 250*time.Millisecond, progress)
	cancel()
	if rerr := <-done; err == nil {
		err = rerr
	}
	res := ResetResult{Fold: name, Cursor: uint64(f.store.Cursor().Rev), Keys: f.delivered.Load()}
	h.Close()
	if err != nil {
		abandon()
		return res, fmt.Errorf("fold %s: refolding into a fresh store: %w (the old store is untouched)", name, err)
	}
	res.Kept = dataDir + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
	if err := old.Close(); err != nil {
		return res, err
	}
	if err := os.Rename(dataDir, res.Kept); err != nil {
		return res, fmt.Errorf("fold %s: moving the old store aside: %w (the fresh one is in %s)", name, err, fresh)
	}
	if err := os.Rename(fresh, dataDir); err != nil {
		return res, fmt.Errorf("fold %s: swapping the fresh store in: %w (the old one is in %s, the fresh one in %s)", name, err, res.Kept, fresh)
	}
	res.Took = time.Since(start)
	return res, nil
}
