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

	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// newRepairer wires the fold's repair.Runner (the repair it runs when its
// cursor expires: planning, memo, Verify, artifact checks) to its bucket,
// store, artifact store and status. Start makes it once the plugin is
// loaded and the origin settled; it keeps the eviction reading between
// repairs.
func (f *Fold) newRepairer() *repair.Runner {
	return &repair.Runner{
		Mode:   f.o.Repair,
		Bucket: f.o.Bucket,
		Scope:  f.o.Scope,
		Stream: f.origin.StreamCreated,
		Store:  f.store,
		Retention: func(ctx context.Context) (protocol.Retention, error) {
			ret, _, err := f.bucket.Retention(ctx)
			if err == nil {
				f.lastSeq.Store(uint64(ret.Last)) // the lag's head
				if uint64(ret.Last) <= uint64(f.store.Cursor().Rev) {
					f.atHead.Store(time.Now().UnixNano())
				}
			}
			return ret, err
		},
		Listed:         f.bucket.Listed,
		Artifacts:      f.h.o.Artifacts.Store,
		ArtifactKey:    f.o.ArtifactKey,
		ArtifactsWhere: f.h.o.Artifacts.Where,
		ScratchDir:     datadir.RepairDir(f.o.DataDir),
		MaxBatch:       f.o.BatchSize,
		Poison:         f.countedPoison(),
		Hooks:          repair.Hooks{Begin: f.pinForRepair, Join: f.fx.JoinRepair, End: f.repairEnded, Progress: f.repairProgress},
		Logger:         f.log,
	}
}

// repair is the fold's fold.FollowConfig.Repair: it runs on Follow's
// goroutine, between loops, so it may commit to the store directly.
func (f *Fold) repair(ctx context.Context, feed fold.Feed, plugin fold.Plugin, cause error) (fold.Source, error) {
	defer f.pruneDeadLetters() // of a repair under on_plugin_error = "skip"
	return f.repairer.Run(ctx, feed, plugin, cause)
}

// retention reads the stream's live retention, refreshes the lag's head,
// and commits the eviction memo (through commit) the first time the
// reading shows retention evicting current values
// (repair.Runner.ReadRetention).
func (f *Fold) retention(ctx context.Context, commit func(fold.Commit) error) (protocol.Retention, error) {
	return f.repairer.ReadRetention(ctx, commit)
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

// repairEnded is the repairs' Hooks.End: a repair that is done leaves the
// fold following (a listing: its source is live) or hydrating (a restore:
// the resume from the artifact's cursor starts), before the status says
// it is done.
func (f *Fold) repairEnded(plan protocol.RepairPlan, outcome string, err error, res repair.Result) {
	f.fx.RestoreEnded() // its net change is folded, or it ended
	switch {
	case outcome == "done" && plan == protocol.PlanRestore:
		testhook.Step(context.Background(), "restore-done")
		f.state.Store(httpapi.StateHydrating)
	case outcome == "done":
		f.fx.CaughtUp(f.store.Cursor()) // a listing's source is live: no OnSynced
		f.state.Store(httpapi.StateFollowing)
		f.ready.Store(true)
	case outcome == "failed" && errors.Is(err, fold.ErrPlugin):
		f.pluginErrs.Add(1)
	}
	f.endRepair(plan, outcome, err, res)
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
	fo.refold = true // its plugin's effects are dropped: history, announced by the old store already
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
