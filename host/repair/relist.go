package repair

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

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
	// each listed entry is matched as it comes (RATIONALE.md,
	// "Cursor-expiry repair", on the listing matched by revision).
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
			// A bare settle mark (a partitioned watch passing another
			// partition's updates) lists nothing.
			if !ev.SettleOnly() {
				if err := r.take(ev.Update, indexed == nil); err != nil {
					return err
				}
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
