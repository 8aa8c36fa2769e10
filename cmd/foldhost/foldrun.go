package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// runner runs one configured fold (fold.Follow) and keeps the status,
// counters and progress the HTTP surface and the logs report. It
// implements httpapi.Fold.
type runner struct {
	cfg     FoldConfig
	store   *fold.Store
	bucket  *natskv.Bucket
	plugin  fold.Plugin
	log     *slog.Logger
	metrics *httpapi.Metrics

	headPoll, progress time.Duration

	state                 atomic.Value // httpapi.State
	ready                 atomic.Bool
	headAtStart, lastSeq  atomic.Uint64
	delivered, rejected   atomic.Uint64
	batches               atomic.Uint64
	pluginErrs, commitErr atomic.Uint64
	lastErr               atomic.Pointer[string]

	// exp exports the fold's artifacts; loop is the live fold loop the
	// rounds run on.
	exp      *exporter
	exportMu sync.Mutex // serializes rounds
	loop     atomic.Pointer[fold.Loop]
	runCtx   atomic.Pointer[context.Context] // the fold's context while it runs
	// exportMeta guards what the rounds report.
	exportMeta     sync.Mutex
	lastExport     *lastExport
	lastPublished  time.Time
	exportedCursor uint64 // the highest cursor a round published or found superseded
	exportRounds   httpapi.ExportRounds
}

var _ httpapi.Fold = (*runner)(nil)

func newRunner(cfg FoldConfig, store *fold.Store, bucket *natskv.Bucket, plugin fold.Plugin, exp *exporter, log *slog.Logger, m *httpapi.Metrics, headPoll, progress time.Duration) *runner {
	r := &runner{cfg: cfg, store: store, bucket: bucket, plugin: plugin, exp: exp, log: log, metrics: m, headPoll: headPoll, progress: progress}
	r.state.Store(httpapi.StateStarting)
	return r
}

// Name implements httpapi.Fold.
func (r *runner) Name() string { return r.cfg.Name }

// Snapshot implements httpapi.Fold.
func (r *runner) Snapshot() (*fold.Snapshot, error) { return r.store.Snapshot() }

// Status implements httpapi.Fold.
func (r *runner) Status() httpapi.Status {
	cur := r.store.Cursor() // memory; valid after Close too
	last := r.lastSeq.Load()
	st := httpapi.Status{
		Name:          r.cfg.Name,
		Bucket:        r.cfg.Bucket,
		Scope:         append([]string{}, r.cfg.Scope...),
		State:         r.state.Load().(httpapi.State),
		Ready:         r.ready.Load(),
		Cursor:        uint64(cur.Rev),
		EvictionSeen:  cur.EvictionSeen,
		StreamLastSeq: last,
		HeadAtStart:   r.headAtStart.Load(),
		Repair:        r.cfg.Repair.String(),
		DataDir:       r.cfg.DataDir,
	}
	if last > st.Cursor {
		st.Lag = last - st.Cursor
	}
	if pi, ok := r.plugin.(interface{ PluginInfo() httpapi.PluginInfo }); ok {
		st.Plugin = pi.PluginInfo() // a WASM plugin; raw-only folds report none
	}
	d, rej := r.delivered.Load(), r.rejected.Load()
	st.Counters = httpapi.Counters{
		DeliveredSinceStart: d,
		Applied:             d - min(rej, d),
		Rejected:            rej,
		Batches:             r.batches.Load(),
		PluginErrors:        r.pluginErrs.Load(),
		CommitFailures:      r.commitErr.Load(),
	}
	if p := r.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	st.Export = r.exportStatus()
	if !st.Ready {
		switch st.State {
		case httpapi.StateHydrating:
			st.Reason = fmt.Sprintf("hydrating: cursor %d, stream head at start %d", st.Cursor, st.HeadAtStart)
		case httpapi.StateFailed:
			st.Reason = "failed: " + st.LastError
		default:
			st.Reason = string(st.State)
		}
	}
	return st
}

func (r *runner) setErr(err error) {
	s := err.Error()
	r.lastErr.Store(&s)
}

// run folds until ctx is done (nil: the pending batch was flushed) or the
// fold stops on an error, which it returns. The store stays open.
func (r *runner) run(ctx context.Context) error {
	if ret, _, err := r.bucket.Retention(ctx); err != nil {
		r.log.Warn("could not read the stream head; the watch will retry", "err", err)
		r.setErr(err)
	} else {
		r.headAtStart.Store(uint64(ret.Last))
		r.lastSeq.Store(uint64(ret.Last))
	}
	cur := r.store.Cursor()
	mode := "resume"
	if cur.Rev == protocol.NoRevision {
		mode = "state-sync"
	}
	r.log.Info("fold starting", "bucket", r.cfg.Bucket, "scope", natskv.Scope{Prefixes: r.cfg.Scope}.String(),
		"mode", mode, "cursor", cur.Rev, "stream_head", r.headAtStart.Load(), "data_dir", r.cfg.DataDir)
	if r.cfg.Repair != protocol.RepairNone {
		r.log.Warn("repair mode is configured, but cursor-expiry repair is not implemented yet: a fold whose cursor expired stops",
			"repair", r.cfg.Repair.String())
	}
	r.state.Store(httpapi.StateHydrating)

	start := time.Now()
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() {
		stopBG()
		bgWG.Wait() // an export round in flight ends before the store closes
	}()
	r.runCtx.Store(&bg)
	go r.pollHead(bg)
	go r.logProgress(bg, start)
	bgWG.Go(func() { r.exportEvery(bg) })

	feed := r.bucket.Feed(natskv.Scope{Prefixes: r.cfg.Scope}, natskv.WatchOptions{Buffer: r.cfg.Buffer})
	cur, err := fold.Follow(ctx, feed, r.store, r.plugin, fold.FollowConfig{
		OnLoop: func(l *fold.Loop) { r.loop.Store(l) },
		Loop: fold.LoopConfig{
			Window:        r.cfg.BatchWindow,
			MaxBatch:      r.cfg.BatchSize,
			OnApplied:     r.onApplied,
			OnSynced:      func(c protocol.Cursor) { r.onSynced(c, start) },
			OnPluginError: func(error) { r.pluginErrs.Add(1) },
			OnCommitError: func(err error) {
				r.commitErr.Add(1)
				r.setErr(err)
			},
			Logger: r.log,
		},
	})
	if err != nil {
		r.state.Store(httpapi.StateFailed)
		r.setErr(err)
		r.log.Error("fold stopped on an error; its store is still served at its cursor", "cursor", cur.Rev, "err", err, "hint", hint(err))
		return err
	}
	r.state.Store(httpapi.StateStopped)
	r.log.Info("fold stopped", "cursor", cur.Rev, "delivered_since_start", r.delivered.Load())
	return nil
}

// hint tells an operator what a fold-stopping error means.
func hint(err error) string {
	switch {
	case errors.Is(err, fold.ErrCursorExpired):
		return "NATS no longer retains revisions after the fold's cursor; cursor-expiry repair is not implemented yet: move the data_dir aside to re-fold from scratch"
	case errors.Is(err, fold.ErrCursorBeyondHead):
		return "the fold's cursor is past the stream's last revision: the bucket was probably deleted and recreated; move the data_dir aside to re-fold from scratch"
	case errors.Is(err, fold.ErrPlugin):
		return "the plugin failed on a batch; nothing of it was committed; fix the plugin (or the data) and restart"
	case errors.Is(err, fold.ErrCommitFailures):
		return "the store kept refusing commits (disk full? permissions?); fix the disk and restart"
	case errors.Is(err, fold.ErrCorrupt):
		return "the store is corrupt; restore it (move the data_dir aside to re-fold from scratch)"
	}
	return ""
}

func (r *runner) onApplied(a fold.Applied) {
	r.delivered.Add(uint64(a.Updates))
	r.rejected.Add(uint64(a.Rejected))
	r.batches.Add(1)
	if r.metrics != nil {
		r.metrics.ObserveBatch(r.cfg.Name, a.Took)
	}
	for {
		last := r.lastSeq.Load()
		if uint64(a.Cursor.Rev) <= last || r.lastSeq.CompareAndSwap(last, uint64(a.Cursor.Rev)) {
			break
		}
	}
}

func (r *runner) onSynced(c protocol.Cursor, start time.Time) {
	if r.ready.Swap(true) {
		return // a re-armed watch synced again
	}
	r.state.CompareAndSwap(httpapi.StateHydrating, httpapi.StateFollowing)
	r.log.Info("fold caught up", "cursor", c.Rev, "head_at_start", r.headAtStart.Load(),
		"delivered", r.delivered.Load(), "took", time.Since(start).Round(time.Millisecond))
}

// pollHead keeps the stream's last revision fresh for the lag.
func (r *runner) pollHead(ctx context.Context) {
	t := time.NewTicker(r.headPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ret, _, err := r.bucket.Retention(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Debug("stream head poll failed", "err", err)
				}
				continue
			}
			r.lastSeq.Store(uint64(ret.Last))
		}
	}
}

// logProgress logs the hydration's progress until the fold caught up.
func (r *runner) logProgress(ctx context.Context, start time.Time) {
	t := time.NewTicker(r.progress)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.ready.Load() {
				return
			}
			cur, head := uint64(r.store.Cursor().Rev), r.headAtStart.Load()
			d := r.delivered.Load()
			elapsed := time.Since(start)
			args := []any{"cursor", cur, "head_at_start", head, "delivered", d,
				"rate_per_s", int(float64(d) / elapsed.Seconds()), "elapsed", elapsed.Round(time.Second)}
			if head > 0 {
				args = append(args, "percent", fmt.Sprintf("%.1f", 100*float64(min(cur, head))/float64(head)))
			}
			r.log.Info("fold hydrating", args...)
		}
	}
}
