package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/effects"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// Fold is one running fold of a Host: its store, plugin and watch, its
// state, counters and export rounds. It implements httpapi.Fold and
// httpapi.Exporter. Safe for concurrent use.
type Fold struct {
	o      FoldOptions
	h      *Host
	log    *slog.Logger
	store  *fold.Store
	bucket *natskv.Bucket
	plugin atomic.Pointer[plugin] // nil: a raw-only fold, or one waiting for its module (waitFor)
	origin fold.Origin            // what the store folds: checked against the config at Start

	// A fold whose object-store module was not pushed at the start waits
	// for it in Run (awaitPlugin): waitFor is set at Start, never after.
	waitFor    *objectSource
	waitReason atomic.Pointer[string] // why it waits (its status's reason)
	waitKick   chan struct{}          // cap 1: look for the module now

	state                 *stateCell
	sup                   supervisor
	ready                 atomic.Bool
	headAtStart, lastSeq  atomic.Uint64
	delivered, rejected   atomic.Uint64
	batches               atomic.Uint64
	lastCommit            atomic.Int64 // UnixNano of the last committed batch of updates; 0 before
	pluginErrs, commitErr atomic.Uint64
	lastErr               atomic.Pointer[string]

	// atHead is when the fold was last seen at the stream head (UnixNano;
	// 0 before): a commit that reached the head as last known, or a head
	// poll that found the cursor there. The status's LagSeconds is the
	// time since, while the fold lags.
	atHead atomic.Int64

	rb   rebuilds
	dead deadLetters

	repairMu sync.Mutex
	repairs  httpapi.RepairStatus
	pinned   atomic.Pointer[fold.Snapshot] // the pre-repair state readers see while a repair runs
	onRepair func(repair.Progress)         // RepairStopped's progress, if set
	repairer *repair.Runner                // plans and runs the repairs (Start makes it: newRepairer)

	fx *effects.Publisher // the plugin's effects: screened, held, published

	loop   atomic.Pointer[fold.Loop]       // the live loop rounds run on
	runCtx atomic.Pointer[context.Context] // the fold's context while it runs
	export exportState
}

// plug is the fold's plugin: nil for a raw-only fold, and for one whose
// module (from a NATS object store) is not loaded yet (waitFor). It is set
// once, never unset.
func (f *Fold) plug() *plugin { return f.plugin.Load() }

var (
	_ httpapi.Fold         = (*Fold)(nil)
	_ httpapi.Exporter     = (*Fold)(nil)
	_ httpapi.Controller   = (*Fold)(nil)
	_ httpapi.DeadLetterer = (*Fold)(nil)
)

// newFold opens the fold's store and clears its export staging dir
// (anything there was left by an export that died mid-way; the store's
// lock, now held, keeps other exports of the fold out) and what a killed
// bootstrap left.
func newFold(o FoldOptions, h *Host) (*Fold, error) {
	f := &Fold{o: o, h: h, log: h.log.With("fold", o.Name)}
	f.state = newStateCell(f.log)
	f.sup.wake = make(chan struct{}, 1)
	f.waitKick = make(chan struct{}, 1)
	f.dead.stored.Store(-1) // counted on first demand
	// A repair --reset killed mid-swap left its fresh store recorded:
	// put in place before the data dir is opened (else an empty store
	// would be made there).
	if _, err := datadir.FinishSwap(o.DataDir, f.log); err != nil {
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	so := fold.Options{Sync: o.Sync, Logger: f.log, DiskReserve: o.DiskReserve, MemTableSize: o.MemTableSize}
	if hook := testhook.StoreOptions; hook != nil {
		hook(o.Name, &so)
	}
	st, _, err := fold.Open(o.DataDir, so)
	if err != nil {
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	f.store = st
	f.fx = effects.New(effects.Config{Fold: o.Name, Store: st, Options: o.effects(), Refold: o.refold, Logger: f.log,
		Hydrating: func() bool { return f.state.Load() == httpapi.StateHydrating },
		DeadLettered: func() {
			f.dead.stored.Store(-1) // recounted by the prune
			f.dead.pending.Store(true)
			f.pruneDeadLetters()
		},
		SetErr: f.setErr,
	})
	datadir.ClearStaleImportsIfIdle(o.DataDir)
	// A repair's scratch dir is left only by a process that died
	// mid-repair (the store's lock, now held, keeps every other out).
	if err := os.RemoveAll(datadir.RepairDir(o.DataDir)); err != nil {
		st.Close()
		return nil, fmt.Errorf("fold %s: clearing a stale repair scratch dir: %w", o.Name, err)
	}
	if err := datadir.ResetStageDir(o.DataDir); err != nil {
		st.Close()
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	return f, nil
}

func (f *Fold) closeStore() {
	if err := f.store.Close(); err != nil && !errors.Is(err, fold.ErrClosed) {
		f.log.Error("closing store failed", "err", err)
	}
}

// Name implements httpapi.Fold.
func (f *Fold) Name() string { return f.o.Name }

// Snapshot implements httpapi.Fold. While a repair runs it is a share of the
// pre-repair state: a reader never sees a half-repaired fold.
func (f *Fold) Snapshot() (*fold.Snapshot, error) {
	if p := f.pinned.Load(); p != nil {
		if sn, err := p.Share(); err == nil {
			return sn, nil
		}
		// Unpinned meanwhile: the repair is over, the store is whole.
	}
	return f.store.Snapshot()
}

// Status implements httpapi.Fold.
func (f *Fold) Status() httpapi.Status {
	cur := f.store.Cursor() // memory; valid after Close too
	last := f.lastSeq.Load()
	state, since := f.state.get()
	st := httpapi.Status{
		Name:          f.o.Name,
		Bucket:        f.o.Bucket,
		Scope:         append([]string{}, f.o.Scope...),
		State:         state,
		StateSince:    since.UTC(),
		Ready:         f.ready.Load(),
		Cursor:        uint64(cur.Rev),
		Settled:       uint64(cur.SettledRev()),
		EvictionSeen:  cur.EvictionSeen,
		StreamLastSeq: last,
		HeadAtStart:   f.headAtStart.Load(),
		Repair:        f.o.Repair.String(),
		Repairs:       f.repairStatus(),
		Rebuild:       f.rebuildStatus(),
		DeadLetters:   f.deadLetterStatus(),
		DataDir:       f.o.DataDir,
	}
	if last > st.Cursor {
		st.Lag = last - st.Cursor
		if at := f.atHead.Load(); at != 0 {
			secs := max(0, time.Since(time.Unix(0, at)).Seconds())
			st.LagSeconds = &secs
		}
	} else {
		st.LagSeconds = new(float64)
	}
	if p := f.plug(); p != nil {
		st.Plugin = p.status()
	} else {
		st.Plugin.Source = f.o.Plugin // a fold waiting for its module says which
	}
	d, rej := f.delivered.Load(), f.rejected.Load()
	st.Counters = httpapi.Counters{
		DeliveredSinceStart: d,
		Applied:             d - min(rej, d),
		Rejected:            rej,
		Batches:             f.batches.Load(),
		PluginErrors:        f.pluginErrs.Load(),
		CommitFailures:      f.commitErr.Load(),
	}
	if ns := f.lastCommit.Load(); ns != 0 {
		at := time.Unix(0, ns).UTC()
		st.LastCommitAt = &at
	}
	if p := f.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	st.Export = f.exportStatus()
	st.Effects = f.fx.Status()
	st.NATS = f.h.health.Status()
	if down := st.NATS.DownFor(time.Now()); st.Ready && down > f.h.o.NATS.DisconnectGrace {
		st.Ready = false
		st.Reason = fmt.Sprintf("NATS unreachable for %v (reconnecting since %s): the fold cannot follow, its reads grow stale",
			down.Round(time.Second), st.NATS.Since.UTC().Format(time.RFC3339))
	}
	if e := st.Effects; st.Ready && e != nil && e.MaxWaitSeconds > 0 && e.OutboxWaitSeconds > e.MaxWaitSeconds {
		st.Ready = false
		st.Reason = fmt.Sprintf("effects: the outbox's first effect has waited %v to be published, more than effects_max_wait (%v); %d wait",
			time.Duration(e.OutboxWaitSeconds*float64(time.Second)).Round(time.Millisecond), f.o.EffectsMaxWait, e.Outbox)
		if e.LastError != "" {
			st.Reason += "; last error: " + e.LastError
		}
		if e.Held != "" {
			st.Reason += "; held, " + e.Held + " (foldhost admin release-effects when no other replica publishes)"
		}
	}
	if !st.Ready && st.Reason == "" {
		switch st.State {
		case httpapi.StateHydrating:
			st.Reason = fmt.Sprintf("hydrating: cursor %d, stream head at start %d", st.Cursor, st.HeadAtStart)
		case httpapi.StateFailed:
			st.Reason = "failed: " + st.LastError
		case httpapi.StateWaiting:
			st.Reason = "waiting"
			if p := f.waitReason.Load(); p != nil {
				st.Reason = *p
			}
		case httpapi.StateRepairing:
			st.Reason = "repairing an expired cursor: reads answer from the fold as it was before the repair"
		case httpapi.StateRebuilding:
			st.Reason = "rebuilding the views through a new plugin before following: reads answer from the old views"
		case httpapi.StatePaused:
			st.Reason = fmt.Sprintf("paused by an operator at cursor %d; resume it to follow again", st.Cursor)
		default:
			st.Reason = string(st.State)
		}
	}
	return st
}

func (f *Fold) setErr(err error) {
	s := err.Error()
	f.lastErr.Store(&s)
}

// clearErr: the fold recovered (it committed a batch, or caught up), so
// the error it had is history (the log keeps it).
func (f *Fold) clearErr() {
	if f.lastErr.Load() != nil {
		f.lastErr.Store(nil)
	}
}

// run folds until ctx is done, then flushes the pending batch. A watch
// that fails leaves the fold failed (served at its cursor, its head still
// polled) until a retry (supervise); run returns the failure the fold was
// in when ctx ended, nil if none. Every goroutine it starts is done when
// it returns; the store stays open.
func (f *Fold) run(ctx context.Context) error {
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
	f.log.Info("fold starting", "bucket", f.o.Bucket, "scope", natskv.Scope{Prefixes: f.o.Scope}.String(),
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
	return f.bucket.Feed(natskv.Scope{Prefixes: f.o.Scope}, natskv.WatchOptions{Buffer: f.o.Buffer, Stream: f.origin.StreamCreated})
}

// hint tells an operator what a fold-stopping error means.
func hint(err error) string {
	switch {
	case errors.Is(err, fold.ErrCursorExpired):
		return "NATS no longer retains revisions after the fold's cursor, and the repair could not run (see the error)"
	case errors.Is(err, fold.ErrCursorBeyondHead):
		return "the fold's cursor is past the stream's last revision: the bucket was probably deleted and recreated; move the data_dir aside to re-fold from scratch"
	case errors.Is(err, fold.ErrPlugin):
		return "the plugin failed on a batch; nothing of it was committed; drop a fixed module in place (the fold retries with it), or fix the data and resume (SIGHUP)"
	case errors.Is(err, fold.ErrStoreBroken) && errors.Is(err, fold.ErrDiskFull):
		return "a write of the store failed for lack of space (see the error); its data on disk is whole up to a commit; free space and the fold reopens the store from its files and resumes by itself (checked every 10s), or resume it (SIGHUP)"
	case errors.Is(err, fold.ErrStoreBroken):
		return "a write of the store failed (see the error); its data on disk is whole up to a commit; fix the disk and resume the fold (SIGHUP), which reopens the store from its files"
	case errors.Is(err, fold.ErrDiskFull):
		return "the store's filesystem is short of space (see the error: the path, the bytes needed and free); nothing of the batch was written; free space and the fold resumes by itself (checked every 10s), or resume it (SIGHUP)"
	case errors.Is(err, fold.ErrCommitFailures):
		return "the store kept refusing commits (disk full? permissions?); fix the disk and resume (SIGHUP)"
	case errors.Is(err, fold.ErrCorrupt):
		return "the store is corrupt; restore it (move the data_dir aside to re-fold from scratch)"
	}
	return ""
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
	f.h.metrics.ObserveBatch(f.o.Name, a.Took)
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
	t := time.NewTicker(f.h.o.HeadPollInterval)
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
	t := time.NewTicker(f.h.o.ProgressInterval)
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

// WaitCursor waits until the fold's cursor reaches rev, calling progress
// (when set) with its status at every check, which come every interval. It
// fails when the fold stops first (on an error, or at shutdown) or ctx
// ends.
func (f *Fold) WaitCursor(ctx context.Context, rev uint64, every time.Duration, progress func(httpapi.Status)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st := f.Status()
		if progress != nil {
			progress(st)
		}
		switch {
		case st.Cursor >= rev:
			return nil
		case st.State == httpapi.StateFailed:
			return fmt.Errorf("fold %s stopped at cursor %d: %s", f.o.Name, st.Cursor, st.LastError)
		case st.State == httpapi.StateStopped:
			return fmt.Errorf("fold %s stopped at cursor %d, before %d", f.o.Name, st.Cursor, rev)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fold %s at cursor %d, waiting for %d: %w", f.o.Name, st.Cursor, rev, ctx.Err())
		case <-t.C:
		}
	}
}

// CursorAdvanced is closed by the fold's next commit (httpapi.CursorWaiter:
// reads with ?min_revision wait on it).
func (f *Fold) CursorAdvanced() <-chan struct{} { return f.store.CursorAdvanced() }
