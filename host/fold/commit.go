package fold

import (
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// ViewOp is a view mutation's kind. The zero ViewOp is invalid.
type ViewOp uint8

const (
	ViewPut    ViewOp = iota + 1 // set the view key's value
	ViewDelete                   // remove the view key (a no-op when absent)
)

func (o ViewOp) String() string {
	switch o {
	case ViewPut:
		return "put"
	case ViewDelete:
		return "delete"
	}
	return fmt.Sprintf("ViewOp(%d)", uint8(o))
}

// ViewMutation is one plugin view change.
type ViewMutation struct {
	Key   []byte // non-empty
	Op    ViewOp
	Value []byte // ignored for a delete
}

// Commit is everything one apply produced. [Store.Commit] writes it in one
// atomic batch.
type Commit struct {
	// Raw updates in order; a later update of the same key wins. A put
	// stores its value and revision; a delete or purge removes the key
	// (Value, and Rev, ignored).
	Raw []Update
	// Views mutations in order; a later mutation of the same key wins.
	Views []ViewMutation
	// Cursor is the position after this commit. It must not be below the
	// stored cursor (see [Store.Commit]).
	Cursor protocol.Cursor
	// PluginIdentity, when non-nil, replaces the stored plugin identity
	// (which plugin build produced the views). nil leaves it unchanged; an
	// empty non-nil slice stores an empty identity.
	PluginIdentity []byte
	// Repair sets or clears the store's repair mark (the zero value
	// leaves it): a repair's batches commit data newer than the cursor
	// they carry, and the mark says so until its last commit moves the
	// cursor ([Store.RepairPending]).
	Repair RepairMark
	// Activate, when set, switches the fold's views to this shadow (a
	// rebuild's) in this commit: Views are written to it, it becomes the
	// views every read sees, and the old views are deleted. A shadow that
	// is no longer the store's is refused with ErrShadowStale.
	Activate *Shadow
	// DeadLetters are recorded with the commit (LoopConfig.Poison); a
	// dead letter of a revision already recorded replaces it. Dead letters
	// whose revision is in ClearDeadLetters are deleted (a replay that
	// folded them).
	DeadLetters      []DeadLetter
	ClearDeadLetters []protocol.Revision
	// Effects the plugin emitted with this batch, in order: written to the
	// outbox (outbox.go) in this batch, as entries (EffectRev, 0..n-1), or,
	// when they name their updates (Effect.UpdateRev, all or none, revisions not
	// decreasing, none above EffectRev), as entries (Rev, 0..k-1) for each
	// update's k effects. A repair's (EffectsAppend) are filed under
	// EffectRev whatever they name: its updates come in key order, some
	// without a revision, and their effects are the net change.
	// The live loop and a key-listing repair (the net change) pass them: a
	// rebuild and a dead letter's replay drop their plugin's effects (they
	// would announce history again; RATIONALE.md, "Plugin effects").
	Effects []Effect
	// EffectRev is the revision the effects are filed under: the highest
	// revision of the batch, known when Effects is not empty. Effects
	// filed at or below the highest revision any earlier commit filed
	// effects under (a batch re-delivered after its commit) are dropped,
	// counted in EffectsDropped: an effect id is never reused.
	EffectRev protocol.Revision
	// EffectsAppend files the effects after the last ones filed under
	// EffectRev when it is the highest revision effects were filed under
	// (entries (EffectRev, k..k+n-1)), from 0 when it is above: a repair's
	// batches, committed under an unchanged cursor, all file theirs under
	// the revision the repair moves the cursor to.
	EffectsAppend bool
}

// CursorAdvanced returns a channel closed by the next commit (after it
// stored its cursor). A waiter takes the channel, then reads the cursor,
// then waits: a commit in between cannot be missed.
func (s *Store) CursorAdvanced() <-chan struct{} {
	s.advMu.Lock()
	defer s.advMu.Unlock()
	if s.advanced == nil {
		s.advanced = make(chan struct{})
	}
	return s.advanced
}

// RepairMark is what a commit does to the store's repair mark.
type RepairMark uint8

const (
	RepairKeep  RepairMark = iota // leave the mark as it is
	RepairBegin                   // set it: data newer than the cursor follows
	RepairEnd                     // clear it: the data matches the cursor again
)

// Commit applies c atomically: raw updates, view mutations, the cursor and
// the plugin identity go into one pebble batch, so after any crash the store
// holds either all of c or none of it. The cursor is always written, even
// when c carries no data (an apply of only irrelevant updates still advances
// it).
//
// Commit validates c before writing anything. It refuses, leaving the store
// untouched:
//   - malformed input (empty key, unknown Op, a put without a revision),
//     with an error wrapping ErrInvalidCommit;
//   - a cursor below the stored one, or one that clears the eviction memo,
//     with a [*CursorRegressionError]. That is a broken invariant in the
//     caller (cursor-after-apply only raises the cursor), not a transient
//     condition: do not retry. An equal cursor is allowed (repairs commit
//     corrections under the current cursor).
//
// With Options.Sync false a process crash, not only a power loss, can lose
// the last commits (a whole tail); see [Options.Sync]. Commit copies what it needs: the
// caller may reuse c's slices once it returns. Commits are serialized.
func (s *Store) Commit(c Commit) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	if err := validate(&c); err != nil {
		return err
	}

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	stored := *s.cursor.Load()
	if c.Cursor.Rev < stored.Rev || (stored.EvictionSeen && !c.Cursor.EvictionSeen) {
		return &CursorRegressionError{Stored: stored, Proposed: c.Cursor}
	}
	view := s.viewSpace()
	if c.Activate != nil {
		if c.Activate.s != s || !c.Activate.live() {
			return ErrShadowStale
		}
		view = c.Activate.space
	}

	b := s.db.NewBatch()
	defer b.Close()
	var err error
	pw := &s.points
	pw.reset()
	defer pw.reset()
	pw.addRaw(c.Raw)
	pw.addViews(view, c.Views)
	if err := pw.writeTo(b); err != nil {
		return fmt.Errorf("fold: commit: %w", err)
	}
	if err := putDeadLetters(b, c.DeadLetters); err != nil {
		return fmt.Errorf("fold: commit: %w", err)
	}
	for _, rev := range c.ClearDeadLetters {
		if err := b.Delete(deadKey(rev), nil); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	if c.Activate != nil {
		lower, upper := prefixBounds(otherView(view), "")
		if err := b.Set(metaViewKey, []byte{view}, nil); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
		if err := b.DeleteRange(lower, upper, nil); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	high, nextIdx, filed, err := s.putEffects(b, &c)
	if err != nil {
		return fmt.Errorf("fold: commit: %w", err)
	}
	if c.PluginIdentity != nil {
		if err := b.Set(metaPluginKey, c.PluginIdentity, nil); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	switch c.Repair {
	case RepairBegin:
		err = b.Set(metaRepairKey, nil, nil)
	case RepairEnd:
		err = b.Delete(metaRepairKey, nil)
	}
	if err != nil {
		return fmt.Errorf("fold: commit: batch: %w", err)
	}
	cur, err := c.Cursor.MarshalBinary()
	if err != nil {
		return fmt.Errorf("fold: commit: encode cursor %v: %w", c.Cursor, err)
	}
	if err := b.Set(metaCursorKey, cur, nil); err != nil {
		return fmt.Errorf("fold: commit: batch: %w", err)
	}
	// The filters learn the keys before the data lands (keyfilter.go); a
	// switch to a rebuild's views drops the view filter: it knows the old
	// keyspace's keys, not the new one's.
	rf := s.rawFilter.Load()
	for i := range c.Raw {
		rf.addString(c.Raw[i].Key)
	}
	if c.Activate != nil {
		s.viewFilter.Store(nil)
	} else if vf := s.viewFilter.Load(); vf != nil {
		for i := range c.Views {
			vf.add(c.Views[i].Key)
		}
	}
	if c.Activate != nil {
		// No Store view read between the switch and the flip below.
		s.viewMu.Lock()
		defer s.viewMu.Unlock()
	}
	// The new entries are counted before they are applied: a publisher
	// may read, publish and delete them as soon as they are, and whoever
	// sees the new cursor must see them counted (an empty outbox then
	// means drained).
	added := int64(filed)
	s.outboxLen.Add(added)
	// Odd from before the cursor lands until its copies are set below
	// (every return from here on): Snapshot then reads the snapshot's own.
	s.commits.Add(1)
	defer s.commits.Add(1)
	if err := s.apply(b, s.write); err != nil {
		s.outboxLen.Add(-added)
		return fmt.Errorf("fold: commit at cursor %v: %w", c.Cursor, err)
	}
	next := c.Cursor
	s.cursor.Store(&next)
	s.advMu.Lock()
	if s.advanced != nil {
		close(s.advanced)
		s.advanced = nil
	}
	s.advMu.Unlock()
	if high > 0 {
		s.outboxHigh, s.outboxNext = high, nextIdx
		select {
		case s.outboxSig <- struct{}{}:
		default:
		}
	}
	if c.Activate != nil {
		s.view.Store(uint32(view))
		s.shadow.CompareAndSwap(c.Activate, nil)
	}
	return nil
}

// validate checks c's input without touching the store.
func validate(c *Commit) error {
	for i, u := range c.Raw {
		switch {
		case u.Key == "":
			return fmt.Errorf("%w: raw update %d: empty key", ErrInvalidCommit, i)
		case !u.Op.Valid():
			return fmt.Errorf("%w: raw update %d (%q): unknown op %v", ErrInvalidCommit, i, u.Key, u.Op)
		case u.Op == OpPut && !u.Rev.Known():
			return fmt.Errorf("%w: raw put %d (%q): no revision", ErrInvalidCommit, i, u.Key)
		}
	}
	for i, m := range c.Views {
		switch {
		case len(m.Key) == 0:
			return fmt.Errorf("%w: view mutation %d: empty key", ErrInvalidCommit, i)
		case m.Op != ViewPut && m.Op != ViewDelete:
			return fmt.Errorf("%w: view mutation %d (%q): unknown op %v", ErrInvalidCommit, i, m.Key, m.Op)
		}
	}
	for i, e := range c.Effects {
		switch {
		case e.Subject == "":
			return fmt.Errorf("%w: effect %d: empty subject", ErrInvalidCommit, i)
		case c.EffectsAppend: // filed under EffectRev, whatever they name
		case (e.UpdateRev == 0) != (c.Effects[0].UpdateRev == 0):
			return fmt.Errorf("%w: effect %d: some effects name their update and some do not", ErrInvalidCommit, i)
		case e.UpdateRev > c.EffectRev || i > 0 && e.UpdateRev < c.Effects[i-1].UpdateRev:
			return fmt.Errorf("%w: effect %d: update revision %d out of order (the batch's highest is %d)", ErrInvalidCommit, i, e.UpdateRev, c.EffectRev)
		}
	}
	if len(c.Effects) > 0 && !c.EffectRev.Known() {
		return fmt.Errorf("%w: %d effects without a revision", ErrInvalidCommit, len(c.Effects))
	}
	if c.Repair > RepairEnd {
		return fmt.Errorf("%w: repair mark %d", ErrInvalidCommit, c.Repair)
	}
	return nil
}
