package wasm

import (
	"context"
	"errors"
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
	return r.ReloadFrom(ctx, p, path, func(ctx context.Context) (*Module, error) { return r.LoadFile(ctx, path) })
}

// ReloadFrom is Reload for a module that load fetches and validates (with
// [Runtime.Load]) from where from names (for the log).
func (r *Runtime) ReloadFrom(ctx context.Context, p *Plugin, from string, load func(context.Context) (*Module, error)) error {
	m, err := load(ctx)
	if err != nil && (ctx.Err() != nil || errors.Is(err, ErrModuleUnavailable)) {
		return err // shutting down, or nothing read: not a verdict on a module
	}
	if err != nil {
		p.ReloadFailed(err)
		r.opts.Logger.Error("wasm: plugin reload refused; the running module stays", "from", from, "err", err)
		return err
	}
	sha, full, name, version := m.Short(), m.SHA256, m.Info.Name, m.Info.Version // m may be closed once handed on
	// The adopter sees every validated module, the running one's bytes
	// included: a file put back while another module was on its way in
	// (a rebuild for it running) must stop that.
	if r.opts.Adopt != nil && r.opts.Adopt(m) {
		p.reloadAccepted(full)
		r.opts.Logger.Info("wasm: plugin reload accepted; handed over (the views are rebuilt first)", "from", from, "module", sha,
			"name", name, "version", version)
		return nil
	}
	if !p.swapUnlessUpcoming(m) {
		m.Close(ctx)
		return nil // the module the next batch runs: nothing to swap
	}
	// The verdict is reported once the module is where it will run from,
	// so a reaction to it (a failed fold's retry) finds it there.
	defer p.reloadAccepted(full)
	r.opts.Logger.Info("wasm: plugin reload accepted; swapping at the next batch", "from", from, "module", sha,
		"name", name, "version", version)
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
			if b, err := files.ReadRegular(path, r.opts.MaxModuleBytes); err != nil || ModuleHash(b) != p.Upcoming().SHA256 {
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
