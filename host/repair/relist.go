package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// ErrIncompleteListing: the state-sync that lists the bucket ended before
// its Synced marker (a disconnect, a watch error). Nothing was written; the
// repair can simply run again.
var ErrIncompleteListing = errors.New("repair: the bucket listing ended before it was complete")

// Config tunes Relist.
type Config struct {
	// Deletes arms the key-listing diff (protocol.PlanKeyListingDiff): a
	// fold key the listing lacks gets a synthetic delete. False is the
	// re-list only (protocol.PlanRelistOnly): listed values are folded,
	// absent keys are kept.
	Deletes bool
	// Scope lists the key prefixes the fold covers (none: the whole
	// bucket). Only fold keys in scope are diffed.
	Scope []string
	// ScratchDir holds the sorted listing while the repair runs. It is
	// removed first and after; it must not be inside the fold's pebble
	// directory.
	ScratchDir string
	// MaxBatch is how many updates go to the plugin per apply; default
	// fold.DefaultMaxBatch.
	MaxBatch int
	// Verify, if set, runs once the listing is complete and before the
	// first write: a non-nil error aborts the repair with nothing written
	// (the host re-reads retention there: a listing taken while eviction
	// was switched on is not the truth).
	Verify func(ctx context.Context) error
	// Progress, if set, receives the figures as the repair goes (on the
	// repair's goroutine; it must not block).
	Progress func(Progress)
	// Poison, if set, skips what the plugin cannot fold instead of
	// failing the repair (fold.LoopConfig.Poison): a failed batch is split
	// and each part committed on its own; an update the plugin fails alone
	// is committed raw only, with its dead letter.
	Poison func(fold.Update, error) fold.DeadLetter
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Progress is a repair's figures so far.
type Progress struct {
	Phase     string `json:"phase"`      // "listing", "folding", "done"
	Listed    uint64 `json:"listed"`     // entries the state-sync delivered
	Diffed    uint64 `json:"diffed"`     // keys compared (fold and listing)
	Folded    uint64 `json:"folded"`     // updates applied through the plugin
	Deleted   uint64 `json:"deleted"`    // synthetic deletes among them
	Unchanged uint64 `json:"unchanged"`  // listed keys the fold already held at that revision
	Kept      uint64 `json:"kept"`       // unlisted fold keys kept (re-list only)
	Batches   uint64 `json:"batches"`    // commits
	Cursor    uint64 `json:"cursor"`     // the cursor the repair committed ("done" only)
	StartedAt string `json:"started_at"` // RFC 3339
}

// commitAttempts bounds the retries of one repair commit; each failure waits
// twice as long as the last, from commitBackoff.
const (
	commitAttempts = 5
	commitBackoff  = 100 * time.Millisecond
)

// Relist runs the key-listing repair on src, a state-sync of the fold's
// scope (natskv: a watch from no cursor), and leaves src positioned after
// its Synced marker, so the caller goes on folding its live updates with no
// gap. Store must hold every update delivered before the repair (the
// caller flushed), and nothing else may commit to it meanwhile.
//
// In order:
//
//  1. List: every entry the state-sync delivers before Synced goes into a
//     key-sorted scratch store (bounded memory). A listing whose source
//     ends before Synced is incomplete ([ErrIncompleteListing]): nothing is
//     written, because an absent key proves nothing.
//  2. Verify (Config.Verify), still before any write.
//  3. Diff and fold, in key order, per scope prefix: a merge-join of the
//     fold's raw keys against the listing. A listed value the fold lacks,
//     or holds at an older revision, is folded as a put; a listed delete
//     marker as a delete; a fold key the listing lacks as a synthetic
//     delete (revision 0) when Config.Deletes. Updates go through the
//     plugin in batches and commit under the UNCHANGED cursor, so a crash
//     mid-way leaves a store whose cursor still names the expired position:
//     the restart repairs again, and finds the finished part unchanged.
//  4. Move the cursor, alone, in the final commit: to the highest of the
//     old cursor, the stream head when the state-sync started, and every
//     listed revision. The state-sync reflects every revision up to there,
//     and its live updates follow it.
//
// The plugin sees the repair's updates in key order, not revision order,
// and may see a put or delete it already applied (a listed revision it saw
// before the cursor expired is skipped, a live one above the head may come
// again).
func Relist(ctx context.Context, src fold.Source, store fold.Target, plugin fold.Plugin, cfg Config) (Result, error) {
	r, err := newRelist(store, plugin, cfg)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if cerr := r.list.close(); cerr != nil {
			r.log.Warn("repair: removing the scratch store failed", "dir", cfg.ScratchDir, "err", cerr)
		}
	}()
	if err := r.listAll(ctx, src); err != nil {
		return r.result(), err
	}
	if cfg.Verify != nil {
		if err := cfg.Verify(ctx); err != nil {
			return r.result(), err
		}
	}
	r.prog.Phase = "folding"
	r.report(true)
	for _, p := range inKeyOrder(cfg.Scope) {
		if err := r.diff(ctx, p); err != nil {
			return r.result(), err
		}
	}
	if err := r.flush(ctx); err != nil {
		return r.result(), err
	}
	next := protocol.CursorAfterBatch(store.Cursor(), []protocol.Revision{r.head, r.high}, r.highTime)
	// The listing is the scope's truth at its head: the cursor is settled
	// (an unsettled one left by a prefix watch would expire again).
	next = protocol.Settle(next, next.Rev, 0, false)
	return r.finish(ctx, next)
}

// inKeyOrder is the scope's prefixes in key order (the whole bucket: ""),
// so per-prefix diffs hand the plugin keys in key order overall.
func inKeyOrder(scope []string) []string {
	if len(scope) == 0 {
		return []string{""}
	}
	p := slices.Clone(scope)
	slices.Sort(p)
	return p
}

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
	list     *listing
	start    time.Time
	prog     Progress
	lastRep  time.Time
	head     protocol.Revision // the stream head when the state-sync started
	high     protocol.Revision // the highest listed revision
	highTime int64
	pending  []fold.Update
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
	l, err := openListing(cfg.ScratchDir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &job{store: store, plugin: plugin, cfg: cfg, log: cfg.Logger, list: l, start: now,
		prog: Progress{Phase: "listing", StartedAt: now.UTC().Format(time.RFC3339)}}, nil
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

// listAll drains src into the listing until its Synced marker.
func (r *job) listAll(ctx context.Context, src fold.Source) error {
	if h, ok := src.(interface{ HeadAtStart() protocol.Revision }); ok {
		r.head = h.HeadAtStart()
	}
	events := src.Events()
	for {
		var ev fold.Event
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok = <-events:
		}
		if !ok {
			err := src.Err()
			if err == nil {
				err = errors.New("the watch stopped")
			}
			return fmt.Errorf("%w (%d entries listed): %w", ErrIncompleteListing, r.prog.Listed, err)
		}
		if ev.Synced {
			return r.list.flush()
		}
		if ev.Rev > r.high {
			r.high, r.highTime = ev.Rev, ev.Time
		}
		if err := r.list.add(ev.Update); err != nil {
			return err
		}
		r.prog.Listed++
		r.report(false)
	}
}

// diff merge-joins the fold's raw keys under prefix with the listing's.
func (r *job) diff(ctx context.Context, prefix string) error {
	it, err := r.list.iter(prefix)
	if err != nil {
		return fmt.Errorf("repair: scratch store: %w", err)
	}
	defer it.Close()
	valid := it.First()
	// takeListed folds listed entries up to (excluding) key; nil: all.
	takeListed := func(key []byte) error {
		for ; valid && (key == nil || bytes.Compare(it.Key(), key) < 0); valid = it.Next() {
			u, err := r.listed(it)
			if err != nil {
				return err
			}
			r.prog.Diffed++
			if u.Op != fold.OpPut {
				r.prog.Unchanged++ // a delete marker of a key the fold does not hold
				continue
			}
			if err := r.add(ctx, u); err != nil {
				return err
			}
		}
		return it.Error()
	}
	err = r.store.RawRange(prefix, func(key []byte, rev protocol.Revision, _ []byte) error {
		if err := takeListed(key); err != nil {
			return err
		}
		if r.prog.Diffed++; r.prog.Diffed%4096 == 0 && ctx.Err() != nil {
			return ctx.Err() // a long run of unchanged keys still honours shutdown
		}
		if valid && bytes.Equal(it.Key(), key) {
			u, err := r.listed(it)
			if err != nil {
				return err
			}
			valid = it.Next()
			switch {
			case u.Op == fold.OpPut && u.Rev == rev:
				r.prog.Unchanged++
				return nil
			case u.Rev < rev:
				// The fold holds a newer write than the bucket's latest:
				// they do not share a history.
				return fmt.Errorf("%w: repair: key %q: the fold holds revision %d, the bucket lists %d", fold.ErrStreamReplaced, key, rev, u.Rev)
			}
			return r.add(ctx, u)
		}
		if !r.cfg.Deletes {
			r.prog.Kept++
			return nil
		}
		return r.add(ctx, fold.Update{Key: string(key), Op: fold.OpDelete, Rev: protocol.NoRevision})
	})
	if err != nil {
		return err
	}
	return takeListed(nil)
}

// listed decodes the iterator's entry, its value copied (the pending batch
// outlives the iterator position).
func (r *job) listed(it interface {
	Key() []byte
	ValueAndErr() ([]byte, error)
}) (fold.Update, error) {
	v, err := it.ValueAndErr()
	if err != nil {
		return fold.Update{}, fmt.Errorf("repair: scratch store: %w", err)
	}
	u, err := decodeEntry(it.Key(), v)
	if err != nil {
		return u, err
	}
	if !u.Op.Valid() {
		return u, fmt.Errorf("repair: scratch entry %q: op %v", u.Key, u.Op)
	}
	u.Value = bytes.Clone(u.Value)
	return u, nil
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
			return nil, r.commit(ctx, fold.Commit{Raw: part, Views: out.Views, Cursor: r.store.Cursor(), PluginIdentity: out.Identity, Repair: fold.RepairBegin})
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
