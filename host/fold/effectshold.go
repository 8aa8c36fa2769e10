package fold

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// EffectsHold is a store's record that it joined a fold's effects midway:
// another publisher (a replica, or the node this store's data came from)
// may still hold effects this store never filed, up to the hold's point,
// and publishing this store's later effects first would move the fold's
// fence past them (its cover is an order), so they would be deleted
// unpublished. The host holds its publisher until the fence covers the
// point, or an operator releases it.
type EffectsHold struct {
	// Syncing: the store is still catching up with the history it joined
	// (a state-sync's collapsed values): its effects are not the ones the
	// other publisher filed, and are dropped; the point is set when it has
	// caught up (the cursor then).
	Syncing bool `json:"syncing,omitempty"`
	// Tentative: the fence could not be read when the hold began; one
	// that shows none of the fold's effects published ends it.
	Tentative bool `json:"tentative,omitempty"`
	// Rev and Index: the last effect another publisher may hold that this
	// store does not.
	Rev   protocol.Revision `json:"rev,omitempty"`
	Index uint32            `json:"index,omitempty"`
}

// After reports whether the effect rev/index comes after the hold's point.
func (h EffectsHold) After(rev protocol.Revision, index uint32) bool {
	return rev > h.Rev || rev == h.Rev && index > h.Index
}

// String describes the hold for the log: "syncing", or its point
// (rev/index; rev/* for the whole revision), "(tentative)" after.
func (h EffectsHold) String() string {
	s := "syncing"
	switch {
	case h.Syncing:
	case h.Index == ^uint32(0):
		s = fmt.Sprintf("%d/*", h.Rev)
	default:
		s = fmt.Sprintf("%d/%d", h.Rev, h.Index)
	}
	if h.Tentative {
		s += " (tentative)"
	}
	return s
}

// With is the hold that waits for both h and o: syncing when either is
// (a point still to be set comes after any set one), else at the later
// point; tentative only when both are (a hold that is sure stays sure).
func (h EffectsHold) With(o EffectsHold) EffectsHold {
	j := EffectsHold{Syncing: h.Syncing || o.Syncing, Tentative: h.Tentative && o.Tentative, Rev: h.Rev, Index: h.Index}
	if h.After(o.Rev, o.Index) {
		j.Rev, j.Index = o.Rev, o.Index
	}
	if j.Syncing {
		j.Rev, j.Index = 0, 0
	}
	return j
}

// putHold adds the record of h to b.
func putHold(b *pebble.Batch, h *EffectsHold) error {
	v, _ := json.Marshal(h) // plain fields: cannot fail
	return b.Set(metaHoldKey, v, nil)
}

// EffectsHold returns the store's hold (ok false: none).
func (s *Store) EffectsHold() (h EffectsHold, ok bool, err error) {
	if !s.gate.enter() {
		return h, false, ErrClosed
	}
	defer s.gate.exit()
	b, ok, err := getCopy(s.db, metaHoldKey)
	if err != nil || !ok {
		return h, false, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, false, fmt.Errorf("%w: effects hold %q: %v", ErrCorrupt, b, err)
	}
	return h, true, nil
}

// SetEffectsHold records h durably, or removes the record (h nil).
func (s *Store) SetEffectsHold(h *EffectsHold) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	b := s.db.NewBatch()
	defer b.Close()
	var err error
	if h == nil {
		err = b.Delete(metaHoldKey, nil)
	} else {
		err = putHold(b, h)
	}
	if err == nil {
		err = s.apply(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("fold: record the effects hold in %s: %w", s.dir, err)
	}
	return nil
}

// JoinedHold is the hold a store that takes this one's data (a bootstrap
// or a restore from its artifact) needs to join its effects: this store's
// own hold, if it has one (its node joined another publisher's effects
// midway, up to a point it may not have filed), with the last effect this
// store filed (its node's to publish). ok false: neither, nothing to wait
// for.
func (s *Store) JoinedHold() (h EffectsHold, ok bool, err error) {
	h, held, err := s.EffectsHold()
	if err != nil {
		return h, false, err
	}
	rev, index, marked, err := s.OutboxMark()
	if err != nil || !marked {
		return h, held, err
	}
	filed := EffectsHold{Rev: rev, Index: index}
	if held {
		filed = h.With(filed)
	}
	return filed, true, nil
}

// OutboxMark is the last effect the store ever filed (ok false: none),
// published or not: what a store copied from this one's data lacks, at
// most, of its effects. An index unknown (a mark written before appends
// were numbered) reads as the highest.
func (s *Store) OutboxMark() (rev protocol.Revision, index uint32, ok bool, err error) {
	if !s.gate.enter() {
		return 0, 0, false, ErrClosed
	}
	defer s.gate.exit()
	high, next, err := readOutboxHigh(s.db)
	if err != nil || high == 0 {
		return 0, 0, false, err
	}
	if next == 0 || next == 1<<31 {
		return high, ^uint32(0), true, nil
	}
	return high, next - 1, true, nil
}
