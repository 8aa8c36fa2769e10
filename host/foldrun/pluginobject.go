package foldrun

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/testhook"
)

// A fold's module can live in a NATS object store (plugin =
// "nats-object://BUCKET/NAME"): every node of a fleet loads it from there,
// watches the object for new versions (each validated by the node's own
// runtime before it is swapped in; one that fails is refused and the
// running module stays), and records what it runs in a KV bucket
// (pluginobj.DefaultRecordBucket) that `foldhost plugins` lists.
// RATIONALE.md, "Plugin rollout through NATS".

// objectPoll is how often a node looks at its object besides the watch,
// and rewrites its record.
const objectPoll = 30 * time.Second

// objectSource is a module in a NATS object store.
type objectSource struct {
	f    *Fold
	ref  pluginobj.Ref
	js   jetstream.JetStream
	kick chan struct{} // a reload verdict or switch: rewrite the record now

	recs    *pluginobj.Records
	lastErr string // the last record write's error, logged once
}

func (f *Fold) objectSource() (*objectSource, error) {
	ref, err := pluginobj.ParseRef(f.o.Plugin)
	if err != nil {
		return nil, err
	}
	if f.env.NATS == nil {
		return nil, errors.New("a plugin from a NATS object store needs the NATS connection")
	}
	js, err := jetstream.New(f.env.NATS)
	if err != nil {
		return nil, err
	}
	return &objectSource{f: f, ref: ref, js: js, kick: make(chan struct{}, 1)}, nil
}

func (s *objectSource) String() string { return s.ref.String() }

func (s *objectSource) load(ctx context.Context, rt *wasm.Runtime) (*wasm.Module, error) {
	m, err := s.fetch(ctx)
	if err != nil && !pluginobj.Verdict(err) {
		// NATS unreachable, the object deleted, a download cut short.
		return nil, fmt.Errorf("could not download the plugin object %s: %w: %w", s.ref, wasm.ErrModuleUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	return rt.Load(ctx, m.Bytes)
}

// fetch downloads the object, bounded by the fold's plugin_max_mb.
func (s *objectSource) fetch(ctx context.Context) (pluginobj.Module, error) {
	max := s.f.o.PluginMaxBytes
	if max <= 0 {
		max = wasm.DefaultMaxModuleBytes
	}
	return pluginobj.Fetch(ctx, s.js, s.ref, max, wasm.ModuleHash)
}

// info is the object's info as it is now (pluginobj.Missing: not pushed,
// or deleted).
func (s *objectSource) info(ctx context.Context) (*jetstream.ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.f.env.RequestTimeout)
	defer cancel()
	obs, err := s.js.ObjectStore(ctx, s.ref.Bucket)
	if err != nil {
		return nil, err
	}
	return obs.GetInfo(ctx, s.ref.Name)
}

func (s *objectSource) reloaded() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// watch follows the object (pluginobj.Watch) and keeps the node's record
// current: written at once, after every verdict or switch, and every poll.
func (s *objectSource) watch(ctx context.Context, p *plugin) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		pluginobj.Watch(ctx, s.js, s.ref, testhook.Or(testhook.ObjectPoll, objectPoll), func(info *jetstream.ObjectInfo) bool {
			if d, err := jetstream.DecodeObjectDigest(info.Digest); err == nil && hex.EncodeToString(d) == p.Upcoming().SHA256 {
				return false // the module this node runs (or is about to)
			}
			s.f.log.Info("plugin object changed; loading it", "from", s.ref.String(), "digest", info.Digest, "size", info.Size)
			m, err := s.fetch(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return false // shutting down
			case err != nil && !pluginobj.Verdict(err):
				// Not a verdict on the module: looked at again next poll.
				s.f.log.Warn("could not download the plugin object; retried at the next look", "from", s.ref.String(), "err", err, "next_in", testhook.Or(testhook.ObjectPoll, objectPoll).String())
				return true
			case err != nil:
				p.ReloadFailed(err)
				s.f.log.Error("plugin object refused; the running module stays", "from", s.ref.String(), "err", err)
				return false
			}
			_ = p.rt.ReloadFrom(ctx, p.Plugin, s.ref.String(), func(ctx context.Context) (*wasm.Module, error) {
				return p.rt.Load(ctx, m.Bytes)
			})
			return false
		}, func() {
			s.f.log.Warn("plugin object deleted; the running module stays", "from", s.ref.String())
		})
	})
	t := time.NewTicker(testhook.Or(testhook.ObjectPoll, objectPoll))
	defer t.Stop()
	for {
		s.publish(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// publish writes the node's record of what the fold runs. A failure is
// logged (once per distinct error) and retried at the next poll: the
// record is for people, the fold does not depend on it.
func (s *objectSource) publish(parent context.Context, p *plugin) {
	ctx, cancel := context.WithTimeout(parent, s.f.env.RequestTimeout)
	defer cancel()
	up, ws := p.Upcoming(), p.Status()
	rec := pluginobj.Record{Fold: s.f.o.Name, Node: s.f.env.Node, Source: s.ref.String(),
		Module: up.SHA256, Name: up.Name, Version: up.Version, ViewSchema: up.ViewSchema}
	if rl := ws.LastReload; rl != nil {
		rec.LastReload = &pluginobj.Reload{At: rl.At.UTC(), Outcome: rl.Outcome, Module: rl.Module, Reason: rl.Reason}
	}
	if rb := s.f.rebuildStatus(); rb != nil && rb.Last != nil {
		l := rb.Last
		rec.LastRebuild = &pluginobj.Rebuild{StartedAt: l.StartedAt, Module: l.Module, Outcome: l.Outcome, Error: l.Error}
	}
	var err error
	if s.recs == nil {
		s.recs, err = pluginobj.OpenRecords(ctx, s.js, pluginobj.DefaultRecordBucket)
	}
	if err == nil {
		if err = s.recs.Put(ctx, rec); err != nil {
			s.recs = nil // opened (or made) again next time: the bucket may be gone
		}
	}
	switch {
	case err != nil && parent.Err() != nil:
		// shutting down
	case err != nil && err.Error() != s.lastErr:
		s.lastErr = err.Error()
		s.f.log.Warn("could not record the running plugin module (retried every poll)", "err", err)
	case err == nil && s.lastErr != "":
		s.lastErr = ""
		s.f.log.Info("the running plugin module is recorded again", "bucket", pluginobj.DefaultRecordBucket)
	}
}
