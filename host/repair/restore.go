package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// RestoreConfig tunes Restore.
type RestoreConfig struct {
	// Scope lists the key prefixes the fold covers (none: the whole
	// bucket). Only keys in scope are diffed, on both sides.
	Scope []string
	// MaxBatch is how many updates go to the plugin per apply; default
	// fold.DefaultMaxBatch.
	MaxBatch int
	// Listed reports whether the bucket lists key live now. It is asked
	// only for delete candidates (fold keys the artifact lacks): a key
	// written again after the artifact's cursor is kept for the resume to
	// deliver, never deleted (protocol.RestoreKey).
	Listed func(ctx context.Context, key string) (bool, error)
	// Verify runs after the diff is folded and before the cursor moves:
	// the host re-reads retention and refuses when a resume from the
	// artifact's cursor is no longer sound (retention passed it meanwhile).
	Verify func(ctx context.Context, artifact protocol.Cursor) error
	// Progress, if set, receives the figures as the restore goes.
	Progress func(Progress)
	// Poison: as Config.Poison.
	Poison func(fold.Update, error) fold.DeadLetter
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// ErrNotAhead: the artifact is not ahead of the fold's applied cursor. A
// restore only ever moves a fold forward.
var ErrNotAhead = errors.New("repair: the artifact is not ahead of the fold")

// Restore repairs store from art, an artifact imported into a scratch
// store, through the fold's plugin (the artifact's views are ignored: the
// difference is folded through the plugin that made the fold's views). Per
// key, in key order and per scope prefix, protocol.RestoreKey decides:
// take the artifact's entry unless the fold's is identical or newer, delete
// a fold key the artifact lacks unless the bucket lists it live (Listed).
// Updates go through the plugin in batches under the UNCHANGED cursor; the
// final commit moves the cursor, alone, to the artifact's (its eviction
// memo joined with the fold's), after Verify. A crash midway leaves the
// expired cursor: the next start restores again and finds the finished part
// identical. The caller resumes from the new cursor.
func Restore(ctx context.Context, store fold.Target, art fold.Reader, plugin fold.Plugin, cfg RestoreConfig) (Result, error) {
	start := time.Now()
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = fold.DefaultMaxBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &job{store: store, plugin: plugin, cfg: Config{MaxBatch: cfg.MaxBatch, Progress: cfg.Progress, Logger: cfg.Logger, Poison: cfg.Poison},
		log: cfg.Logger, start: start, prog: Progress{Phase: "folding", StartedAt: start.UTC().Format(time.RFC3339)}}
	local, theirs := store.Cursor(), art.Cursor()
	if !protocol.RestoreAhead(theirs.Rev, local.Rev) {
		return r.result(), fmt.Errorf("%w: the artifact's cursor %d, the fold's %d", ErrNotAhead, theirs.Rev, local.Rev)
	}
	// The plugin's effects announce the net change under the revision the
	// restore moves the cursor to, as a listing's do (job.fold): filed
	// under the fold's old cursor they would take ids of its history.
	r.head = theirs.Rev
	r.report(true)
	for _, p := range inKeyOrder(cfg.Scope) {
		if err := r.restoreDiff(ctx, art, p, cfg.Listed); err != nil {
			return r.result(), err
		}
	}
	if err := r.flush(ctx); err != nil {
		return r.result(), err
	}
	next := theirs
	next.EvictionSeen = next.EvictionSeen || local.EvictionSeen
	if !next.EvictionSeen {
		next.MsgUnixNano = 0 // the time is kept with the memo only (protocol.CursorAfterBatch)
	}
	if cfg.Verify != nil {
		if err := cfg.Verify(ctx, next); err != nil {
			return r.result(), err
		}
	}
	return r.finish(ctx, next)
}

// rawEntry is one raw fold entry; its slices alias the range's buffers.
type rawEntry struct {
	key, value []byte
	rev        protocol.Revision
}

// entries turns a Reader's RawRange into a pull iterator: the merge-join
// needs two sides at once. A yielded entry stays valid until the next pull.
func entries(r fold.Reader, prefix string) iter.Seq2[rawEntry, error] {
	return func(yield func(rawEntry, error) bool) {
		stop := errors.New("stop")
		err := r.RawRange(prefix, func(k []byte, rev protocol.Revision, v []byte) error {
			if !yield(rawEntry{k, v, rev}, nil) {
				return stop
			}
			return nil
		})
		if err != nil && !errors.Is(err, stop) {
			yield(rawEntry{}, err)
		}
	}
}

// restoreDiff merge-joins the fold's and the artifact's raw entries under
// prefix and queues what protocol.RestoreKey decides.
func (r *job) restoreDiff(ctx context.Context, art fold.Reader, prefix string, listed func(context.Context, string) (bool, error)) error {
	next, stop := iter.Pull2(entries(art, prefix))
	defer stop()
	pull := func() (rawEntry, bool, error) {
		e, err, ok := next()
		if err != nil {
			return e, false, fmt.Errorf("repair: reading the artifact: %w", err)
		}
		return e, ok, nil
	}
	a, aok, err := pull()
	if err != nil {
		return err
	}
	// take queues the artifact's entry a, then pulls the next one.
	take := func() error {
		r.prog.Diffed++
		if err := r.add(ctx, fold.Update{Key: string(a.key), Value: bytes.Clone(a.value), Rev: a.rev, Op: fold.OpPut}); err != nil {
			return err
		}
		a, aok, err = pull()
		return err
	}
	err = r.store.RawRange(prefix, func(k []byte, rev protocol.Revision, v []byte) error {
		for aok && bytes.Compare(a.key, k) < 0 {
			if err := take(); err != nil {
				return err
			}
		}
		if r.prog.Diffed++; r.prog.Diffed%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		mine := protocol.KeyState{Present: true, Rev: rev}
		if aok && bytes.Equal(a.key, k) {
			identical := a.rev == rev && bytes.Equal(a.value, v)
			if protocol.RestoreKey(mine, protocol.KeyState{Present: true, Rev: a.rev}, identical, false) == protocol.TakeArtifact {
				r.prog.Diffed-- // take counts it
				return take()
			}
			r.prog.Unchanged++
			a, aok, err = pull()
			return err
		}
		live, err := listed(ctx, string(k))
		if err != nil {
			return fmt.Errorf("repair: is %q live in the bucket: %w", k, err)
		}
		if protocol.RestoreKey(mine, protocol.KeyState{}, false, live) == protocol.DeleteLocal {
			return r.add(ctx, fold.Update{Key: string(k), Op: fold.OpDelete, Rev: protocol.NoRevision})
		}
		r.prog.Kept++
		return nil
	})
	if err != nil {
		return err
	}
	for aok {
		if err := take(); err != nil {
			return err
		}
	}
	return nil
}
