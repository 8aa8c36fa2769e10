package fold

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// The outbox: the effects a plugin emitted, committed in the same pebble
// batch as the views, the raw updates and the cursor that produced them
// (Commit.Effects), and deleted once published (Store.DeleteOutbox). A
// commit that does not happen leaves no effect behind; a committed effect
// stays until a publisher saw the server acknowledge it.
//
// Keys: spaceOutbox ++ rev:u64be ++ index:u32be, so pebble's order is the
// fold's order (the revision the batch's effects are filed under, then the
// plugin's order within the batch). A commit files its effects as one
// entry (a group), under the key of its first effect, the value
//
//	version:u8 (2) ++ count:u32 ++ (index:u32 ++ len:u32 ++ effect)*count
//	effect: subject:str ++ headers:u32 ++ (name:str ++ value:str)*headers ++ payload
//
// where str is u32 length ++ bytes and payload is the rest of the effect's
// len bytes: one pebble key per commit rather than one per effect (the
// memtable's insert is per key, and it was most of what effects added to
// the fold's own commit). Effects that name their update (Effect.UpdateRev)
// each carry their own revision, in a version 3 group under the key of the
// first:
//
//	version:u8 (3) ++ count:u32 ++ (rev:u64 ++ index:u32 ++ len:u32 ++ effect)*count
//
// A group whose first effects were published is written again under its
// key, holding the rest (each effect keeps its revision and index); one
// whose effects all were is deleted. A store written before groups may
// hold version 1 values: one effect, its index the key's,
//
//	version:u8 (1) ++ effect (its payload the rest of the value)

const (
	outboxVersion1 = 1 // one effect per key (read, never written)
	outboxVersion  = 2 // a group: a commit's effects under one key
	outboxVersion3 = 3 // a group whose effects carry their revision
)

// outboxKeyLen is the length of an outbox key, the space byte included.
const outboxKeyLen = 1 + 8 + 4

// OutboxEntry is one committed effect awaiting publication.
type OutboxEntry struct {
	// Rev and Index place the effect: the batch's revision (Commit.
	// EffectRev) and its position among the batch's effects.
	Rev   protocol.Revision
	Index uint32
	Effect
}

// ID is the effect's deterministic id, "<fold>/<revision>/<index>": the
// same for every attempt to publish it, and never the same for two
// effects of a fold (the outbox files no two batches under one revision).
func (e OutboxEntry) ID(fold string) string {
	return fold + "/" + strconv.FormatUint(uint64(e.Rev), 10) + "/" + strconv.FormatUint(uint64(e.Index), 10)
}

func outboxKey(rev protocol.Revision, index uint32) []byte {
	return putOutboxKey(make([]byte, outboxKeyLen), rev, index)
}

func putOutboxKey(k []byte, rev protocol.Revision, index uint32) []byte {
	k[0] = spaceOutbox
	binary.BigEndian.PutUint64(k[1:], uint64(rev))
	binary.BigEndian.PutUint32(k[9:], index)
	return k
}

// readOutboxHigh reads the outbox's high-water mark: the highest revision
// any commit filed effects under (0: none), and the next index under it.
// The mark is rev:u64be ++ next:u32be; a mark of 8 bytes (written before
// EffectsAppend) has its next index unknown, taken as 1<<31: no commit
// appended under it, and an append starts past any index it filed.
func readOutboxHigh(r pebble.Reader) (protocol.Revision, uint32, error) {
	v, ok, err := getCopy(r, metaOutboxKey)
	if err != nil || !ok {
		return 0, 0, err
	}
	switch len(v) {
	case 8:
		return protocol.Revision(binary.BigEndian.Uint64(v)), 1 << 31, nil
	case 12:
		return protocol.Revision(binary.BigEndian.Uint64(v)), binary.BigEndian.Uint32(v[8:]), nil
	}
	return 0, 0, fmt.Errorf("%w: outbox mark of %d bytes", ErrCorrupt, len(v))
}

// putEffects adds c's effects to b, under commitMu. It returns the new
// high-water mark and the next index under it, or 0 when the effects were
// dropped (or there are none), and how many it filed.
func (s *Store) putEffects(b *pebble.Batch, c *Commit) (protocol.Revision, uint32, int, error) {
	if len(c.Effects) == 0 {
		return 0, 0, 0, nil
	}
	if c.Effects[0].UpdateRev != 0 && !c.EffectsAppend {
		return s.putUpdateEffects(b, c.Effects)
	}
	first := uint32(0)
	if c.EffectsAppend && c.EffectRev == s.outboxHigh && s.outboxHigh > 0 {
		first = s.outboxNext
		if uint64(first)+uint64(len(c.Effects)) > 1<<32-1 {
			return 0, 0, 0, fmt.Errorf("%w: %d effects appended under revision %d past index %d", ErrInvalidCommit, len(c.Effects), c.EffectRev, first)
		}
	} else if c.EffectRev <= s.outboxHigh {
		// A batch filed under a revision effects were committed under
		// already: a re-delivery of what a commit covered. Its effects
		// had their turn (and would reuse the ids).
		s.effectsDropped.Add(uint64(len(c.Effects)))
		s.opts.Logger.Warn("fold: effects of a batch at or below the outbox's revision mark dropped (a re-delivered batch)",
			"effects", len(c.Effects), "effect_revision", uint64(c.EffectRev), "outbox_mark", uint64(s.outboxHigh))
		return 0, 0, 0, nil
	}
	// One entry for the commit's effects.
	if err := putGroup(b, c.EffectRev, first, c.Effects); err != nil {
		return 0, 0, 0, err
	}
	next := first + uint32(len(c.Effects))
	return c.EffectRev, next, len(c.Effects), putOutboxMark(b, c.EffectRev, next)
}

// putUpdateEffects files effects that name their updates (UpdateRev, not
// decreasing) each under its update's revision, (UpdateRev, 0..k-1) for an
// update's k effects, in one version 3 group: a replica that batched the
// same updates otherwise files the same effects under the same ids
// (RATIONALE.md, "Plugin effects", on replicas sharing the fence). The effects of updates at or
// below the outbox's mark are dropped: a re-delivery of what a commit
// filed already.
func (s *Store) putUpdateEffects(b *pebble.Batch, effects []Effect) (protocol.Revision, uint32, int, error) {
	skip := 0
	for skip < len(effects) && effects[skip].UpdateRev <= s.outboxHigh {
		skip++
	}
	if skip > 0 {
		s.effectsDropped.Add(uint64(skip))
		s.opts.Logger.Warn("fold: effects of updates at or below the outbox's revision mark dropped (re-delivered updates)",
			"effects", skip, "effect_revision", uint64(effects[skip-1].UpdateRev), "outbox_mark", uint64(s.outboxHigh))
	}
	effects = effects[skip:]
	if len(effects) == 0 {
		return 0, 0, 0, nil
	}
	high, next := effects[len(effects)-1].UpdateRev, uint32(0)
	for i := len(effects) - 1; i >= 0 && effects[i].UpdateRev == high; i-- {
		next++
	}
	n := 1 + 4
	for i := range effects {
		n += 16 + effectLen(&effects[i])
	}
	op := b.SetDeferred(outboxKeyLen, n)
	putOutboxKey(op.Key, effects[0].UpdateRev, 0)
	if v := appendUpdateGroup(op.Value[:0], effects); len(v) != n || &v[0] != &op.Value[0] {
		return 0, 0, 0, fmt.Errorf("fold: outbox: a group of %d bytes encoded as %d", n, len(v))
	}
	if err := op.Finish(); err != nil {
		return 0, 0, 0, fmt.Errorf("batch: %w", err)
	}
	return high, next, len(effects), putOutboxMark(b, high, next)
}

// putGroup adds one outbox entry, effects indexed from first under rev,
// encoded in place in the batch (no copy of the payloads in between).
func putGroup(b *pebble.Batch, rev protocol.Revision, first uint32, effects []Effect) error {
	n := groupLen(effects)
	op := b.SetDeferred(outboxKeyLen, n)
	putOutboxKey(op.Key, rev, first)
	if v := appendGroup(op.Value[:0], first, effects); len(v) != n || &v[0] != &op.Value[0] {
		return fmt.Errorf("fold: outbox: a group of %d bytes encoded as %d", n, len(v))
	}
	if err := op.Finish(); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

// putOutboxMark records the outbox's high-water mark: the highest revision
// effects were filed under, and the next index under it.
func putOutboxMark(b *pebble.Batch, high protocol.Revision, next uint32) error {
	mark := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(high)), next)
	if err := b.Set(metaOutboxKey, mark, nil); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

// Outbox calls fn for the outbox's entries in order (the fold's), from the
// first, at most max of them (max <= 0: all). Each entry is a fresh copy.
func (s *Store) Outbox(max int, fn func(OutboxEntry) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	n := 0
	errEnough := errors.New("enough")
	// From the floor: the published entries' tombstones below it would
	// otherwise be skipped one by one at every call, until a compaction
	// drops them (a drain of n effects, a chunk at a time, was quadratic).
	floor := s.outboxFloor.Load()
	err := scanFrom(s.db, spaceOutbox, floor, func(k, v []byte) error {
		if max > 0 && n >= max {
			return errEnough
		}
		if n == 0 && (floor == nil || !bytes.Equal(k, *floor)) {
			// The first entry: none is ever added below it (a commit files
			// its effects above the outbox's mark), so no scan needs to
			// look below it again, until the store is reopened.
			f := slices.Clone(k)
			s.outboxFloor.Store(&f)
		}
		return decodeGroup(k, v, func(e OutboxEntry) error {
			if max > 0 && n >= max {
				return errEnough
			}
			n++
			return fn(e)
		})
	})
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

// scanFrom calls fn for space's keys from the key from (nil: all; from is
// without the space byte), with their values.
func scanFrom(r pebble.Reader, space byte, from *[]byte, fn func(key, value []byte) error) error {
	lower, upper := prefixBounds(space, "")
	if from != nil {
		lower = appendKey(nil, space, *from)
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("fold: range %c: %w", space, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		if err = fn(it.Key()[1:], v); err != nil {
			break
		}
	}
	return errors.Join(err, it.Close())
}

// DeleteOutbox deletes published entries (the publisher's, once the server
// acknowledged them). Deleting an absent entry is a no-op.
func (s *Store) DeleteOutbox(entries ...OutboxEntry) error {
	if len(entries) == 0 {
		return nil
	}
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	b := s.db.NewBatch()
	defer b.Close()
	removed, err := s.removeOutbox(b, entries)
	if err != nil {
		return fmt.Errorf("fold: outbox delete: %w", err)
	}
	if err := s.apply(b, s.write); err != nil {
		return fmt.Errorf("fold: outbox delete: %w", err)
	}
	if s.outboxLen.Add(-int64(removed)) < 0 {
		s.outboxLen.Store(0)
	}
	return nil
}

// removeOutbox adds to b the removal of entries from their groups: a
// group left empty is deleted, one that keeps effects is written again
// under its key with those. It returns how many of entries it found. Only
// the publisher removes entries (a commit adds groups above every key
// there is), so what it reads stays true until b is applied.
func (s *Store) removeOutbox(b *pebble.Batch, entries []OutboxEntry) (int, error) {
	type id struct {
		rev   protocol.Revision
		index uint32
	}
	gone := make(map[id]struct{}, len(entries))
	lo, hi := entries[0], entries[0]
	for _, e := range entries {
		gone[id{e.Rev, e.Index}] = struct{}{}
		if e.Rev < lo.Rev || e.Rev == lo.Rev && e.Index < lo.Index {
			lo = e
		}
		if e.Rev > hi.Rev || e.Rev == hi.Rev && e.Index > hi.Index {
			hi = e
		}
	}
	lower, upper := prefixBounds(spaceOutbox, "")
	if floor := s.outboxFloor.Load(); floor != nil {
		// No entry lies below the floor (Outbox): the seek below need not
		// walk back over the tombstones of the published ones.
		lower = appendKey(nil, spaceOutbox, *floor)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	last := outboxKey(hi.Rev, hi.Index)
	removed := 0
	var keep [][]byte
	// From the group holding the first entry: the last key at or below it.
	for ok := it.SeekLT(append(outboxKey(lo.Rev, lo.Index), 0)); ok && bytes.Compare(it.Key(), last) <= 0; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return 0, err
		}
		// The kept effects' records are copied as they are (not decoded).
		keep, keptLen, found := keep[:0], 0, 0
		if err := groupRecords(it.Key()[1:], v, func(rev protocol.Revision, index uint32, rec []byte) error {
			if _, ok := gone[id{rev, index}]; ok {
				found++
			} else {
				keep, keptLen = append(keep, rec), keptLen+len(rec)
			}
			return nil
		}); err != nil {
			return 0, err
		}
		switch {
		case found == 0:
			continue
		case len(keep) == 0:
			err = b.Delete(it.Key(), nil)
		default:
			val := binary.BigEndian.AppendUint32(append(make([]byte, 0, 5+keptLen), v[0]), uint32(len(keep)))
			for _, rec := range keep {
				val = append(val, rec...)
			}
			err = b.Set(it.Key(), val, nil)
		}
		if err != nil {
			return 0, err
		}
		removed += found
	}
	return removed, it.Error()
}

// SyncOutbox makes every commit applied so far durable (one WAL sync; a
// no-op when Options.Sync syncs every commit already). The publisher
// calls it before it publishes what it read: a NoSync commit can die with
// the process (Options.Sync), and its re-fold may batch its updates
// differently, filing the same effects under ids the fence does not cover
// (published twice). An effect on the stream must outlive any crash in
// the outbox until its delete, which the fence then makes good.
func (s *Store) SyncOutbox() error {
	if s.opts.Sync {
		return nil
	}
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.LogData(nil, nil); err != nil {
		return fmt.Errorf("fold: outbox: sync the log: %w", err)
	}
	if err := s.apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("fold: outbox: sync the log: %w", err)
	}
	return nil
}

// OutboxLen is how many effects the outbox holds (committed, not yet
// published).
func (s *Store) OutboxLen() int64 { return s.outboxLen.Load() }

// OutboxSignal is a channel that receives (coalesced) after each commit
// that added outbox entries: a publisher waits on it.
func (s *Store) OutboxSignal() <-chan struct{} { return s.outboxSig }

// EffectsDropped counts the effects Commit dropped as re-delivered (see
// Commit.EffectRev) since the store was opened.
func (s *Store) EffectsDropped() uint64 { return s.effectsDropped.Load() }

// DropOutbox deletes every outbox entry (its revision mark stays): a store
// installed from another node's artifact must not publish what that node
// committed (that node publishes it). With hold (nil: none), the store's
// effects hold is recorded in the same batch: a store that dropped
// another node's effects is never without the hold that waits for them.
func (s *Store) DropOutbox(hold *EffectsHold) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	lower, upper := prefixBounds(spaceOutbox, "")
	b := s.db.NewBatch()
	defer b.Close()
	err := b.DeleteRange(lower, upper, nil)
	if err == nil && hold != nil {
		err = putHold(b, hold)
	}
	if err == nil {
		err = s.apply(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("fold: outbox drop: %w", err)
	}
	s.outboxLen.Store(0)
	return nil
}

// LastOutbox is the outbox's last entry (ok false: the outbox is empty).
func (s *Store) LastOutbox() (e OutboxEntry, ok bool, err error) {
	if !s.gate.enter() {
		return e, false, ErrClosed
	}
	defer s.gate.exit()
	lower, upper := prefixBounds(spaceOutbox, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return e, false, fmt.Errorf("fold: outbox: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return e, false, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return e, false, fmt.Errorf("fold: outbox: %w", err)
	}
	err = decodeGroup(it.Key()[1:], v, func(x OutboxEntry) error { e, ok = x, true; return nil })
	return e, ok && err == nil, err
}
