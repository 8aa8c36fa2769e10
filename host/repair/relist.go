package repair

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	// ScratchDir holds the repair's sorted scratch files (the fold's
	// entries by revision, the unmatched ones by key) while it runs. It
	// is removed first and after; it must not be inside the fold's pebble
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
//  1. List and match: while the state-sync delivers, the fold's raw
//     entries in scope are sorted by revision on disk (indexFold, beside
//     the listing), and each listed entry, in the revision order the
//     state-sync delivers in, is matched against them as it comes: a fold
//     entry of its key at its revision is the same write (unchanged), a
//     fold entry passed over unmatched, and a listed entry the fold does
//     not hold, are kept aside in key-sorted scratch files. So the work
//     after the listing is the difference, not the fold. Memory is
//     bounded whatever the bucket's size (see [sorter]). A listing whose
//     source ends before Synced is incomplete ([ErrIncompleteListing]):
//     nothing is written, because an absent key proves nothing.
//  2. Verify (Config.Verify), still before any write.
//  3. Diff and fold, in key order: a merge-join of the unmatched fold
//     entries with the unmatched listed ones. A listed value the fold
//     lacks, or holds at an older revision, is folded as a put; a listed
//     delete marker of a key the fold holds as a delete; a fold key the
//     listing lacks as a synthetic delete (revision 0) when
//     Config.Deletes. Updates go through the plugin in batches and commit
//     under the UNCHANGED cursor, so a crash mid-way leaves a store whose
//     cursor still names the expired position: the restart repairs again,
//     and finds the finished part unchanged.
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
		if cerr := r.close(); cerr != nil {
			r.log.Warn("repair: removing the scratch dir failed", "dir", cfg.ScratchDir, "err", cerr)
		}
	}()
	// The fold is indexed by revision while the state-sync delivers, so
	// each listed entry is matched as it comes (RATIONALE.md, "The
	// listing is matched by revision as it comes").
	ictx, cancel := context.WithCancel(ctx)
	indexed := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { indexed <- r.indexFold(ictx) })
	err = r.listAll(ctx, src, indexed)
	cancel()
	wg.Wait()
	if err != nil {
		return r.result(), err
	}
	if cfg.Verify != nil {
		if err := cfg.Verify(ctx); err != nil {
			return r.result(), err
		}
	}
	r.prog.Phase = "folding"
	r.report(true)
	if err := r.diff(ctx); err != nil {
		return r.result(), err
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

// indexFold sorts the fold's entries in scope by revision into byRev.
// It runs beside listAll, on its own goroutine: it alone touches byRev
// until it returns.
func (r *job) indexFold(ctx context.Context) error {
	var rk []byte
	n := 0
	for _, p := range inKeyOrder(r.cfg.Scope) {
		err := r.store.RawRange(p, func(key []byte, rev protocol.Revision, _ []byte) error {
			if n++; n%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			rk = append(binary.BigEndian.AppendUint64(rk[:0], uint64(rev)), key...)
			return sortAdd(r.byRev, rk, rev, fold.OpPut, 0, nil)
		})
		if err != nil {
			return fmt.Errorf("repair: indexing the fold: %w", err)
		}
	}
	return nil
}

// listAll drains src until its Synced marker, matching each listed entry
// against the fold (match) once indexed (indexFold's result) says the
// fold's index is ready, and keeping the entries that come before in the
// early spool.
func (r *job) listAll(ctx context.Context, src fold.Source, indexed <-chan error) error {
	if h, ok := src.(interface{ HeadAtStart() protocol.Revision }); ok {
		r.head = h.HeadAtStart()
	}
	ready := func(err error) error {
		indexed = nil
		if err != nil {
			return err
		}
		if r.revs, err = r.byRev.iter(); err != nil {
			return err
		}
		return r.early.replay(r.match)
	}
	events := src.Events()
	for {
		var ev fold.Event
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-indexed:
			if err := ready(err); err != nil {
				return err
			}
			continue
		case ev, ok = <-events:
		}
		// Take what the source already buffered with single-channel
		// receives, as the fold's loop does: the three-channel select per
		// entry cost as much as the matching. The select (cancellation,
		// the index) still runs at least once per listDrain entries.
		for n := 1; ; n++ {
			if !ok {
				err := src.Err()
				if err == nil {
					err = errors.New("the watch stopped")
				}
				return fmt.Errorf("%w (%d entries listed): %w", ErrIncompleteListing, r.prog.Listed, err)
			}
			if ev.Synced {
				if indexed != nil {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case err := <-indexed:
						if err := ready(err); err != nil {
							return err
						}
					}
				}
				return r.endMatch(ctx)
			}
			if err := r.take(ev.Update, indexed == nil); err != nil {
				return err
			}
			if n == listDrain {
				break
			}
			var more bool
			select {
			case ev, ok = <-events:
				more = true
			default:
			}
			if !more {
				break
			}
		}
		r.report(false)
	}
}

// listDrain bounds the entries listAll takes between two looks at
// cancellation and the index.
const listDrain = 256

// take counts one listed entry and matches it (indexed) or spools it.
func (r *job) take(u fold.Update, indexed bool) error {
	if u.Rev > r.high {
		r.high, r.highTime = u.Rev, u.Time
	}
	r.prog.Listed++
	if !indexed {
		return r.early.add(u)
	}
	return r.match(u)
}

// inScope reports whether key is under one of the scope's prefixes.
func (r *job) inScope(key string) bool {
	if len(r.cfg.Scope) == 0 {
		return true
	}
	for _, p := range r.cfg.Scope {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// match takes one listed entry, in revision order. A fold entry of its key
// at its revision is the same write: unchanged. The other fold entries
// indexed up to its revision are ones the listing does not hold at their
// revision: unmatched (their key may still be listed later, at a newer
// revision). A listed entry the fold does not hold is a change, except a
// delete marker of a key the fold does not hold at all (unchanged too).
func (r *job) match(u fold.Update) error {
	if !r.inScope(u.Key) {
		return nil // the watch lists only the scope
	}
	if !u.Op.Valid() {
		return fmt.Errorf("repair: listed entry %q: op %v", u.Key, u.Op)
	}
	matched := false
	for ; r.revs.valid(); r.revs.next() {
		e := r.revs.entry()
		if e.Rev > u.Rev {
			break
		}
		key := e.Key[8:]
		if e.Rev == u.Rev && u.Op == fold.OpPut && string(key) == u.Key {
			matched = true
			continue
		}
		if err := sortAdd(r.unmatched, key, e.Rev, fold.OpPut, 0, nil); err != nil {
			return err
		}
	}
	if err := r.revs.err(); err != nil {
		return err
	}
	if matched {
		r.prog.Diffed++
		r.prog.Unchanged++
		return nil
	}
	if u.Op != fold.OpPut {
		held, ok, err := r.store.Get(u.Key)
		switch {
		case err != nil:
			return fmt.Errorf("repair: reading the fold: %w", err)
		case !ok:
			r.prog.Diffed++
			r.prog.Unchanged++ // a delete marker of a key the fold does not hold
			return nil
		case held.Rev > u.Rev:
			return fmt.Errorf("%w: repair: key %q: the fold holds revision %d, the bucket lists a delete at %d", fold.ErrStreamReplaced, u.Key, held.Rev, u.Rev)
		}
	}
	return sortAdd(r.changed, u.Key, u.Rev, u.Op, u.Time, u.Value)
}

// endMatch ends the listing: the fold entries above every listed revision
// are unmatched too.
func (r *job) endMatch(ctx context.Context) error {
	for n := 1; r.revs.valid(); r.revs.next() {
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e := r.revs.entry()
		if err := sortAdd(r.unmatched, e.Key[8:], e.Rev, fold.OpPut, 0, nil); err != nil {
			return err
		}
	}
	if err := r.revs.err(); err != nil {
		return err
	}
	r.revs.close()
	r.revs = nil
	r.byRev.release()
	return nil
}

// diff merge-joins the unmatched fold entries with the changed listed
// ones, in key order: a key in both is folded at its listed entry (which
// must be newer); a changed key alone likewise (the fold lacks it, or
// holds it at an older revision it was matched at before a restarted
// state-sync listed it again); an unmatched key alone is not listed at
// all: a synthetic delete when Config.Deletes, else kept.
func (r *job) diff(ctx context.Context) error {
	fi, err := r.unmatched.iter()
	if err != nil {
		return err
	}
	defer fi.close()
	li, err := r.changed.iter()
	if err != nil {
		return err
	}
	defer li.close()
	for fi.valid() || li.valid() {
		if r.prog.Diffed++; r.prog.Diffed%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		var c int
		switch {
		case !fi.valid():
			c = 1
		case !li.valid():
			c = -1
		default:
			c = bytes.Compare(fi.entry().Key, li.entry().Key)
		}
		if c < 0 {
			key := fi.entry().Key
			if !r.cfg.Deletes {
				r.prog.Kept++
			} else if err := r.add(ctx, fold.Update{Key: string(key), Op: fold.OpDelete, Rev: protocol.NoRevision}); err != nil {
				return err
			}
			fi.next()
			continue
		}
		l := li.entry()
		if c == 0 {
			if f := fi.entry(); l.Rev < f.Rev {
				// The fold holds a newer write than the bucket's latest:
				// they do not share a history.
				return fmt.Errorf("%w: repair: key %q: the fold holds revision %d, the bucket lists %d", fold.ErrStreamReplaced, l.Key, f.Rev, l.Rev)
			}
			fi.next()
		}
		if err := r.add(ctx, l.update()); err != nil {
			return err
		}
		li.next()
	}
	return errors.Join(fi.err(), li.err())
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
