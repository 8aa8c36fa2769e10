package foldrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/testhook"
)

// A fold's views are rebuilt from its raw fold when the plugin about to
// fold it would not read them as they are: its view schema differs from the
// one recorded with them, or the fold was raw-only (RATIONALE.md, "View
// rebuilds"). Two ways:
//
//   - before an attempt follows (at start, or after a failure or pause):
//     the rebuild runs first, with nothing folding meanwhile (state
//     rebuilding; reads answer from the old views at the cursor);
//   - beside the live fold, when a reload brings such a module while the
//     fold follows: the old module keeps folding into the old views, the
//     new one replays a snapshot into the shadow, then catches up on the
//     loop and switches in one commit.

// rebuilds is a fold's view rebuild bookkeeping.
type rebuilds struct {
	mu      sync.Mutex
	running *httpapi.RebuildRun
	last    *httpapi.RebuildRun
	keys    map[string]struct{} // keys the live fold applied since a live rebuild's snapshot; nil when none records
	// recording is keys != nil, read without the lock on every live batch.
	recording atomic.Bool
	live      *liveRebuild   // the live rebuild running, if any
	offerMu   sync.Mutex     // serializes takeModule
	wg        sync.WaitGroup // live rebuild goroutines
}

type liveRebuild struct {
	module string // sha256
	cancel context.CancelFunc
	done   chan struct{}
}

// recording is the live fold's applier: while a live rebuild runs it
// records the keys of every batch before applying it (a batch that then
// fails to commit is recorded anyway: the catch-up folds the key's current
// value, which is harmless).
type recording struct {
	f     *Fold
	inner fold.Plugin
}

func (r recording) Apply(ctx context.Context, batch []fold.Update, rd fold.Reader) (fold.Output, error) {
	if rb := &r.f.rb; rb.recording.Load() { // no lock per batch when no rebuild records
		rb.mu.Lock()
		if rb.keys != nil {
			for i := range batch {
				rb.keys[batch[i].Key] = struct{}{}
			}
		}
		rb.mu.Unlock()
	}
	out, err := r.inner.Apply(ctx, batch, rd)
	if err == nil {
		if err = r.f.fx.Screen(&out); err != nil {
			return fold.Output{}, err
		}
	}
	return out, err
}

// record starts (on) or stops recording the keys of live batches, and
// returns those recorded so far.
func (rb *rebuilds) record(on bool) []string {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	keys := make([]string, 0, len(rb.keys))
	for k := range rb.keys {
		keys = append(keys, k)
	}
	rb.keys = nil
	if on {
		rb.keys = map[string]struct{}{}
	}
	rb.recording.Store(on)
	return keys
}

// rebuildStatus is the status API's part; nil before the first rebuild.
func (f *Fold) rebuildStatus() *httpapi.RebuildStatus {
	rb := &f.rb
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.running == nil && rb.last == nil {
		return nil
	}
	st := &httpapi.RebuildStatus{}
	if rb.running != nil {
		r := *rb.running
		st.Running = &r
	}
	if rb.last != nil {
		l := *rb.last
		st.Last = &l
	}
	return st
}

func (f *Fold) rebuildBegins(why, module string, live bool) {
	f.rb.mu.Lock()
	f.rb.running = &httpapi.RebuildRun{Why: why, Module: module, Live: live, StartedAt: time.Now().UTC()}
	f.rb.mu.Unlock()
	f.log.Warn("view rebuild starting: the old views keep serving until it switches in", "why", why, "module", shortSHA(module), "live", live)
}

func (f *Fold) rebuildProgress(p fold.RebuildProgress) {
	if hook := testhook.RebuildProgress; hook != nil {
		hook(p)
	}
	f.rb.mu.Lock()
	if f.rb.running != nil {
		f.rb.running.RebuildProgress = p
	}
	f.rb.mu.Unlock()
}

// rebuildEnds records how the running rebuild ended and logs it.
func (f *Fold) rebuildEnds(outcome string, p fold.RebuildProgress, err error) {
	f.rb.mu.Lock()
	r := f.rb.running
	f.rb.running = nil
	if r != nil {
		r.Outcome, r.RebuildProgress = outcome, p
		r.Took = time.Since(r.StartedAt).Round(time.Millisecond).String()
		if err != nil {
			r.Error = err.Error()
		}
		f.rb.last = r
	}
	f.rb.mu.Unlock()
	if f.plug() != nil {
		f.plug().src.reloaded() // the node's record says how it ended
	}
	args := []any{"outcome", outcome, "replayed", p.Replayed, "caught_up", p.CaughtUp, "dead_lettered", p.DeadLettered}
	if r != nil {
		args = append(args, "module", shortSHA(r.Module), "took", r.Took)
	}
	switch outcome {
	case "done":
		f.log.Warn("view rebuild done: the new views and plugin are switched in", args...)
	case "failed":
		f.log.Error("view rebuild failed: the old views stay", append(args, "err", err)...)
	default:
		f.log.Info("view rebuild ended", append(args, "err", err)...)
	}
}

// storedIdentity is the plugin identity the store records with its views:
// ok false when no plugin ever committed (or it cannot be read: err), err
// with ok true when the record does not parse.
func (f *Fold) storedIdentity() (id fold.PluginIdentity, ok bool, err error) {
	b, ok, err := f.store.PluginIdentity()
	if err != nil || !ok || len(b) == 0 {
		return fold.PluginIdentity{}, false, err
	}
	id, err = fold.ParsePluginIdentity(b)
	return id, true, err
}

// needsRebuild says why the fold's views must be rebuilt before its plugin
// folds on ("" when they need not be). Its caller holds f.sup.mu (the
// plugin's upcoming module does not change under it; see offerModule).
func (f *Fold) needsRebuild() string {
	if f.plug() == nil {
		return ""
	}
	up := f.plug().Upcoming()
	stored, ok, err := f.storedIdentity()
	switch {
	case !ok && err != nil:
		f.log.Warn("could not read the stored plugin identity; no view rebuild", "err", err)
		return ""
	case !ok:
		// No plugin ever committed: the views are empty, and a raw fold
		// with data never went through one.
		if has, _ := fold.AnyRawKey(f.store); has {
			return "a plugin was added to a raw-only fold that holds data"
		}
		return ""
	case err != nil:
		f.log.Warn("the stored plugin identity is unreadable; rebuilding the views", "err", err)
		return "the stored plugin identity is unreadable"
	case stored.ViewSchema != up.ViewSchema:
		return fmt.Sprintf("view schema %d (%s %s) -> %d (%s %s)", stored.ViewSchema, stored.Name, stored.Version,
			up.ViewSchema, up.Name, up.Version)
	}
	return ""
}

// rebuildBeforeFollowing rebuilds the views through the fold's plugin
// (its upcoming module) with nothing folding: the attempt's first step
// when needsRebuild said so.
func (f *Fold) rebuildBeforeFollowing(ctx context.Context, why string) error {
	f.state.Store(httpapi.StateRebuilding)
	id := f.plug().Upcoming()
	f.rebuildBegins(why, id.SHA256, false)
	p, err := f.rebuildInto(ctx, f.plug(), id, nil, nil)
	if err != nil {
		outcome := "failed"
		if ctx.Err() != nil {
			outcome = "cancelled"
		}
		f.rebuildEnds(outcome, p, err)
		return err
	}
	f.rebuildEnds("done", p, nil)
	return nil
}

// rebuildInto replays the fold through p (whose module is id) into a new
// shadow and switches it in. With onLoop nil nothing folds meanwhile: the
// snapshot is the fold as it is, and the switch commits directly.
// Otherwise the snapshot is taken, and the catch-up and switch run, through
// onLoop, and switched (if set) is called on the loop right after the
// switch committed.
func (f *Fold) rebuildInto(ctx context.Context, p fold.Plugin, id fold.PluginIdentity,
	onLoop func(context.Context, func(context.Context, fold.Target) error) error, switched func()) (fold.RebuildProgress, error) {
	var prog fold.RebuildProgress
	sh, err := f.store.BeginShadow()
	if err != nil {
		return prog, err
	}
	var snap *fold.Snapshot
	takeSnapshot := func(context.Context, fold.Target) error {
		if onLoop != nil {
			f.rb.record(true)
		}
		snap, err = f.store.Snapshot()
		return err
	}
	if onLoop != nil {
		err = onLoop(ctx, takeSnapshot)
	} else {
		err = takeSnapshot(ctx, nil)
	}
	defer f.rb.record(false)
	if err != nil {
		return prog, err
	}
	defer snap.Close()
	var total uint64
	if st, err := f.store.Stats(); err == nil {
		total = st.ApproxRawEntries
	}
	cfg := fold.RebuildConfig{MaxBatch: f.o.BatchSize, Progress: f.rebuildProgress}
	if cfg.Poison = f.countedPoison(); cfg.Poison != nil {
		defer f.pruneDeadLetters() // on_plugin_error = "skip" covers the rebuild too
	}
	if prog, err = fold.Replay(ctx, snap, sh, p, cfg, total); err != nil {
		return prog, err
	}
	if hook := testhook.AfterReplay; hook != nil {
		hook(ctx, onLoop != nil)
	}
	if err := ctx.Err(); err != nil {
		return prog, err // cancelled: never switch in a rebuild someone gave up
	}
	switchIn := func(ctx context.Context, t fold.Target) error {
		keys := f.rb.record(false)
		if prog, err = fold.CatchUp(ctx, t, sh, p, keys, cfg, prog); err != nil {
			return err
		}
		prog.Phase = "switching"
		if err := t.Commit(fold.Commit{Cursor: t.Cursor(), PluginIdentity: id.Encode(), Activate: sh}); err != nil {
			return err
		}
		if switched != nil {
			switched()
		}
		return nil
	}
	if onLoop == nil {
		return prog, switchIn(ctx, f.store)
	}
	return prog, onLoop(ctx, switchIn)
}

// errNoAttempt: the fold's watch is not running, so a live rebuild cannot
// switch in on its loop.
var errNoAttempt = errors.New("the fold's watch is not running")

// onLoop runs fn on the live loop, waiting for one while the attempt runs
// without (a repair); errNoAttempt when no attempt runs.
func (f *Fold) onLoop(ctx context.Context, fn func(context.Context, fold.Target) error) error {
	for {
		if l := f.loop.Load(); l != nil {
			if err := l.Do(ctx, fn); !errors.Is(err, fold.ErrLoopStopped) {
				return err
			}
		}
		f.sup.mu.Lock()
		running := f.sup.cancel != nil
		f.sup.mu.Unlock()
		if !running {
			return errNoAttempt
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// offerModule is the plugin runtime's Adopt hook: a reload accepted m. A
// module whose view schema matches the stored views is swapped in as
// usual (false). Otherwise the fold takes it: while an attempt runs, a live
// rebuild starts with it; between attempts it is swapped in under f.sup.mu,
// so the next attempt rebuilds before following.
func (f *Fold) offerModule(m *wasm.Module) bool { return f.takeModule(m, "") }

// takeModule is offerModule; force (the reason) rebuilds even when the
// view schema matches.
func (f *Fold) takeModule(m *wasm.Module, force string) bool {
	// One offer at a time: two reloads (the file watch and SIGHUP) must
	// not both start a live rebuild.
	f.rb.offerMu.Lock()
	defer f.rb.offerMu.Unlock()
	f.rb.mu.Lock()
	if lr := f.rb.live; lr != nil && lr.module == m.SHA256 {
		f.rb.mu.Unlock()
		m.Close(context.Background()) // that rebuild runs already
		return true
	}
	f.rb.mu.Unlock()
	f.stopLiveRebuild()
	f.sup.mu.Lock()
	defer f.sup.mu.Unlock()
	if s := &f.sup; s.rebuilding || s.pending != nil {
		// A rebuild before following runs through the live plugin (or the
		// attempt it ran in is being restarted): m must not reach the
		// plugin mid-replay. The attempt restarts, and the next one takes
		// m and decides again whether to rebuild.
		s.pending.Close(context.Background())
		s.pending = m
		if s.rebuilding && s.cancel != nil {
			s.restart = true
			s.cancel()
		}
		return true
	}
	if force == "" {
		// Nothing a plugin made is stored (a raw-only store with data is
		// rebuilt by the next attempt), or the schema is the same: the
		// swap is enough.
		if stored, ok, err := f.storedIdentity(); !ok || (err == nil && stored.ViewSchema == m.Identity().ViewSchema) {
			return false
		}
	}
	if f.sup.cancel == nil || f.runCtx.Load() == nil {
		f.plug().Swap(m)
		return true
	}
	ctx, cancel := context.WithCancel(*f.runCtx.Load())
	lr := &liveRebuild{module: m.SHA256, cancel: cancel, done: make(chan struct{})}
	f.rb.mu.Lock()
	f.rb.live = lr
	f.rb.mu.Unlock()
	f.rb.wg.Go(func() {
		defer close(lr.done)
		defer cancel()
		f.rebuildLive(ctx, m, force)
		f.rb.mu.Lock()
		if f.rb.live == lr {
			f.rb.live = nil
		}
		f.rb.mu.Unlock()
	})
	return true
}

// stopLiveRebuild cancels the live rebuild, if one runs, and waits for it.
func (f *Fold) stopLiveRebuild() {
	f.rb.mu.Lock()
	lr := f.rb.live
	f.rb.mu.Unlock()
	if lr != nil {
		lr.cancel()
		<-lr.done
	}
}

// rebuildLive rebuilds the views through m beside the live fold, then
// switches them in and hands m to the live plugin, on the loop. If the
// live fold stops first, m is handed over anyway (the next attempt
// rebuilds before it follows); if the rebuild fails, m is dropped and the
// old module keeps folding the old views.
func (f *Fold) rebuildLive(ctx context.Context, m *wasm.Module, why string) {
	if why == "" {
		why = fmt.Sprintf("a reload brought view schema %d (%s %s)", m.Identity().ViewSchema, m.Info.Name, m.Info.Version)
	}
	f.rebuildBegins(why, m.SHA256, true)
	p := f.plug().rt.NewPlugin(m)
	handed := false
	prog, err := f.rebuildInto(ctx, p, m.Identity(), f.onLoop, func() {
		// On the loop, right after the switch: the live fold's next
		// batch runs m, on the new views.
		f.plug().Swap(p.Release(context.Background()))
		handed = true
	})
	switch {
	case err == nil:
		f.rebuildEnds("done", prog, nil)
	case errors.Is(err, errNoAttempt):
		f.sup.mu.Lock()
		if f.sup.cancel == nil {
			f.plug().Swap(p.Release(context.Background()))
			handed = true
		}
		f.sup.mu.Unlock()
		if handed {
			f.rebuildEnds("deferred", prog, err)
			f.retryIfFailed("a new module is ready; the views are rebuilt before following")
		} else {
			f.rebuildEnds("cancelled", prog, err)
		}
	case ctx.Err() != nil:
		f.rebuildEnds("cancelled", prog, err)
	default:
		f.rebuildEnds("failed", prog, err)
	}
	if !handed {
		p.Close(context.Background())
	}
}

// Rebuild rebuilds the fold's views from its raw fold through the module
// its plugin source (file or object) holds now, beside the live fold, whatever the view
// schema (an operator's request: a view a plugin bug corrupted). The fold
// must be following; a module that fails validation is refused (the error).
func (f *Fold) Rebuild(ctx context.Context) error {
	if f.plug() == nil {
		return f.noPlugin()
	}
	if st := f.state.Load(); st != httpapi.StateFollowing {
		return fmt.Errorf("fold %s is %s: %w", f.o.Name, st, httpapi.ErrNotFollowing)
	}
	m, err := f.plug().src.load(ctx, f.plug().rt)
	if err != nil {
		if ctx.Err() == nil {
			f.plug().ReloadFailed(err)
		}
		return fmt.Errorf("fold %s: %w", f.o.Name, err)
	}
	if !f.takeModule(m, "requested by an operator") {
		m.Close(context.Background()) // unreachable with a reason: kept for ownership's sake
	}
	return nil
}
