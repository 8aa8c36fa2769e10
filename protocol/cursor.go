package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Cursor is a fold's durable position: every update with revision <= Rev was
// handed to the plugin and the plugin returned (cursor-after-apply). It is
// committed in the same store batch as the data it covers.
//
// Rev == NoRevision means nothing has been applied: the next start is a
// state-sync, not a resume.
type Cursor struct {
	Rev Revision

	// EvictionSeen is the memo "this fold has seen retention evict a current
	// value". Once set it is never cleared: a key that aged out is missing
	// from every later listing, even after eviction is turned off, so a fold
	// with the memo never trusts a key listing again (see ListingIsTruth).
	// Artifacts carry it, so a node restored from one inherits it.
	EvictionSeen bool

	// MsgUnixNano is the server timestamp of the message at Rev, in Unix
	// nanoseconds, or 0 when unknown. Only GapHoldsNoEviction reads it, and
	// only on a fold that has seen eviction, so CursorAfterBatch keeps it only
	// on a cursor with the memo: a plain cursor stays the compact bare
	// revision.
	MsgUnixNano int64

	// Unsettled reports that the cursor runs ahead of what retention has
	// confirmed: every update in the fold's scope with revision <= Settled
	// reached the fold, but above Settled a lagging filtered consumer may
	// have been clamped past messages retention evicted, unseen. The fold
	// applied everything it was delivered up to Rev (cursor-after-apply
	// holds); what is not known yet is whether it was delivered everything.
	// A resume therefore checks retention against Settled ([SettledRev],
	// [CheckCursorResume]). Only a prefix-scoped watch leaves a cursor
	// unsettled, and only until its next settle probe ([SettleDelivered],
	// [SettleQuiet]); a whole-bucket watch, a state-sync and a repair settle
	// everything they commit. Settled < Rev whenever Unsettled is set.
	Unsettled bool
	Settled   Revision
}

// SettledRev is the revision up to which every update in the fold's scope
// is known to have reached the fold: Settled on an unsettled cursor, Rev on
// any other.
func (c Cursor) SettledRev() Revision {
	if c.Unsettled {
		return c.Settled
	}
	return c.Rev
}

// Settle returns c with its settled point at settled: a revision its source
// vouches for (every update in scope at or below it was delivered) and, the
// caller guarantees, at least c's own settled point. When complete (c
// covers every update delivered at or below settled: none is still waiting
// to be applied) and settled is above c.Rev, the position moves up to it:
// the revisions in between are outside the fold's scope, and "nothing to
// apply" is covered by the cursor too (see [Advance]); msgUnixNano is then
// the time of a message at or below settled (older is conservative: see
// [GapHoldsNoEviction]), kept with the memo only. The result is unsettled
// exactly when settled stays below its position.
func Settle(c Cursor, settled Revision, msgUnixNano int64, complete bool) Cursor {
	if complete && settled > c.Rev {
		c.Rev = settled
		c.MsgUnixNano = msgUnixNano
		if !c.EvictionSeen {
			c.MsgUnixNano = 0
		}
	}
	if settled >= c.Rev {
		c.Unsettled, c.Settled = false, NoRevision
	} else {
		c.Unsettled, c.Settled = true, settled
	}
	return c
}

// Cursor binary encoding, version 1. Two forms, told apart by length:
//
//	compact  (8 bytes):  rev:u64be
//	extended (10, 18 or 26): 0x01 flags:u8 rev:u64be [msg_unix_nano:i64be] [settled:u64be]
//
// The compact form is used exactly when there is no memo, no message time
// and nothing unsettled, so a plain cursor stays the bare revision. flags
// bit 0 = EvictionSeen, bit 1 = message time present, bit 2 = Unsettled
// (settled follows, below rev); other bits must be zero. Readers that
// predate a bit refuse it (unknown flags) rather than misread the cursor.
const (
	cursorCompactLen    = 8
	cursorExtVersion    = 0x01
	cursorFlagEviction  = 1 << 0
	cursorFlagMsgTime   = 1 << 1
	cursorFlagUnsettled = 1 << 2
	cursorFlagsKnown    = cursorFlagEviction | cursorFlagMsgTime | cursorFlagUnsettled
)

// ErrCursorEncoding is wrapped by every Cursor decoding error.
var ErrCursorEncoding = errors.New("protocol: bad cursor encoding")

// AppendBinary appends the encoding of c to b.
func (c Cursor) AppendBinary(b []byte) ([]byte, error) {
	if c.Unsettled && c.Settled >= c.Rev {
		return b, fmt.Errorf("%w: settled %d is not below the position %d", ErrCursorEncoding, c.Settled, c.Rev)
	}
	if !c.Unsettled && c.Settled != NoRevision {
		return b, fmt.Errorf("%w: a settled revision %d without the unsettled flag", ErrCursorEncoding, c.Settled)
	}
	if !c.EvictionSeen && c.MsgUnixNano == 0 && !c.Unsettled {
		return binary.BigEndian.AppendUint64(b, uint64(c.Rev)), nil
	}
	var flags byte
	if c.EvictionSeen {
		flags |= cursorFlagEviction
	}
	if c.MsgUnixNano != 0 {
		flags |= cursorFlagMsgTime
	}
	if c.Unsettled {
		flags |= cursorFlagUnsettled
	}
	b = append(b, cursorExtVersion, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Rev))
	if flags&cursorFlagMsgTime != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(c.MsgUnixNano))
	}
	if flags&cursorFlagUnsettled != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(c.Settled))
	}
	return b, nil
}

// MarshalBinary returns the encoding of c.
func (c Cursor) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

// UnmarshalBinary decodes either form. It never accepts trailing bytes.
func (c *Cursor) UnmarshalBinary(b []byte) error {
	if len(b) == cursorCompactLen {
		*c = Cursor{Rev: Revision(binary.BigEndian.Uint64(b))}
		return nil
	}
	if len(b) < 10 {
		return fmt.Errorf("%w: %d bytes", ErrCursorEncoding, len(b))
	}
	if b[0] != cursorExtVersion {
		return fmt.Errorf("%w: unknown version %d (written by a newer foldhost?)", ErrCursorEncoding, b[0])
	}
	flags := b[1]
	if flags&^cursorFlagsKnown != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCursorEncoding, flags)
	}
	want := 10
	if flags&cursorFlagMsgTime != 0 {
		want += 8
	}
	if flags&cursorFlagUnsettled != 0 {
		want += 8
	}
	if len(b) != want {
		return fmt.Errorf("%w: flags %#x need %d bytes, got %d", ErrCursorEncoding, flags, want, len(b))
	}
	if flags == 0 {
		return fmt.Errorf("%w: extended form without memo, time or settled revision", ErrCursorEncoding)
	}
	out := Cursor{
		Rev:          Revision(binary.BigEndian.Uint64(b[2:10])),
		EvictionSeen: flags&cursorFlagEviction != 0,
	}
	rest := b[10:]
	if flags&cursorFlagMsgTime != 0 {
		out.MsgUnixNano = int64(binary.BigEndian.Uint64(rest))
		rest = rest[8:]
		if out.MsgUnixNano == 0 {
			// The compact/extended choice is canonical; a zero time
			// flagged present would have two encodings.
			return fmt.Errorf("%w: message time flagged but zero", ErrCursorEncoding)
		}
	}
	if flags&cursorFlagUnsettled != 0 {
		out.Unsettled, out.Settled = true, Revision(binary.BigEndian.Uint64(rest))
		if out.Settled >= out.Rev {
			// A settled point at or past the position is a settled
			// cursor, which has one encoding: without the flag.
			return fmt.Errorf("%w: settled %d is not below the position %d", ErrCursorEncoding, out.Settled, out.Rev)
		}
	}
	*c = out
	return nil
}

func (c Cursor) String() string {
	s := c.Rev.String()
	if c.EvictionSeen {
		s += "+evicted"
	}
	if c.Unsettled {
		s += "(settled " + c.Settled.String() + ")"
	}
	return s
}

// Advance is the cursor rule for one update: the high-water mark after
// seeing revision rev. A known revision raises the mark; NoRevision (an update
// whose revision is unknown, such as a synthetic repair delete) neither mints
// a position nor lowers one, and the mark never moves backward.
//
// The loop folds every update of a batch through Advance, including updates
// the plugin rejected or that were irrelevant to it: NATS delivers in revision
// order, so having seen the batch's highest revision means having seen every
// revision below it, and "nothing to apply" is covered by the cursor too.
// Without that a run of irrelevant keys pins the cursor and forces replay.
func Advance(high, rev Revision) Revision {
	if rev > high {
		return rev
	}
	return high
}

// CursorAfterBatch is the cursor a successful apply of a batch earns, given
// the cursor before it and the revisions of every update in the batch (in any
// order, unknown ones as NoRevision). The memo is kept. msgUnixNano is the
// server time of the batch's highest message; it replaces the cursor's time
// when the position moves, and is kept only if the cursor has the memo.
//
// Call it only after the plugin returned success for the batch.
func CursorAfterBatch(prev Cursor, revs []Revision, msgUnixNano int64) Cursor {
	high := prev.Rev
	for _, r := range revs {
		high = Advance(high, r)
	}
	if high != prev.Rev {
		prev.Rev = high
		prev.MsgUnixNano = msgUnixNano
	}
	if !prev.EvictionSeen {
		prev.MsgUnixNano = 0
	}
	return prev
}
