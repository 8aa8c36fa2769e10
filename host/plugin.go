package host

import (
	"context"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
)

// plugin is a fold's WASM plugin with its own runtime (its lifetime is the
// fold's; compiled code is shared through the on-disk cache anyway) and
// the watch of where its module comes from.
type plugin struct {
	*wasm.Plugin
	rt  *wasm.Runtime
	src pluginSource

	stopWatch func()
	watched   chan struct{} // closed when the watch returned
}

// pluginSource is where a fold's module comes from: a file, or an object
// in a NATS object store (objectSource).
type pluginSource interface {
	String() string
	// load fetches the module as it is now, validated by rt.
	load(ctx context.Context, rt *wasm.Runtime) (*wasm.Module, error)
	// watch reloads p whenever the source changes, until ctx is done.
	watch(ctx context.Context, p *plugin)
	// reloaded is told of every reload verdict and module switch (it must
	// not block).
	reloaded()
}

// fileSource is a module file, watched for changes (size or mtime) every
// second.
type fileSource string

func (s fileSource) String() string { return string(s) }
func (s fileSource) load(ctx context.Context, rt *wasm.Runtime) (*wasm.Module, error) {
	return rt.LoadFile(ctx, string(s))
}
func (s fileSource) watch(ctx context.Context, p *plugin) {
	p.rt.WatchFile(ctx, p.Plugin, string(s), time.Second)
}
func (fileSource) reloaded() {}

// usesObjectStore reports whether the fold's module comes from a NATS
// object store (loaded once NATS is connected).
func (f *Fold) usesObjectStore() bool { return pluginobj.IsRef(f.o.Plugin) }

// loadPlugin loads the fold's plugin, validated, and starts watching its
// source: a changed module is validated off the hot path and swapped in at
// a batch boundary, and one that fails validation never replaces the
// running one (the refusal is logged and shown in the status). No plugin:
// a raw-only fold. Loading honours ctx (a signal during the start ends a
// trial run in progress). An object-store module needs the host's NATS
// connection.
func (f *Fold) loadPlugin(ctx context.Context) error {
	if f.o.Plugin == "" {
		f.log.Debug("raw-only fold: no plugin configured")
		return nil
	}
	var src pluginSource = fileSource(f.o.Plugin)
	if f.usesObjectStore() {
		os, err := f.objectSource()
		if err != nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
		// A node may start before the first module was pushed (with the
		// embedded server, it must): it waits for it.
		if err := os.await(ctx); err != nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
		src = os
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Options{
		CacheDir:         f.h.o.PluginCacheDir,
		Logger:           f.log,
		CallTimeout:      f.o.PluginCallTimeout,
		MemoryLimitPages: uint32(f.o.PluginMemoryMB) * 16, // 64 KiB pages; 0: the default
		MaxModuleBytes:   f.o.PluginMaxBytes,
		Retries:          f.o.PluginRetries,
		Limits:           f.o.PluginLimits,
		Adopt:            func(m *wasm.Module) bool { return f.offerModule(m) },
		OnReload: func(rl wasm.Reload) {
			src.reloaded()
			if rl.Outcome == wasm.ReloadAccepted {
				// A fold the old module failed retries with the new one.
				f.retryIfFailed("plugin reload accepted: module " + shortSHA(rl.Module))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("fold %s: %w", f.o.Name, err)
	}
	f.log.Info("loading plugin", "from", src.String())
	m, err := src.load(ctx, rt)
	if err != nil {
		rt.Close(context.Background())
		return fmt.Errorf("fold %s: load plugin: %w", f.o.Name, err)
	}
	f.log.Info("plugin loaded", "from", src.String(), "name", m.Info.Name, "version", m.Info.Version, "sha256", m.SHA256)
	wctx, cancel := context.WithCancel(context.Background())
	p := &plugin{Plugin: rt.NewPlugin(m), rt: rt, src: src, stopWatch: cancel, watched: make(chan struct{})}
	go func() {
		defer close(p.watched)
		src.watch(wctx, p)
	}()
	f.plugin = p
	return nil
}

// reload validates the plugin's module again and swaps it in at the next
// batch boundary if it changed; a module that fails validation is refused.
// A module that cannot be read at all (wasm.ErrModuleUnavailable) is no
// verdict: the reload fails and nothing is recorded.
func (p *plugin) reload(ctx context.Context) error {
	return p.rt.ReloadFrom(ctx, p.Plugin, p.src.String(), func(ctx context.Context) (*wasm.Module, error) {
		return p.src.load(ctx, p.rt)
	})
}

// status is the plugin's part of the fold's status.
func (p *plugin) status() httpapi.PluginStatus {
	ws := p.Status()
	st := httpapi.PluginStatus{PluginIdentity: ws.Module, Source: p.src.String(),
		Reloads: httpapi.PluginReloads{Accepted: ws.ReloadsAccepted, Refused: ws.ReloadsRefused}}
	if rl := ws.LastReload; rl != nil {
		st.LastReload = &httpapi.PluginReload{At: rl.At.UTC(), Outcome: rl.Outcome, Module: rl.Module, Reason: rl.Reason}
	}
	return st
}

func shortSHA(sha string) string { return sha[:min(len(sha), 12)] }

// closePlugin stops the watch (a reload in flight uses the runtime), then
// releases the plugin and its runtime. Called once the fold stopped.
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
