package wasm

import (
	"context"
	"os"
	"time"

	"github.com/foldhost/foldhost/internal/files"
)

// Reload loads the module at path (off the hot path: compiling and
// validating happen here, on the caller's goroutine) and, if it passes
// every check, swaps it into p at the next batch boundary. A module that
// fails is never used: p keeps running its current module and records the
// error in its Status.
func (r *Runtime) Reload(ctx context.Context, p *Plugin, path string) error {
	m, err := r.LoadFile(ctx, path)
	if err != nil && ctx.Err() != nil {
		return err // shutting down: not a verdict on the file
	}
	if err != nil {
		p.ReloadFailed(err)
		r.opts.Logger.Error("wasm: plugin reload refused; the running module stays", "path", path, "err", err)
		return err
	}
	if cur := p.Status().Module.SHA256; cur == m.SHA256 {
		m.Close(ctx)
		return nil // same bytes: nothing to swap
	}
	p.Swap(m)
	r.opts.Logger.Info("wasm: plugin reload accepted; swapping at the next batch", "path", path, "module", m.Short(),
		"name", m.Info.Name, "version", m.Info.Version)
	return nil
}

// WatchFile reloads p whenever the file at path changes (size or
// modification time), checking every interval, until ctx is done; it
// returns then, and the caller must wait for it before closing the Runtime. A file
// being written is seen as changed again once it settles, so a half-written
// module that fails validation is followed by a successful reload.
//
// The first look compares the file's bytes with p's running module rather
// than trusting a stat taken when the watch started: a file replaced between
// the module's load and the watch's start is reloaded, not missed.
func (r *Runtime) WatchFile(ctx context.Context, p *Plugin, path string, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	var last os.FileInfo
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			// being replaced; look again next tick
		case last == nil:
			last = fi
			if b, err := files.ReadRegular(path, r.opts.MaxModuleBytes); err != nil || ModuleHash(b) != p.Status().Module.SHA256 {
				_ = r.Reload(ctx, p, path)
			}
		case fi.Size() != last.Size() || !fi.ModTime().Equal(last.ModTime()):
			last = fi
			_ = r.Reload(ctx, p, path)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
