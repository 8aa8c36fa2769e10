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
// plugin's order within the batch). Values:
//
//	version:u8 (1) ++ subject:str ++ headers:u32 ++ (name:str ++ value:str)*headers ++ payload
//
// where str is u32 length ++ bytes and payload is the rest.

const outboxVersion = 1

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
	k := make([]byte, outboxKeyLen)
	k[0] = spaceOutbox
	binary.BigEndian.PutUint64(k[1:], uint64(rev))
	binary.BigEndian.PutUint32(k[9:], index)
	return k
}

func appendOutboxValue(b []byte, e *Effect) []byte {
	b = append(b, outboxVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Subject)))
	b = append(b, e.Subject...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Headers)))
	for _, h := range e.Headers {
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.Name)))
		b = append(b, h.Name...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.Value)))
		b = append(b, h.Value...)
	}
	return append(b, e.Payload...)
}

// decodeOutbox decodes an entry (key without the space byte) into fresh
// memory.
func decodeOutbox(key, v []byte) (OutboxEntry, error) {
	bad := func(what string) (OutboxEntry, error) {
		return OutboxEntry{}, fmt.Errorf("%w: outbox entry %x: %s", ErrCorrupt, key, what)
	}
	if len(key) != outboxKeyLen-1 {
		return bad("key length")
	}
	e := OutboxEntry{Rev: protocol.Revision(binary.BigEndian.Uint64(key)), Index: binary.BigEndian.Uint32(key[8:])}
	if len(v) < 1 || v[0] != outboxVersion {
		return bad("unknown version")
	}
	v = v[1:]
	str := func() (string, bool) {
		if len(v) < 4 {
			return "", false
		}
		n := binary.BigEndian.Uint32(v)
		if uint64(len(v)-4) < uint64(n) {
			return "", false
		}
		s := string(v[4 : 4+n])
		v = v[4+n:]
		return s, true
	}
	var ok bool
	if e.Subject, ok = str(); !ok || len(v) < 4 {
		return bad("truncated subject")
	}
	nh := binary.BigEndian.Uint32(v)
	v = v[4:]
	if uint64(nh)*8 > uint64(len(v)) {
		return bad("header count")
	}
	for range nh {
		var h EffectHeader
		var ok1, ok2 bool
		h.Name, ok1 = str()
		h.Value, ok2 = str()
		if !ok1 || !ok2 {
			return bad("truncated header")
		}
		e.Headers = append(e.Headers, h)
	}
	e.Payload = append([]byte(nil), v...)
	return e, nil
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
// dropped (or there are none).
func (s *Store) putEffects(b *pebble.Batch, c *Commit) (protocol.Revision, uint32, error) {
	if len(c.Effects) == 0 {
		return 0, 0, nil
	}
	first := uint32(0)
	if c.EffectsAppend && c.EffectRev == s.outboxHigh && s.outboxHigh > 0 {
		first = s.outboxNext
		if uint64(first)+uint64(len(c.Effects)) > 1<<32-1 {
			return 0, 0, fmt.Errorf("%w: %d effects appended under revision %d past index %d", ErrInvalidCommit, len(c.Effects), c.EffectRev, first)
		}
	} else if c.EffectRev <= s.outboxHigh {
		// A batch filed under a revision effects were committed under
		// already: a re-delivery of what a commit covered. Its effects
		// had their turn (and would reuse the ids).
		s.effectsDropped.Add(uint64(len(c.Effects)))
		s.opts.Logger.Warn("fold: effects of a batch at or below the outbox's revision mark dropped (a re-delivered batch)",
			"effects", len(c.Effects), "effect_revision", uint64(c.EffectRev), "outbox_mark", uint64(s.outboxHigh))
		return 0, 0, nil
	}
	var val []byte
	for i := range c.Effects {
		val = appendOutboxValue(val[:0], &c.Effects[i])
		if err := b.Set(outboxKey(c.EffectRev, first+uint32(i)), val, nil); err != nil {
			return 0, 0, fmt.Errorf("batch: %w", err)
		}
	}
	next := first + uint32(len(c.Effects))
	mark := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(c.EffectRev)), next)
	if err := b.Set(metaOutboxKey, mark, nil); err != nil {
		return 0, 0, fmt.Errorf("batch: %w", err)
	}
	return c.EffectRev, next, nil
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
		n++
		e, err := decodeOutbox(k, v)
		if err != nil {
			return err
		}
		return fn(e)
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
	for _, e := range entries {
		if err := b.Delete(outboxKey(e.Rev, e.Index), nil); err != nil {
			return fmt.Errorf("fold: outbox delete: %w", err)
		}
	}
	if err := s.apply(b, s.write); err != nil {
		return fmt.Errorf("fold: outbox delete: %w", err)
	}
	if s.outboxLen.Add(-int64(len(entries))) < 0 {
		s.outboxLen.Store(0) // absent entries deleted: a caller's repeat
	}
	return nil
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
// committed (that node publishes it).
func (s *Store) DropOutbox() error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	lower, upper := prefixBounds(spaceOutbox, "")
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lower, upper, nil); err != nil {
		return fmt.Errorf("fold: outbox drop: %w", err)
	}
	if err := s.apply(b, s.write); err != nil {
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
	e, err = decodeOutbox(it.Key()[1:], v)
	return e, err == nil, err
}
