package foldrun

import (
	"context"
	"errors"
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

// UsesObjectStore reports whether the fold's module comes from a NATS
// object store (loaded once NATS is connected).
func (f *Fold) UsesObjectStore() bool { return pluginobj.IsRef(f.o.Plugin) }

// LoadPlugin loads the fold's plugin, validated, and starts watching its
// source: a changed module is validated off the hot path and swapped in at
// a batch boundary, and one that fails validation never replaces the
// running one (the refusal is logged and shown in the status). No plugin:
// a raw-only fold. Loading honours ctx (a signal during the start ends a
// trial run in progress). An object-store module needs the host's NATS
// connection; one that has not been pushed yet leaves the fold waiting
// (waitFor set, state waiting), and Run waits for it (awaitPlugin) while
// the rest of the host starts and runs: a node may start before the first
// module was pushed (with the embedded server, it must).
func (f *Fold) LoadPlugin(ctx context.Context) error {
	if f.o.Plugin == "" {
		f.log.Debug("raw-only fold: no plugin configured")
		return nil
	}
	var src pluginSource = fileSource(f.o.Plugin)
	if f.UsesObjectStore() {
		os, err := f.objectSource()
		if err != nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
		if _, err := os.info(ctx); pluginobj.Missing(err) {
			f.waitFor = os
			f.setWaiting(fmt.Sprintf("waiting for its plugin module %s to be pushed (foldhost plugin push FILE --fold %s); the fold starts once it is", os.ref, f.o.Name))
			f.state.Store(httpapi.StateWaiting)
			f.log.Warn("the plugin module has not been pushed: the fold waits for it, the rest of the host starts",
				"from", os.ref.String(), "push", "foldhost plugin push FILE --fold "+f.o.Name)
			return nil
		} else if err != nil {
			return fmt.Errorf("fold %s: plugin %s: %w", f.o.Name, os.ref, err)
		}
		src = os
	}
	return f.startPlugin(ctx, src)
}

// startPlugin loads the module src holds now and starts watching src.
func (f *Fold) startPlugin(ctx context.Context, src pluginSource) error {
	rt, err := wasm.NewRuntime(context.Background(), wasm.Options{
		CacheDir:         f.env.PluginCacheDir,
		Logger:           f.log,
		CallTimeout:      f.o.PluginCallTimeout,
		MemoryLimitPages: uint32(f.o.PluginMemoryMB) * 16, // 64 KiB pages; 0: the default
		MaxModuleBytes:   f.o.PluginMaxBytes,
		Retries:          f.o.PluginRetries,
		Limits:           f.o.PluginLimits,
		QueryInstances:   f.o.PluginQueryInstances,
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
	f.plugin.Store(p)
	return nil
}

// noPlugin is the error of an action that needs the fold's plugin when it
// has none: a raw-only fold has no views; one waiting for its module does
// not follow yet (both 409).
func (f *Fold) noPlugin() error {
	if f.waitFor == nil {
		return fmt.Errorf("fold %s folds raw entries only: %w", f.o.Name, httpapi.ErrNoViews)
	}
	return fmt.Errorf("fold %s is %s, waiting for its plugin module: %w", f.o.Name, f.state.Load(), httpapi.ErrNotFollowing)
}

// objectAwaitPoll is how often a waiting fold looks for its plugin object.
var objectAwaitPoll = time.Second

// setWaiting records why the fold waits (its status's reason).
func (f *Fold) setWaiting(why string) { f.waitReason.Store(&why) }

// awaitPlugin waits, for a fold whose object-store module was missing at
// the start (waitFor), until a version of it loads: it looks at the object
// every objectAwaitPoll, and at once on a reload (waitKick). A version the
// runtime refuses leaves the fold waiting for the next one pushed (its
// reason says so); one that cannot be downloaded is tried again at the
// next look. It returns ctx's error if ctx ends first.
func (f *Fold) awaitPlugin(ctx context.Context) error {
	src := f.waitFor
	refused, lastErr := "", "" // the digest refused last; the last lookup or download error logged
	t := time.NewTicker(objectAwaitPoll)
	defer t.Stop()
	for {
		info, err := src.info(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && info.Digest != refused:
			err := f.startPlugin(ctx, src)
			switch {
			case err == nil:
				f.log.Info("the plugin module is loaded: the fold starts", "from", src.ref.String())
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, wasm.ErrModuleUnavailable):
				if err.Error() != lastErr {
					lastErr = err.Error()
					f.log.Warn("could not download the plugin object; looking again", "from", src.ref.String(), "err", err, "every", objectAwaitPoll.String())
				}
			default:
				refused = info.Digest
				f.setErr(err)
				f.setWaiting(fmt.Sprintf("its plugin module %s (digest %s) was refused: %v; waiting for another version to be pushed", src.ref, info.Digest, err))
				f.log.Error("plugin object refused; the fold waits for another version", "from", src.ref.String(), "digest", info.Digest, "err", err)
			}
		case err != nil && !pluginobj.Missing(err) && err.Error() != lastErr:
			lastErr = err.Error()
			f.log.Warn("could not look at the plugin object; looking again", "from", src.ref.String(), "err", err, "every", objectAwaitPoll.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-f.waitKick:
		}
	}
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
	qs, _ := p.Queries()
	for _, q := range qs {
		st.Queries = append(st.Queries, httpapi.PluginQuery{Name: q.Name, ContentType: q.ContentType})
	}
	if len(qs) > 0 {
		st.QueryInstances = p.QueryInstances()
	}
	return st
}

func shortSHA(sha string) string { return sha[:min(len(sha), 12)] }

// ClosePlugin stops the watch (a reload in flight uses the runtime), then
// releases the plugin and its runtime. Called once the fold stopped.
func (f *Fold) ClosePlugin() {
	p := f.plug()
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

// Reload validates the fold's plugin file again and swaps it in at the
// next batch boundary if it changed (a file that fails validation is
// refused: the error); a failed fold is retried from its cursor either way
// (the operator fixed what stopped it, or wants to see it fail again). A
// fold waiting for its plugin object looks for it at once.
func (f *Fold) Reload(ctx context.Context) error {
	if f.waitFor != nil && f.plug() == nil {
		select {
		case f.waitKick <- struct{}{}:
		default:
		}
		return nil
	}
	var err error
	if f.plug() != nil {
		if err = f.plug().reload(ctx); err != nil {
			err = fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
	}
	if err == nil {
		f.retryIfFailed("reload requested")
	}
	return err
}
