package repair

// The repair job that Relist and Restore share: its scratch, figures, batches and commits.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// commitAttempts bounds the retries of one repair commit; each failure waits
// twice as long as the last, from commitBackoff.
const (
	commitAttempts = 5
	commitBackoff  = 100 * time.Millisecond
)

// finish makes a repair's last commit: the cursor alone, moved to next,
// and the repair mark cleared.
func (r *job) finish(ctx context.Context, next protocol.Cursor) (Result, error) {
	if err := r.commit(ctx, fold.Commit{Cursor: next, Repair: fold.RepairEnd}); err != nil {
		return r.result(), err
	}
	r.prog.Phase, r.prog.Cursor = "done", uint64(next.Rev)
	r.report(true)
	return r.result(), nil
}

// Result is what a finished (or failed) repair did.
type Result struct {
	Progress
	Took time.Duration `json:"took_ns"`
}

type job struct {
	store    fold.Target
	plugin   fold.Plugin
	cfg      Config
	log      *slog.Logger
	start    time.Time
	prog     Progress
	lastRep  time.Time
	head     protocol.Revision // the stream head when the state-sync started
	high     protocol.Revision // the highest listed revision
	highTime int64
	pending  []fold.Update

	// byRev is the fold's entries in scope by revision (key: the
	// revision, 8 bytes big-endian, then the fold key), written by
	// indexFold; revs reads it back, in step with the listing.
	byRev *sorter
	revs  *merger
	// early holds what the state-sync delivered before byRev was ready.
	early spool
	// unmatched: fold entries the listing does not hold at their
	// revision (each key at its fold revision, no value); changed: listed
	// entries the fold does not hold at their revision, and delete
	// markers of keys the fold holds. Both sorted by key; diff merges
	// them.
	unmatched, changed *sorter
}

func newRelist(store fold.Target, plugin fold.Plugin, cfg Config) (*job, error) {
	if cfg.ScratchDir == "" {
		return nil, errors.New("repair: no scratch dir")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = fold.DefaultMaxBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.RemoveAll(cfg.ScratchDir); err != nil {
		return nil, fmt.Errorf("repair: clearing scratch dir: %w", err)
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o755); err != nil {
		return nil, fmt.Errorf("repair: scratch dir: %w", err)
	}
	now := time.Now()
	return &job{store: store, plugin: plugin, cfg: cfg, log: cfg.Logger, start: now,
		prog:      Progress{Phase: "listing", StartedAt: now.UTC().Format(time.RFC3339)},
		byRev:     newSorter(filepath.Join(cfg.ScratchDir, "by-revision")),
		early:     spool{path: filepath.Join(cfg.ScratchDir, "early")},
		unmatched: newSorter(filepath.Join(cfg.ScratchDir, "unmatched")),
		changed:   newSorter(filepath.Join(cfg.ScratchDir, "changed")),
	}, nil
}

// close releases the scratch memory and removes the scratch dir.
func (r *job) close() error {
	if r.revs != nil {
		r.revs.close()
	}
	r.early.close()
	r.byRev.release()
	r.unmatched.release()
	r.changed.release()
	return os.RemoveAll(r.cfg.ScratchDir)
}

func (r *job) result() Result { return Result{Progress: r.prog, Took: time.Since(r.start)} }

// report hands the figures on, at most every 250 ms unless force.
func (r *job) report(force bool) {
	if r.cfg.Progress == nil {
		return
	}
	if now := time.Now(); force || now.Sub(r.lastRep) >= 250*time.Millisecond {
		r.lastRep = now
		r.cfg.Progress(r.prog)
	}
}

// add queues one repair update and folds the batch once it is full.
func (r *job) add(ctx context.Context, u fold.Update) error {
	if u.Op != fold.OpPut && !u.Rev.Known() {
		r.prog.Deleted++
	}
	r.pending = append(r.pending, u)
	if len(r.pending) >= r.cfg.MaxBatch {
		return r.flush(ctx)
	}
	return nil
}

// flush applies the pending updates through the plugin and commits them
// under the unchanged cursor.
func (r *job) flush(ctx context.Context) error {
	if len(r.pending) == 0 {
		return nil
	}
	if err := r.fold(ctx, r.pending); err != nil {
		return err
	}
	r.prog.Folded += uint64(len(r.pending))
	r.prog.Batches++
	clear(r.pending)
	r.pending = r.pending[:0]
	r.report(false)
	return nil
}

// fold applies part through the plugin and commits it under the unchanged
// cursor. With Config.Poison a failed part is split (fold.Bisect) down to
// single updates, each committed raw only with its dead letter.
func (r *job) fold(ctx context.Context, part []fold.Update) error {
	return fold.Bisect(part, nil, func(part []fold.Update) (error, error) {
		out, err := r.plugin.Apply(ctx, part, r.store)
		switch {
		case err == nil:
			// The plugin's effects announce the net change (the fold's
			// state against the listing's), filed under the revision the
			// repair moves the cursor to, each batch's after the last
			// (RATIONALE.md, "Plugin effects"). A restarted repair finds
			// what it committed unchanged and folds (and announces) only
			// the rest.
			c := fold.Commit{Raw: part, Views: out.Views, Cursor: r.store.Cursor(), PluginIdentity: out.Identity, Repair: fold.RepairBegin}
			if target := max(c.Cursor.Rev, r.head, r.high); target.Known() {
				c.Effects, c.EffectRev, c.EffectsAppend = out.Effects, target, true
			}
			return nil, r.commit(ctx, c)
		case r.cfg.Poison == nil || ctx.Err() != nil:
			return nil, fmt.Errorf("%w during a repair (keys %q..%q; nothing of the batch committed, cursor stays at %v): %w",
				fold.ErrPlugin, part[0].Key, part[len(part)-1].Key, r.store.Cursor(), err)
		}
		return err, nil
	}, func(u fold.Update, failed error) error {
		return r.commit(ctx, fold.Commit{Raw: []fold.Update{u}, Cursor: r.store.Cursor(), Repair: fold.RepairBegin,
			DeadLetters: []fold.DeadLetter{r.cfg.Poison(u, failed)}})
	})
}

// commit writes c, retrying a failed commit a few times: the repair is
// idempotent, but starting it over costs a full listing.
func (r *job) commit(ctx context.Context, c fold.Commit) error {
	wait := commitBackoff
	var err error
	for attempt := 1; ; attempt++ {
		if err = r.store.Commit(c); err == nil {
			return nil
		}
		if errors.Is(err, fold.ErrDiskFull) || errors.Is(err, fold.ErrStoreBroken) {
			return err // nothing written; retrying before space is freed cannot help
		}
		if attempt == commitAttempts || errors.Is(err, fold.ErrCursorRegression) ||
			errors.Is(err, fold.ErrClosed) || errors.Is(err, fold.ErrInvalidCommit) {
			return fmt.Errorf("%w during a repair (%d attempts): %w", fold.ErrCommitFailures, attempt, err)
		}
		r.log.Warn("repair: commit failed; retrying", "attempt", attempt, "in", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}
