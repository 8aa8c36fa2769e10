package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
)

// loadPlugin returns the plugin a fold applies, and the function that
// releases it (called once, after the fold stopped). It is the only place
// that knows how plugins are loaded.
//
// An empty path is a raw-only fold: fold.NopPlugin keeps the raw entries and
// the cursor, and no views. Otherwise path is a WASM module (ABI v1),
// validated before use; compiled code is cached under cacheDir. The file is
// watched: a changed module is validated off the hot path and swapped in at
// a batch boundary, and a module that fails validation never replaces the
// running one (the refusal is logged and shown in the fold's status).
//
// Loading honours ctx (a signal during start ends a trial run in progress).
func loadPlugin(ctx context.Context, f FoldConfig, cacheDir string, logger *slog.Logger) (fold.Plugin, func() error, error) {
	path := f.Plugin
	if path == "" {
		logger.Debug("raw-only fold: no plugin configured")
		return fold.NopPlugin, func() error { return nil }, nil
	}
	// A runtime per fold: its lifetime is the fold's (compiled code is
	// shared through the on-disk cache anyway).
	retries := f.PluginRetries
	if retries == 0 {
		retries = -1 // wasm.Options: 0 means the default, negative none
	}
	timeout := f.PluginCallTimeout
	if timeout == 0 {
		timeout = wasm.NoCallTimeout // config: "0s" means none
	}
	rt, err := wasm.NewRuntime(context.Background(), wasm.Options{
		CacheDir:         cacheDir,
		Logger:           logger,
		CallTimeout:      timeout,
		MaxModuleBytes:   int64(f.PluginMaxMB) << 20,
		MemoryLimitPages: uint32(f.PluginMemoryMB) * 16, // 64 KiB pages
		Retries:          retries,
	})
	if err != nil {
		return nil, nil, err
	}
	logger.Info("loading plugin", "path", path)
	m, err := rt.LoadFile(ctx, path)
	if err != nil {
		rt.Close(context.Background())
		return nil, nil, err
	}
	logger.Info("plugin loaded", "path", path, "name", m.Info.Name, "version", m.Info.Version, "sha256", m.SHA256)
	wctx, cancel := context.WithCancel(context.Background())
	p := &wasmPlugin{Plugin: rt.NewPlugin(m), rt: rt, path: path}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		rt.WatchFile(wctx, p.Plugin, path, time.Second)
	}()
	return p, func() error {
		cancel()
		<-watched // a reload in flight uses the runtime
		p.Close(context.Background())
		return rt.Close(context.Background())
	}, nil
}

// wasmPlugin is a WASM plugin that can describe itself to the status API and
// be reloaded on request.
type wasmPlugin struct {
	*wasm.Plugin
	rt   *wasm.Runtime
	path string
}

// Reload validates the plugin file again and swaps it in at the next batch
// boundary if it changed; a module that fails validation is refused.
func (p *wasmPlugin) Reload(ctx context.Context) error { return p.rt.Reload(ctx, p.Plugin, p.path) }

// PluginInfo reports the module the fold runs now (it changes on reload).
func (p *wasmPlugin) PluginInfo() httpapi.PluginInfo {
	s := p.Status()
	return httpapi.PluginInfo{Name: s.Module.Name, Version: s.Module.Version, SHA256: s.Module.SHA256, ABI: s.Module.ABI}
}
