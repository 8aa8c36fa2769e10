package foldrun

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// deadLetters is a fold's dead letter bookkeeping (on_plugin_error =
// "skip"): updates the plugin failed on alone, committed raw only.
type deadLetters struct {
	skipped atomic.Uint64 // since start
	stored  atomic.Int64  // in the store (-1: not counted yet)
	pending atomic.Bool   // one was committed since the last prune
}

// poison is the loop's Poison hook: the dead letter of u, logged.
func (f *Fold) poison(u fold.Update, err error) fold.DeadLetter {
	msg := fold.DeadLetterText(err)
	var sha string
	if p := f.plug(); p != nil {
		sha = p.Running().SHA256 // the module that failed, not one a reload swapped in since
	}
	// Counted once committed (onApplied): a failed commit isolates again.
	f.log.Warn("plugin failed on one update; skipping it: its raw entry is committed, its view effect is not (dead letter)",
		"key", u.Key, "revision", u.Rev, "op", u.Op.String(), "err", msg)
	return fold.DeadLetter{Key: u.Key, Rev: uint64(u.Rev), Op: u.Op.String(), Error: msg, Plugin: sha, At: time.Now().UTC()}
}

// countedPoison is the Poison hook of the work that commits outside the
// loop (a view rebuild, a repair), which counts its dead letters itself;
// nil unless on_plugin_error = "skip". The caller prunes when done.
func (f *Fold) countedPoison() func(fold.Update, error) fold.DeadLetter {
	hook := f.poisonHook()
	if hook == nil {
		return nil
	}
	return func(u fold.Update, err error) fold.DeadLetter {
		f.dead.skipped.Add(1)
		f.dead.pending.Store(true)
		return hook(u, err)
	}
}

// pruneDeadLetters applies the fold's bounds after a commit that recorded
// dead letters (on the loop's goroutine, or the effects publisher's after
// it moved a poison effect: the store takes concurrent prunes, and the
// pending swap runs one per flag).
func (f *Fold) pruneDeadLetters() {
	if !f.dead.pending.Swap(false) {
		return
	}
	left, err := f.store.PruneDeadLetters(f.o.DeadLetterMax, f.o.DeadLetterMaxAge)
	if err != nil {
		f.log.Warn("pruning dead letters failed", "err", err)
		f.dead.stored.Store(-1)
		return
	}
	f.dead.stored.Store(int64(left))
}

// storedDeadLetters is how many dead letters the store holds.
func (f *Fold) storedDeadLetters() int64 {
	if n := f.dead.stored.Load(); n >= 0 {
		return n
	}
	var n int64
	if err := f.store.DeadLetters(func(fold.DeadLetter) error { n++; return nil }); err != nil {
		return -1
	}
	// Cached only if nothing set the count meanwhile: a prune that ran
	// during the scan knows better (a plain store here once put back a
	// count taken before a rebuild's dead letter, over the prune's 1).
	f.dead.stored.CompareAndSwap(-1, n)
	return n
}

// DeadLetters implements httpapi.DeadLetterer: the stored dead letters,
// oldest first.
func (f *Fold) DeadLetters() ([]fold.DeadLetter, error) {
	out := []fold.DeadLetter{}
	err := f.store.DeadLetters(func(d fold.DeadLetter) error { out = append(out, d); return nil })
	return out, err
}

// ReplayDeadLetters folds each dead letter (only those of key, if not "")
// again through the plugin, on the live loop: the key's value as the raw
// fold holds it now (a later write included), or a delete when it is gone.
// One the plugin folds now leaves the dead letters; one it fails on stays,
// with the new error. A poison effect's dead letter is not replayed (it
// stays; res.Effects counts them). Needs a following fold.
func (f *Fold) ReplayDeadLetters(ctx context.Context, key string) (httpapi.ReplayResult, error) {
	var res httpapi.ReplayResult
	if f.plug() == nil {
		return res, f.noPlugin()
	}
	if st := f.state.Load(); st != httpapi.StateFollowing {
		return res, fmt.Errorf("fold %s is %s: %w", f.o.Name, st, httpapi.ErrNotFollowing)
	}
	l := f.loop.Load()
	if l == nil {
		return res, fmt.Errorf("fold %s: %w", f.o.Name, httpapi.ErrNotFollowing)
	}
	var todo []fold.DeadLetter
	if err := f.store.DeadLetters(func(d fold.DeadLetter) error {
		switch {
		case d.Effect != nil:
			// A poison effect: a replay folds keys, and would drop the
			// effects it makes (RATIONALE.md, "Plugin effects"); it stays,
			// counted.
			if key == "" {
				res.Effects++
			}
		case key == "" || d.Key == key:
			todo = append(todo, d)
		}
		return nil
	}); err != nil {
		return res, err
	}
	// One dead letter per loop request: live batches fold between them,
	// and the caller's context is honoured between them (a call into the
	// plugin is bounded by its deadline and retries).
	var err error
	for _, d := range todo {
		if err = ctx.Err(); err != nil {
			break
		}
		var failed bool
		if err = l.Do(ctx, func(ctx context.Context, t fold.Target) error {
			var rerr error
			failed, rerr = f.replayOne(ctx, t, d)
			return rerr
		}); err != nil {
			break
		}
		if failed {
			res.Failed++
		} else {
			res.Replayed++
		}
	}
	f.dead.stored.Store(-1) // recounted on demand
	if errors.Is(err, fold.ErrLoopStopped) {
		err = fmt.Errorf("fold %s: %w", f.o.Name, httpapi.ErrNotFollowing)
	}
	f.log.Info("dead letters replayed", "key", key, "replayed", res.Replayed, "failed", res.Failed, "of", len(todo), "effects_kept", res.Effects, "err", err)
	return res, err
}

// replayOne folds dead letter d again (on the loop, through t): the key's
// value as the raw fold holds it now, or a delete. failed: the plugin failed
// again and d was kept with the new error.
func (f *Fold) replayOne(ctx context.Context, t fold.Target, d fold.DeadLetter) (failed bool, err error) {
	e, ok, err := t.Get(d.Key)
	if err != nil {
		return false, err
	}
	u := fold.Update{Key: d.Key, Op: fold.OpDelete, Rev: protocol.NoRevision}
	if ok {
		u = fold.Update{Key: d.Key, Op: fold.OpPut, Rev: e.Rev, Value: e.Value}
	}
	out, aerr := f.applier().Apply(ctx, []fold.Update{u}, t) // recorded for a live rebuild
	if aerr != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		d.Error, d.At = fold.DeadLetterText(aerr), time.Now().UTC()
		return true, t.Commit(fold.Commit{Cursor: t.Cursor(), DeadLetters: []fold.DeadLetter{d}})
	}
	// out.Effects are dropped: the replay folds the key's value as it is
	// now, not the dead-lettered update (RATIONALE.md, "Plugin effects").
	return false, t.Commit(fold.Commit{Views: out.Views, Cursor: t.Cursor(), PluginIdentity: out.Identity,
		ClearDeadLetters: []protocol.Revision{protocol.Revision(d.Rev)}})
}

// deadLetterStatus is the status API's part; nil for a fold that stops on
// plugin errors and holds no dead letter.
func (f *Fold) deadLetterStatus() *httpapi.DeadLetterStatus {
	stored := f.storedDeadLetters()
	if f.o.OnPluginError != PluginErrorSkip && stored == 0 {
		return nil
	}
	return &httpapi.DeadLetterStatus{Policy: f.o.OnPluginError, Stored: stored, SkippedSinceStart: f.dead.skipped.Load(),
		Max: f.o.DeadLetterMax, MaxAge: f.o.DeadLetterMaxAge.String()}
}
