package fold

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/foldhost/foldhost/protocol"
)

// A view rebuild folds the raw fold through a plugin into a Shadow, which
// one commit then switches in (Commit.Activate). Replay does the bulk from a
// snapshot while the fold may go on folding into its live views; CatchUp
// then folds, on the loop (no batch in flight), the keys the live fold
// changed since the snapshot; the caller's activation commit follows.
//
// What the plugin sees: puts of every raw entry in key order, each with the
// revision that wrote it (the raw fold keeps no message time: Time is
// zero); in the catch-up, each changed key once more with its value as it
// is now, or a delete (revision 0) when the key is gone. Its reads see the
// raw fold as of the replay's snapshot (the catch-up: as it is now) and the
// shadow's views as written so far.

// RebuildProgress is a rebuild's figures so far.
type RebuildProgress struct {
	Phase    string `json:"phase"`    // "replaying", "catching-up", "switching"
	Replayed uint64 `json:"replayed"` // raw entries folded from the snapshot
	Total    uint64 `json:"total"`    // approximate raw entries (pebble's estimate)
	CaughtUp uint64 `json:"caught_up"`
	// DeadLettered: updates the plugin failed on alone (RebuildConfig.Poison).
	DeadLettered uint64 `json:"dead_lettered,omitempty"`
}

// RebuildConfig tunes Replay and CatchUp.
type RebuildConfig struct {
	// MaxBatch is the updates per plugin call; default DefaultMaxBatch.
	MaxBatch int
	// Progress, if set, is called after every batch (on the caller's
	// goroutine; it must not block).
	Progress func(RebuildProgress)
	// Poison, if set, skips what the plugin cannot fold, as
	// LoopConfig.Poison does for live batches: a failed batch is split,
	// each part written on its own, and an update the plugin fails alone
	// leaves no view, only its dead letter.
	Poison func(Update, error) DeadLetter
}

// shadowReader is what the plugin reads during a rebuild: the raw fold of
// raw, the views of the shadow.
type shadowReader struct {
	raw Reader
	sh  *Shadow
}

func (r shadowReader) Cursor() protocol.Cursor { return r.raw.Cursor() }
func (r shadowReader) Get(key string) (Entry, bool, error) {
	return r.raw.Get(key)
}
func (r shadowReader) RawRange(prefix string, fn func([]byte, protocol.Revision, []byte) error) error {
	return r.raw.RawRange(prefix, fn)
}
func (r shadowReader) RawKeys(prefix string, fn func([]byte) error) error {
	return r.raw.RawKeys(prefix, fn)
}
func (r shadowReader) ViewGet(key []byte) ([]byte, bool, error) { return r.sh.ViewGet(key) }
func (r shadowReader) ViewRange(prefix []byte, fn func(key, value []byte) error) error {
	return r.sh.ViewRange(prefix, fn)
}
func (r shadowReader) PluginIdentity() ([]byte, bool, error) { return nil, false, nil }

// rebuilder folds batches through a plugin into a shadow.
type rebuilder struct {
	sh    *Shadow
	p     Plugin
	cfg   RebuildConfig
	prog  RebuildProgress
	batch []Update
}

func (b *rebuilder) flush(ctx context.Context, raw Reader) error {
	if len(b.batch) == 0 {
		return nil
	}
	if err := b.fold(ctx, raw, b.batch); err != nil {
		return err
	}
	clear(b.batch)
	b.batch = b.batch[:0]
	if b.cfg.Progress != nil {
		b.cfg.Progress(b.prog)
	}
	return ctx.Err()
}

// fold applies part through the plugin into the shadow. With Poison a
// failed part is split (Bisect) down to single updates, each dead-lettered.
func (b *rebuilder) fold(ctx context.Context, raw Reader, part []Update) error {
	return Bisect(part, nil, func(part []Update) (error, error) {
		out, err := b.p.Apply(ctx, part, shadowReader{raw: raw, sh: b.sh})
		switch {
		case err == nil:
			// out.Effects are dropped: a rebuild re-folds history the fold
			// announced already (RATIONALE.md, "Plugin effects").
			return nil, b.sh.Write(out.Views)
		case b.cfg.Poison == nil || ctx.Err() != nil:
			return nil, fmt.Errorf("%w: rebuilding the view, keys %q..%q: %w", ErrPlugin, part[0].Key, part[len(part)-1].Key, err)
		}
		return err, nil
	}, func(u Update, failed error) error {
		if err := b.sh.Write(nil, b.cfg.Poison(u, failed)); err != nil {
			return err
		}
		b.prog.DeadLettered++
		return nil
	})
}

// Replay folds every raw entry of from (a Snapshot: one fixed state) through
// p into sh, in key order, MaxBatch entries per call. It honours ctx between
// batches.
func Replay(ctx context.Context, from Reader, sh *Shadow, p Plugin, cfg RebuildConfig, total uint64) (RebuildProgress, error) {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	b := &rebuilder{sh: sh, p: p, cfg: cfg, prog: RebuildProgress{Phase: "replaying", Total: total}}
	err := from.RawRange("", func(key []byte, rev protocol.Revision, value []byte) error {
		b.batch = append(b.batch, Update{Key: string(key), Rev: rev, Op: OpPut, Value: bytes.Clone(value)})
		b.prog.Replayed++
		if len(b.batch) < cfg.MaxBatch {
			return nil
		}
		return b.flush(ctx, from)
	})
	if err == nil {
		err = b.flush(ctx, from)
	}
	return b.prog, err
}

// CatchUp folds keys (any order, repeats allowed) through p into sh with
// their values in t as they are now: a put, or a delete (revision 0) for a
// key t no longer holds. Called on the loop (Loop.Do), so no batch lands
// meanwhile, after Replay of a snapshot older than every change of keys.
func CatchUp(ctx context.Context, t Reader, sh *Shadow, p Plugin, keys []string, cfg RebuildConfig, prog RebuildProgress) (RebuildProgress, error) {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	prog.Phase = "catching-up"
	b := &rebuilder{sh: sh, p: p, cfg: cfg, prog: prog}
	for _, k := range keys {
		e, ok, err := t.Get(k)
		if err != nil {
			return b.prog, err
		}
		u := Update{Key: k, Op: OpDelete}
		if ok {
			u = Update{Key: k, Rev: e.Rev, Op: OpPut, Value: e.Value}
		}
		b.batch = append(b.batch, u)
		b.prog.CaughtUp++
		if len(b.batch) >= cfg.MaxBatch {
			if err := b.flush(ctx, t); err != nil {
				return b.prog, err
			}
		}
	}
	return b.prog, b.flush(ctx, t)
}
