package foldrun

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// Run folds until ctx is done, then flushes the pending batch. A watch
// that fails leaves the fold failed (served at its cursor, its head still
// polled) until a retry (supervise); run returns the failure the fold was
// in when ctx ended, nil if none. Every goroutine it starts is done when
// it returns; the store stays open.
func (f *Fold) Run(ctx context.Context) error {
	if f.waitFor != nil {
		// Its module was not pushed at the start: the fold starts once
		// it loads, or never (stopped) if the host stops first.
		if err := f.awaitPlugin(ctx); err != nil {
			f.state.Store(httpapi.StateStopped)
			f.log.Info("fold stopped while waiting for its plugin module", "from", f.waitFor.ref.String())
			return nil
		}
	}
	// No loop runs yet: the eviction memo may be committed directly.
	ret, retErr := f.retention(ctx, f.store.Commit)
	if retErr != nil {
		f.log.Warn("could not read the stream's retention; the watch will retry", "err", retErr)
		f.setErr(retErr)
	} else {
		f.headAtStart.Store(uint64(ret.Last))
	}
	cur := f.store.Cursor()
	mode := "resume"
	if cur.Rev == protocol.NoRevision {
		mode = "state-sync"
	}
	f.log.Info("fold starting", "bucket", f.o.Bucket, "scope", f.o.scope().String(),
		"mode", mode, "cursor", uint64(cur.Rev), "stream_head", f.headAtStart.Load(), "data_dir", f.o.DataDir)
	// A state-sync of a bucket with history (or one not known to have
	// none) may join another publisher's effects: the first attempt that
	// records the hold, or finds none needed, settles it (JoinSync).
	join := mode == "state-sync" && f.fx.Publishing() && !f.fx.Held() && (retErr != nil || ret.Last > 0)
	start := time.Now()
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() {
		stopBG()
		bgWG.Wait()    // an export round in flight ends before the store closes
		f.rb.wg.Wait() // and a live view rebuild
	}()
	f.runCtx.Store(&bg)
	bgWG.Go(func() { f.pollHead(bg) })
	bgWG.Go(func() { f.logProgress(bg, start) })
	bgWG.Go(func() { f.exportEvery(bg) })
	bgWG.Go(func() { f.fencePointer(bg) })
	if f.fx.Publishing() {
		bgWG.Go(func() { f.fx.Run(bg) })
	}

	applier, feed := f.applier(), f.feed()
	return f.supervise(ctx, func(ctx context.Context, rebuild string) (protocol.Cursor, error) {
		if f.store.Broken() != nil { // a write error broke it: reopened from its files
			if cur, err := f.store.Reopen(); err != nil {
				return cur, err
			}
		}
		if join {
			if err := f.fx.JoinSync(ctx); err != nil {
				return f.store.Cursor(), err
			}
			join = false
		}
		if rebuild != "" {
			err := f.rebuildBeforeFollowing(ctx, rebuild)
			f.sup.mu.Lock()
			f.sup.rebuilding = false // reloads reach the plugin again (offerModule)
			f.sup.mu.Unlock()
			if err != nil {
				return f.store.Cursor(), err
			}
			f.state.Store(httpapi.StateHydrating)
		}
		return fold.Follow(ctx, feed, f.store, applier, fold.FollowConfig{
			OnLoop: func(l *fold.Loop) { f.loop.Store(l) },
			Repair: func(ctx context.Context, cause error) (fold.Source, error) {
				return f.repair(ctx, feed, applier, cause)
			},
			Loop: fold.LoopConfig{
				Window:        f.o.BatchWindow,
				MaxBatch:      f.o.BatchSize,
				OnApplied:     f.onApplied,
				OnSynced:      func(c protocol.Cursor) { f.onSynced(c, start) },
				OnPluginError: func(error) { f.pluginErrs.Add(1) },
				Poison:        f.poisonHook(),
				OnCommitError: func(err error) {
					f.commitErr.Add(1)
					f.setErr(err)
				},
				Logger: f.log,
			},
		})
	})
}

// applier is what applies the fold's batches: its plugin, or nothing for a
// raw-only fold.
func (f *Fold) applier() fold.Plugin {
	if f.plug() != nil {
		return recording{f: f, inner: f.plug()}
	}
	return fold.NopPlugin
}

// feed is the fold's watch source: its bucket and scope, on the stream its
// store records.
func (f *Fold) feed() fold.Feed {
	return f.env.Demux.Feed(f.bucket, f.o.scope(), natskv.WatchOptions{Buffer: f.o.Buffer, Stream: f.origin.StreamCreated})
}

// poisonHook is the loop's Poison for on_plugin_error = "skip", nil
// otherwise (a plugin error stops the fold).
func (f *Fold) poisonHook() func(fold.Update, error) fold.DeadLetter {
	if f.o.OnPluginError != PluginErrorSkip || f.plug() == nil {
		return nil
	}
	return f.poison
}

func (f *Fold) onApplied(a fold.Applied) {
	f.clearErr()
	if f.fx.PointOwed() {
		f.fx.CaughtUp(a.Cursor)
	}
	if a.DeadLettered > 0 {
		f.dead.skipped.Add(uint64(a.DeadLettered))
		f.dead.pending.Store(true)
		f.pruneDeadLetters()
	}
	f.delivered.Add(uint64(a.Updates))
	f.rejected.Add(uint64(a.Rejected))
	f.batches.Add(1)
	f.lastCommit.Store(time.Now().UnixNano())
	f.env.Metrics.ObserveBatch(f.o.Name, a.Took)
	for {
		last := f.lastSeq.Load()
		if uint64(a.Cursor.Rev) <= last || f.lastSeq.CompareAndSwap(last, uint64(a.Cursor.Rev)) {
			break
		}
	}
	if uint64(a.Cursor.Rev) >= f.lastSeq.Load() {
		f.atHead.Store(time.Now().UnixNano())
	}
}

func (f *Fold) onSynced(c protocol.Cursor, start time.Time) {
	f.clearErr()
	f.fx.CaughtUp(c)
	if f.ready.Swap(true) {
		return // a re-armed watch synced again
	}
	f.state.CompareAndSwap(httpapi.StateHydrating, httpapi.StateFollowing)
	f.log.Info("fold caught up", "cursor", uint64(c.Rev), "head_at_start", f.headAtStart.Load(),
		"delivered", f.delivered.Load(), "took", time.Since(start).Round(time.Millisecond).String())
}

// pollHead keeps the stream's last revision fresh for the lag.
func (f *Fold) pollHead(ctx context.Context) {
	t := time.NewTicker(f.env.HeadPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The retention read also records the eviction memo, through
			// the live loop (never beside an apply); without a loop (a
			// repair runs) the next poll or the repair records it.
			_, err := f.retention(ctx, func(c fold.Commit) error {
				l := f.loop.Load()
				if l == nil {
					return fold.ErrLoopStopped
				}
				return l.Do(ctx, func(_ context.Context, t fold.Target) error {
					c.Cursor = t.Cursor() // the loop may have moved it since
					c.Cursor.EvictionSeen = true
					return t.Commit(c)
				})
			})
			if err != nil && ctx.Err() == nil {
				f.log.Debug("stream head poll failed", "err", err)
			}
		}
	}
}

// logProgress logs the hydration's progress until the fold caught up.
func (f *Fold) logProgress(ctx context.Context, start time.Time) {
	t := time.NewTicker(f.env.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f.ready.Load() {
				return
			}
			cur, head := uint64(f.store.Cursor().Rev), f.headAtStart.Load()
			d := f.delivered.Load()
			elapsed := time.Since(start)
			args := []any{"cursor", cur, "head_at_start", head, "delivered", d,
				"rate_per_s", int(float64(d) / elapsed.Seconds()), "elapsed", elapsed.Round(time.Second).String()}
			if head > 0 {
				args = append(args, "percent", fmt.Sprintf("%.1f", 100*float64(min(cur, head))/float64(head)))
			}
			f.log.Info("fold hydrating", args...)
		}
	}
}
