package foldrun

import (
	"context"
	"errors"
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
		Mode:      f.o.Repair,
		Bucket:    f.o.Bucket,
		Scope:     f.o.Scope,
		Stream:    f.origin.StreamCreated,
		Partition: f.o.PartitionOf().String(),
		Store:     f.store,
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
		Artifacts:      f.env.Artifacts,
		ArtifactKey:    f.o.ArtifactKey,
		ArtifactsWhere: f.env.ArtifactsWhere,
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
