package repair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Runner is the repair a fold runs when its cursor expires, or before it
// starts without one (fold.FollowConfig.Repair): it reads the live
// retention (recording the cursor's eviction memo), plans
// (protocol.CursorlessStartNeedsRepair, protocol.PlanRepair) and runs the
// plan: a refusal; the key-listing diff or re-list ([Relist]), whose Verify
// reads retention again after the listing; or the restore from the newest
// artifact, vetted by [Runner.CheckArtifact] before the download and
// against the imported store's own origin after it, and folded in by
// [Restore], whose Verify reads retention again before the cursor moves.
//
// The host runs one Runner per fold (host.Fold wires it to NATS, the
// artifact store and its status); the deterministic simulation (package
// sim) drives the same Runner with its simulated bucket, store and
// artifacts. Set the fields before the first call. A Runner serves one
// fold; its repairs never run concurrently (Follow's goroutine), while
// ReadRetention may also run beside them (the host's head poll).
type Runner struct {
	// Mode is the fold's repair mode.
	Mode protocol.RepairMode
	// Bucket and Scope are what the fold folds (its config), Stream the
	// creation time of the bucket's stream the store records
	// (fold.Origin.StreamCreated): an artifact must be of the same bucket
	// and stream, with a scope covering Scope.
	Bucket string
	Scope  []string
	Stream time.Time
	// Partition is the partition of the bucket's keys the fold folds
	// (protocol.Partition.String; "" for the whole bucket): an artifact
	// must be of the same one.
	Partition string
	// Store is the fold's store.
	Store fold.Target
	// Retention reads the bucket's live retention (natskv.Bucket.Retention).
	Retention func(ctx context.Context) (protocol.Retention, error)
	// Listed reports whether the bucket lists key live now
	// (natskv.Bucket.Listed; RestoreConfig.Listed).
	Listed func(ctx context.Context, key string) (bool, error)
	// Artifacts is where other nodes publish the fold's artifacts, under
	// ArtifactKey; nil when none is configured. ArtifactsWhere names it in
	// messages.
	Artifacts      artifact.Store
	ArtifactKey    string
	ArtifactsWhere string
	// ScratchDir holds a repair's scratch store (the sorted listing, or the
	// imported artifact); it must not be inside the fold's store.
	ScratchDir string
	// MaxBatch: Config.MaxBatch.
	MaxBatch int
	// Poison: Config.Poison.
	Poison func(fold.Update, error) fold.DeadLetter
	// Hooks tell the caller how a repair goes; each may be nil.
	Hooks Hooks
	// Logger; default slog.Default().
	Logger *slog.Logger

	// sawEviction: a retention reading showed eviction; the memo may not
	// be committed yet (noteEviction).
	sawEviction atomic.Bool
}

// Hooks are a Runner's reports to its caller (the host's status and
// readers).
type Hooks struct {
	// Begin runs as a repair starts working on the store, and the func it
	// returns when that work is over (the host pins the pre-repair state
	// for readers in between); that func must allow a second call. A
	// successful repair calls it before End.
	Begin func(plan protocol.RepairPlan) (end func())
	// Join runs before a repair folds its difference into the store: art
	// is the imported artifact a restore folds in (its own history, its
	// own effects), nil for a listing. The host decides there whether the
	// fold joins another publisher's effects midway. An error fails the
	// attempt (it is retried) before anything is folded.
	Join func(ctx context.Context, plan protocol.RepairPlan, art *fold.Store) error
	// End records how a repair ended: outcome "done", "refused", "failed",
	// "cancelled" (ctx ended) or "skipped" (a cursorless start found no
	// artifact to restore from).
	End func(plan protocol.RepairPlan, outcome string, err error, res Result)
	// Progress receives the figures as the repair goes (Config.Progress).
	Progress func(Progress)
}

func (r *Runner) log() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

func (r *Runner) begin(plan protocol.RepairPlan) func() {
	if r.Hooks.Begin == nil {
		return func() {}
	}
	return r.Hooks.Begin(plan)
}

func (r *Runner) join(ctx context.Context, plan protocol.RepairPlan, art *fold.Store) error {
	if r.Hooks.Join == nil {
		return nil
	}
	return r.Hooks.Join(ctx, plan, art)
}

func (r *Runner) end(plan protocol.RepairPlan, outcome string, err error, res Result) {
	if r.Hooks.End != nil {
		r.Hooks.End(plan, outcome, err, res)
	}
}

// Run repairs the fold: cause is why (an error matching
// fold.ErrCursorExpired, an operator's request), nil for a start without a
// cursor. It returns what fold.FollowConfig.Repair does: the source to go
// on folding from, (nil, nil) when a cursorless start needs no repair, or
// an error (one matching fold.ErrRepairRefused stops the fold untouched).
// feed is the fold's watch source, plugin its plugin.
func (r *Runner) Run(ctx context.Context, feed fold.Feed, plugin fold.Plugin, cause error) (fold.Source, error) {
	ret, err := r.ReadRetention(ctx, r.Store.Commit)
	if err != nil {
		return nil, fmt.Errorf("planning the repair: %w", err)
	}
	truth := protocol.ListingTruth(&ret, r.Store.Cursor().EvictionSeen)
	if cause == nil {
		has, err := hasRawData(r.Store)
		if err != nil {
			return nil, err
		}
		if !protocol.CursorlessStartNeedsRepair(r.Mode, has, truth) {
			return nil, nil
		}
		if has {
			r.log().Warn("the store holds data but no cursor (a first commit that did not complete, or a store filled elsewhere): repairing before following")
		} else {
			r.log().Info("a first start on a bucket whose listing is not the truth (its retention evicts current values): looking for an artifact to restore from before following",
				"eviction", evictionOf(ret))
		}
	}
	plan := protocol.PlanRepair(r.Mode, truth)
	switch plan {
	case protocol.PlanRefuse:
		err := r.refusal(ret, r.Store.Cursor(), cause)
		r.end(plan, "refused", err, Result{})
		return nil, err
	case protocol.PlanRestore:
		return r.restore(ctx, feed, plugin, ret, cause)
	}
	return r.relist(ctx, feed, plugin, plan, ret, cause)
}

// relist runs the key-listing diff (protocol.PlanKeyListingDiff) or the
// re-list only (protocol.PlanRelistOnly) on a state-sync of the fold's
// stream.
func (r *Runner) relist(ctx context.Context, feed fold.Feed, plugin fold.Plugin, plan protocol.RepairPlan, ret protocol.Retention, cause error) (fold.Source, error) {
	src, err := feed.Watch(ctx, protocol.Cursor{}) // a state-sync, on the fold's stream
	if err != nil {
		return nil, err
	}
	r.log().Warn("repair starting", "plan", plan.String(), "cursor", uint64(r.Store.Cursor().Rev), "retains", fmt.Sprintf("%d..%d", ret.First, ret.Last), "cause", causeText(cause))
	end := r.begin(plan)
	if err := r.join(ctx, plan, nil); err != nil {
		end()
		src.Stop()
		err = fmt.Errorf("repair: %w", err)
		r.failed(ctx, plan, err, Result{})
		return nil, err
	}
	res, err := Relist(ctx, src, r.Store, plugin, Config{
		Deletes:    plan == protocol.PlanKeyListingDiff,
		Scope:      r.Scope,
		ScratchDir: r.ScratchDir,
		MaxBatch:   r.MaxBatch,
		Poison:     r.Poison,
		Verify: func(ctx context.Context) error {
			if plan != protocol.PlanKeyListingDiff {
				return nil
			}
			ret, err := r.ReadRetention(ctx, r.Store.Commit)
			if err != nil {
				return fmt.Errorf("re-reading retention after the listing: %w", err)
			}
			if protocol.ListingTruth(&ret, r.Store.Cursor().EvictionSeen) != protocol.TruthYes {
				return r.refusal(ret, r.Store.Cursor(), cause)
			}
			return nil
		},
		Progress: r.Hooks.Progress,
		Logger:   r.Logger,
	})
	end()
	if err != nil {
		src.Stop()
		r.failed(ctx, plan, err, res)
		return nil, err
	}
	r.end(plan, "done", nil, res)
	r.log().Warn("repair done; following", "plan", plan.String(), "cursor", res.Cursor, "listed", res.Listed,
		"folded", res.Folded, "deleted", res.Deleted, "unchanged", res.Unchanged, "took", res.Took.Round(time.Millisecond).String())
	if res.Kept > 0 {
		r.log().Warn("repair = \"none\": fold keys the bucket no longer lists were kept; keys deleted while the cursor was expired may persist", "kept", res.Kept)
	}
	return src, nil
}

// failed records a repair that ended without completing: refused (the
// fold stops), cancelled (shutdown), or failed (retried, unless the error
// stops the fold: a plugin error, persistent commit failures).
func (r *Runner) failed(ctx context.Context, plan protocol.RepairPlan, err error, res Result) {
	outcome := "failed"
	switch {
	case ctx.Err() != nil:
		outcome = "cancelled"
	case errors.Is(err, fold.ErrRepairRefused):
		outcome = "refused"
	}
	r.end(plan, outcome, err, res)
	if outcome == "cancelled" {
		r.log().Info("repair interrupted by shutdown; the next start finishes it", "plan", plan.String(), "folded", res.Folded)
		return
	}
	r.log().Error("repair ended without completing", "plan", plan.String(), "outcome", outcome, "err", err)
}

func causeText(err error) string {
	if err == nil {
		return "a start without a cursor"
	}
	return err.Error()
}

// refusal explains a key-listing repair that cannot run.
func (r *Runner) refusal(ret protocol.Retention, cur protocol.Cursor, cause error) error {
	err := fmt.Errorf("%w (repair = %q): %s, so a key missing from the bucket's listing may have aged out rather than been deleted, and a key-listing repair would delete it; "+
		"set repair = \"auto\" or \"restore\" with an artifact store other nodes export to, and keep this data_dir (it holds values NATS no longer has)",
		fold.ErrRepairRefused, r.Mode, evictionWhy(ret, cur))
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

// evictionOf names what in r evicts current values ("max_age 1h0m0s,
// per-message TTLs"), "" when nothing does.
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

// ReadRetention reads the bucket's live retention (Runner.Retention) and
// commits the eviction memo (through commit) the first time a reading
// shows retention evicting current values. The host calls it at start and
// at every head poll too, with a commit that goes through its live loop.
func (r *Runner) ReadRetention(ctx context.Context, commit func(fold.Commit) error) (protocol.Retention, error) {
	ret, err := r.Retention(ctx)
	if err != nil {
		return ret, err
	}
	if err := r.noteEviction(ret, commit); err != nil {
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
func (r *Runner) noteEviction(ret protocol.Retention, commit func(fold.Commit) error) error {
	cur := r.Store.Cursor()
	if ret.HasEvicted() {
		r.sawEviction.Store(true)
	}
	if cur.EvictionSeen || !r.sawEviction.Load() {
		return nil
	}
	cur.EvictionSeen = true
	if err := commit(fold.Commit{Cursor: cur}); err != nil {
		return fmt.Errorf("recording the eviction memo: %w", err)
	}
	r.log().Warn("retention has evicted current values of the bucket: this fold will never trust a key listing again (eviction memo set on the cursor)",
		"eviction", evictionOf(ret), "first_retained", ret.First)
	return nil
}

// hasRawData reports whether the store holds any raw entry.
func hasRawData(s fold.Reader) (bool, error) {
	errFound := errors.New("found")
	err := s.RawKeys("", func([]byte) error { return errFound })
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}
