package host

import (
	"context"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
)

// plugin is a fold's WASM plugin with its own runtime (its lifetime is the
// fold's; compiled code is shared through the on-disk cache anyway) and
// the watch of its file.
type plugin struct {
	*wasm.Plugin
	rt   *wasm.Runtime
	path string

	stopWatch func()
	watched   chan struct{} // closed when the file watch returned
}

// loadPlugin loads the fold's plugin, validated, and starts watching its
// file: a changed module is validated off the hot path and swapped in at a
// batch boundary, and one that fails validation never replaces the running
// one (the refusal is logged and shown in the status). No plugin: a
// raw-only fold. Loading honours ctx (a signal during the start ends a
// trial run in progress).
func (f *Fold) loadPlugin(ctx context.Context) error {
	if f.o.Plugin == "" {
		f.log.Debug("raw-only fold: no plugin configured")
		return nil
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Options{
		CacheDir:         f.h.o.PluginCacheDir,
		Logger:           f.log,
		CallTimeout:      f.o.PluginCallTimeout,
		MemoryLimitPages: uint32(f.o.PluginMemoryMB) * 16, // 64 KiB pages; 0: the default
		MaxModuleBytes:   f.o.PluginMaxBytes,
		Retries:          f.o.PluginRetries,
		Adopt:            func(m *wasm.Module) bool { return f.offerModule(m) },
		OnReload: func(rl wasm.Reload) {
			if rl.Outcome == wasm.ReloadAccepted {
				// A fold the old module failed retries with the new one.
				f.retryIfFailed("plugin reload accepted: module " + shortSHA(rl.Module))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("fold %s: %w", f.o.Name, err)
	}
	f.log.Info("loading plugin", "path", f.o.Plugin)
	m, err := rt.LoadFile(ctx, f.o.Plugin)
	if err != nil {
		rt.Close(context.Background())
		return fmt.Errorf("fold %s: load plugin: %w", f.o.Name, err)
	}
	f.log.Info("plugin loaded", "path", f.o.Plugin, "name", m.Info.Name, "version", m.Info.Version, "sha256", m.SHA256)
	wctx, cancel := context.WithCancel(context.Background())
	p := &plugin{Plugin: rt.NewPlugin(m), rt: rt, path: f.o.Plugin, stopWatch: cancel, watched: make(chan struct{})}
	go func() {
		defer close(p.watched)
		rt.WatchFile(wctx, p.Plugin, p.path, time.Second)
	}()
	f.plugin = p
	return nil
}

// reload validates the plugin file again and swaps it in at the next
// batch boundary if it changed; a module that fails validation is refused.
func (p *plugin) reload(ctx context.Context) error { return p.rt.Reload(ctx, p.Plugin, p.path) }

// status is the plugin's part of the fold's status.
func (p *plugin) status() httpapi.PluginStatus {
	ws := p.Status()
	st := httpapi.PluginStatus{PluginIdentity: ws.Module,
		Reloads: httpapi.PluginReloads{Accepted: ws.ReloadsAccepted, Refused: ws.ReloadsRefused}}
	if rl := ws.LastReload; rl != nil {
		st.LastReload = &httpapi.PluginReload{At: rl.At.UTC(), Outcome: rl.Outcome, Module: rl.Module, Reason: rl.Reason}
	}
	return st
}

func shortSHA(sha string) string { return sha[:min(len(sha), 12)] }

// closePlugin stops the file watch (a reload in flight uses the runtime),
// then releases the plugin and its runtime. Called once the fold stopped.
func (f *Fold) closePlugin() {
	p := f.plugin
	if p == nil {
		return
	}
	p.stopWatch()
	<-p.watched
	p.Close(context.Background())
	if err := p.rt.Close(context.Background()); err != nil {
		f.log.Warn("closing plugin failed", "err", err)
	}
}
