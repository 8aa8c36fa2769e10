package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/plugins/example-router/go/router"
)

func (b *bench) nextDir() string {
	b.runs++
	return filepath.Join(b.dir, fmt.Sprintf("run%03d", b.runs))
}

func (b *bench) hostOptions(dir, plugin string) host.Options {
	return host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: b.url, Name: "foldhost-bench"}},
		PluginCacheDir: b.cacheDir,
		Logger:         b.quietLog,
		Folds: []host.FoldOptions{{Name: "bench", Bucket: b.bucket, Plugin: plugin, DataDir: dir,
			PluginCallTimeout: wasm.NoCallTimeout}},
	}
}

// hostFold folds the bucket into a fresh store, from Start to the head.
func (b *bench) hostFold(ctx context.Context, plugin string) (time.Duration, error) {
	dir := b.nextDir()
	took, err := b.runHost(ctx, b.hostOptions(dir, plugin))
	if err != nil {
		return 0, err
	}
	return took, os.RemoveAll(dir)
}

// runHost starts a host on o, waits until its fold reached the head, stops
// it and returns the time from the start to the head.
func (b *bench) runHost(ctx context.Context, o host.Options) (time.Duration, error) {
	took, _, err := b.runHostThen(ctx, o, nil)
	return took, err
}

// runHostThen is runHost that, once at the head, goes on until then holds
// (nil: at once), and returns the time to the head and the time to then.
func (b *bench) runHostThen(ctx context.Context, o host.Options, then func(*host.Fold) (bool, error)) (time.Duration, time.Duration, error) {
	return b.runHostBeside(ctx, o, nil, then)
}

// runHostBeside is runHostThen with beside (when not nil) run on the fold
// from its start to the head: it must return once its context ends.
func (b *bench) runHostBeside(ctx context.Context, o host.Options, beside func(context.Context, *host.Fold), then func(*host.Fold) (bool, error)) (time.Duration, time.Duration, error) {
	t0 := time.Now()
	h, err := host.New(o)
	if err != nil {
		return 0, 0, err
	}
	if err := h.Start(ctx); err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	f := h.Folds()[0]
	bctx, stopBeside := context.WithCancel(ctx)
	besideDone := make(chan struct{})
	go func() {
		defer close(besideDone)
		if beside != nil {
			beside(bctx, f)
		}
	}()
	// The fold's status is read every 100 polls (about 0.1 s): it is not
	// free (a store read), and reading it every millisecond took CPU from
	// the fold it times (the effects variant's wait for the outbox to
	// drain, most of all).
	polls := 0
	failed := func() error {
		if polls++; polls%100 != 0 {
			return nil
		}
		b.foldProgress(t0, f)
		if st := f.Status(); st.State == "failed" {
			return fmt.Errorf("the fold failed: %s", st.LastError)
		}
		return nil
	}
	err = waitUntil(ctx, func() (bool, error) { return uint64(f.Store().Cursor().Rev) >= b.head, failed() })
	took := time.Since(t0)
	stopBeside()
	<-besideDone
	thenTook := took
	if err == nil && then != nil {
		err = waitUntil(ctx, func() (bool, error) {
			if err := failed(); err != nil {
				return false, err
			}
			return then(f)
		})
		thenTook = time.Since(t0)
	}
	cancel()
	err = errors.Join(err, <-done)
	h.Close()
	return took, thenTook, err
}

// nativeFold folds the bucket with fold.Follow through the router's Go
// code run in-process: foldhost's loop and store, no module.
func (b *bench) nativeFold(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	dir := b.nextDir()
	st, _, err := fold.Open(dir, fold.Options{Logger: b.quietLog})
	if err != nil {
		return 0, err
	}
	bk, err := natskv.OpenBucket(ctx, b.nc, natskv.BucketConfig{Name: b.bucket, History: 1}, natskv.Options{})
	if err != nil {
		return 0, errors.Join(err, st.Close())
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := fold.Follow(fctx, bk.Feed(natskv.Scope{}, natskv.WatchOptions{}), st,
			wasm.NewNative[router.Record](&router.Router{}), fold.FollowConfig{Loop: fold.LoopConfig{Logger: b.quietLog}})
		done <- err
	}()
	err = waitUntil(ctx, func() (bool, error) { return uint64(st.Cursor().Rev) >= b.head, nil })
	took := time.Since(t0)
	cancel()
	return took, errors.Join(err, <-done, st.Close(), os.RemoveAll(dir))
}

// waitFolded waits until f's cursor reaches rev. A fold whose cursor has
// not moved for two minutes is a stall, said so, not a bench that never
// ends; one that moves is waited for however slow (a race-built fold on a
// starved machine took over two minutes for the 5000 revisions the load
// may run ahead).
func waitFolded(ctx context.Context, f *host.Fold, rev uint64) error {
	last, moved := uint64(f.Store().Cursor().Rev), time.Now()
	return waitUntil(ctx, func() (bool, error) {
		cur := uint64(f.Store().Cursor().Rev)
		switch {
		case cur >= rev:
			return true, nil
		case cur != last:
			last, moved = cur, time.Now()
		case time.Since(moved) > 2*time.Minute:
			return false, fmt.Errorf("the fold stalled short of probe revision %d: its cursor stayed at %d for 2 minutes", rev, cur)
		}
		return false, nil
	})
}

// waitUntil polls cond every millisecond until it holds, fails, or ctx ends.
func waitUntil(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
