package effects

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// loadHold reads the store's effects hold, at the start.
func (p *Publisher) loadHold() error {
	h, ok, err := p.store.EffectsHold()
	if ok {
		p.hold.Store(&h)
		p.log.Info("this fold's effects are held: it publishes once the effects fence covers the point it joined at (foldhost admin release-effects: publish now)",
			"hold", h.String())
	}
	return err
}

// JoinSync runs at the start of a state-sync (an empty store) of a
// bucket with history, with an effects stream. When the fence shows this
// fold's effects published already (by a replica, or by this node before
// it lost its store), the fold joins their history midway: another
// publisher may still hold effects below the point this fold catches up
// at, and its state-sync's effects are the collapsed change under ids of
// their own, which, published first, would move the fence past the
// other's and have them deleted unpublished (the fence's cover is an
// order). So the store records a hold (fold.EffectsHold): the sync's
// effects are dropped (Screen), the point is set when the fold has
// caught up (CaughtUp), and the publisher waits until the fence
// covers it (holding), or an operator releases it (Release). A
// fence that cannot be read is taken as one that may show effects (the
// hold is tentative: a fence read later that shows none ends it). A hold
// that cannot be recorded fails the start: the fold does not sync
// without it.
func (p *Publisher) JoinSync(ctx context.Context) error {
	fence, err := p.target.readFence(ctx, p.fold, p.epoch())
	switch {
	case err != nil:
		return p.setHold(nil, &fold.EffectsHold{Syncing: true, Tentative: true}, "this fold hydrates from an empty store and could not read its effects fence: "+
			"it drops its hydration's effects, and publishes once the fence shows no effects of this fold or passes the point it catches up at "+
			"(another replica's effects up to there are that replica's to publish); with no other replica, release it: foldhost admin release-effects",
			"fence", p.target.fence, "err", err)
	case fence.has:
		return p.setHold(nil, &fold.EffectsHold{Syncing: true}, "this fold hydrates from an empty store while its effects fence shows effects published: "+
			"it drops its hydration's effects, and publishes once the fence passes the point it catches up at "+
			"(another replica's effects up to there are that replica's to publish); with no other replica, release it: foldhost admin release-effects",
			"fence", p.target.fence, "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index))
	}
	return nil
}

// JoinRepair is the repairs' Hooks.Join, with an effects stream: it runs
// before a repair folds its difference, which the fold's effects announce
// as a net change under the revision the repair moves the cursor to.
// Beside another publisher whose unpublished effects lie below that
// revision, publishing the net change first would move the fence past
// them (the joining state-sync's case), so the repair joins that
// publisher's history instead: its net change is dropped, and the
// publisher holds when
//   - a restore folds in an artifact whose node filed effects this store
//     never did (past this store's outbox mark), or itself waited for
//     another publisher's (fold.Store.JoinedHold): they are not this
//     fold's to publish. The hold's point is the artifact's, recorded
//     now: nothing is left to record after the restore's last commit, so
//     no crash there loses it. Only the restore's own net change is
//     dropped (restoring): the fold's effects from the artifact's cursor
//     on are the ones every replica files, and are kept. (An artifact
//     whose node was still catching up gives a syncing hold.)
//   - or this store waits for another publisher already, or the fence is
//     past the last effect this store ever filed: another publisher went
//     on while this fold could not see the bucket. A listing's hold is
//     syncing (its point is set once the fold caught up: effectsCaughtUp);
//     a restore's point is the artifact's cursor, recorded now as above.
//
// Otherwise (a fence no further than this store's own effects, or one
// that cannot be read; a read cut short by the attempt's end fails it)
// the fold is taken to publish alone, and the net
// change is announced. A hold that cannot be recorded fails the attempt.
func (p *Publisher) JoinRepair(ctx context.Context, plan protocol.RepairPlan, art *fold.Store) error {
	e := p
	e.restoring.Store(false)
	if e.target == nil {
		return nil
	}
	own, ownIndex, ownMarked, err := p.store.OutboxMark()
	if err != nil {
		return fmt.Errorf("reading the outbox mark: %w", err)
	}
	beyond := func(rev protocol.Revision, index uint32) bool {
		return !ownMarked || fold.EffectsHold{Rev: own, Index: ownIndex}.After(rev, index)
	}
	// A listing's hold is syncing: its point is where it catches up. A
	// restore's is the artifact's cursor (from there on the fold files the
	// same effects as every replica, its own), or the artifact's own.
	join := fold.EffectsHold{Syncing: true}
	var why string
	args := []any{"plan", plan.String(), "fence", e.target.fence, "last_filed", fmt.Sprintf("%d/%d", own, ownIndex)}
	if art != nil {
		join = fold.EffectsHold{Rev: art.Cursor().Rev, Index: math.MaxUint32}
		theirs, ok, err := art.JoinedHold()
		if err != nil {
			return fmt.Errorf("reading the artifact's effects: %w", err)
		}
		if ok && (theirs.Syncing || beyond(theirs.Rev, theirs.Index)) {
			join = theirs
			why = "this fold restores from another node's artifact, whose node filed effects this fold never did or waited for another publisher's: they are not this fold's to publish, " +
				"so the restore's net change is dropped, and this fold publishes once the fence passes the last of them; " +
				"with no other replica, release it: foldhost admin release-effects"
			args = append(args, "artifact_waits_for", theirs.String())
		}
	}
	if why == "" {
		if h := e.hold.Load(); h != nil {
			join.Tentative = h.Tentative // no surer than the hold it has
			why = "this fold waits for another publisher's effects already: the repair's net change is dropped, and this fold publishes once the fence passes the repair's revision"
			args = append(args, "held", h.String())
		} else {
			fence, err := e.target.readFence(ctx, p.fold, p.epoch())
			if ctx.Err() != nil {
				return ctx.Err() // a read cut short says nothing: not "publish alone"
			}
			if err != nil || !fence.has || !beyond(fence.rev, fence.index) {
				return nil // no further than this store's own
			}
			why = "this fold's cursor expired while its effects fence moved past the last effect it filed: " +
				"another replica publishes this fold's effects, so the repair's net change is dropped, and this fold publishes once the fence passes the repair's revision; " +
				"with no other replica, release it: foldhost admin release-effects"
			args = append(args, "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index))
		}
	}
	for {
		h, next := e.hold.Load(), join
		if h != nil {
			next = h.With(join)
		}
		if h != nil && *h == next {
			e.restoring.Store(art != nil) // recorded already: no write to fail
			return nil
		}
		if err := p.setHold(h, &next, why, args...); !errors.Is(err, errHoldChanged) {
			e.restoring.Store(err == nil && art != nil)
			return err
		}
	}
}

// CaughtUp is the fold's OnSynced part: a syncing hold gets its
// point, the cursor the fold caught up at (every effect another publisher
// holds below it comes before this fold's own). A point that cannot be
// recorded (the store failed a small sync write) is owed: the hold stays
// syncing (its effects dropped: nothing is lost that another publisher
// does not hold), the status shows the error, and the next commit tries
// again at its cursor (onApplied), the batches between dropped too.
func (p *Publisher) CaughtUp(c protocol.Cursor) {
	h := p.hold.Load()
	if h == nil || !h.Syncing {
		p.pointOwed.Store(false)
		return
	}
	testhook.Step(context.Background(), "caught-up")
	err := p.setHold(h, &fold.EffectsHold{Rev: c.Rev, Index: math.MaxUint32, Tentative: h.Tentative},
		"this fold caught up with the bucket it joined: it publishes its effects once the fence passes this revision", "revision", uint64(c.Rev))
	owed := err != nil && !errors.Is(err, errHoldChanged)
	p.pointOwed.Store(owed)
	if owed {
		p.cfg.SetErr(fmt.Errorf("recording the effects hold's point (retried at the next commit; until then this fold's effects are dropped): %w", err))
	}
}

// holding reports whether the publisher must wait: the store holds its
// effects (joined midway) and the fence, as last read, does not cover the
// hold's point. A covered point ends the hold.
func (p *Publisher) holding(fence fenceState) bool {
	h := p.hold.Load()
	if h == nil {
		return false
	}
	if h.Tentative && !fence.has {
		return p.setHold(h, nil, "the effects fence shows no effects of this fold published: this fold joined no other publisher; publishing") != nil
	}
	if h.Syncing || !fence.covers(fold.OutboxEntry{Rev: h.Rev, Index: h.Index}) {
		return true
	}
	return p.setHold(h, nil, "the effects fence passed the point this fold joined at: publishing", "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index)) != nil
}

// Release ends the fold's effects hold (JoinSync): its
// publisher publishes from its outbox's first entry, without waiting for
// another publisher's effects. For a fold that has no other publisher (a
// node that lost its store, or bootstrapped from its own artifact and
// lost what it had not published). Effects a state-sync still emits are
// then published (the collapsed change).
func (p *Publisher) Release() error {
	if p.target == nil {
		return fmt.Errorf("fold %s: %w: it has no effects stream", p.fold, httpapi.ErrNothingHeld)
	}
	for {
		h := p.hold.Load()
		if h == nil {
			return fmt.Errorf("fold %s: %w", p.fold, httpapi.ErrNothingHeld)
		}
		if err := p.setHold(h, nil, "the effects hold was released: publishing"); !errors.Is(err, errHoldChanged) {
			return err
		}
	}
}

// setHold replaces the hold from (the one the caller read; nil: none) by
// h (nil: none): in the store, then here, and wakes a held publisher;
// logged with msg and args. A hold changed since the caller read it (an
// operator's release beside the fold catching up) is left as it is, and
// errHoldChanged returned; a failed record changes nothing.
func (p *Publisher) setHold(from, h *fold.EffectsHold, msg string, args ...any) error {
	e := p
	e.holdMu.Lock()
	defer e.holdMu.Unlock()
	if e.hold.Load() != from {
		return errHoldChanged
	}
	err := testhook.ErrHoldRecordFault
	if !testhook.FailHoldRecords.Load() {
		err = p.store.SetEffectsHold(h)
	}
	if err != nil {
		p.log.Warn("could not record the effects hold", "err", err)
		return err
	}
	e.hold.Store(h)
	select {
	case e.held <- struct{}{}:
	default:
	}
	p.log.Info(msg, args...)
	return nil
}

var errHoldChanged = errors.New("the effects hold changed meanwhile")
