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
}

// Cursor binary encoding, version 1. Two forms, told apart by length:
//
//	compact  (8 bytes):  rev:u64be
//	extended (10 or 18): 0x01 flags:u8 rev:u64be [msg_unix_nano:i64be]
//
// The compact form is used exactly when there is no memo and no message time,
// so a plain cursor stays the bare revision. flags bit 0 = EvictionSeen,
// bit 1 = message time present; other bits must be zero (a new field means a
// new version byte, which old readers refuse rather than misread).
const (
	cursorCompactLen   = 8
	cursorExtVersion   = 0x01
	cursorFlagEviction = 1 << 0
	cursorFlagMsgTime  = 1 << 1
	cursorFlagsKnown   = cursorFlagEviction | cursorFlagMsgTime
)

// ErrCursorEncoding is wrapped by every Cursor decoding error.
var ErrCursorEncoding = errors.New("protocol: bad cursor encoding")

// AppendBinary appends the encoding of c to b.
func (c Cursor) AppendBinary(b []byte) ([]byte, error) {
	if !c.EvictionSeen && c.MsgUnixNano == 0 {
		return binary.BigEndian.AppendUint64(b, uint64(c.Rev)), nil
	}
	var flags byte
	if c.EvictionSeen {
		flags |= cursorFlagEviction
	}
	if c.MsgUnixNano != 0 {
		flags |= cursorFlagMsgTime
	}
	b = append(b, cursorExtVersion, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Rev))
	if flags&cursorFlagMsgTime != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(c.MsgUnixNano))
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
		want = 18
	}
	if len(b) != want {
		return fmt.Errorf("%w: flags %#x need %d bytes, got %d", ErrCursorEncoding, flags, want, len(b))
	}
	out := Cursor{
		Rev:          Revision(binary.BigEndian.Uint64(b[2:10])),
		EvictionSeen: flags&cursorFlagEviction != 0,
	}
	if want == 18 {
		out.MsgUnixNano = int64(binary.BigEndian.Uint64(b[10:18]))
		if out.MsgUnixNano == 0 {
			// The compact/extended choice is canonical; a zero time
			// flagged present would have two encodings.
			return fmt.Errorf("%w: message time flagged but zero", ErrCursorEncoding)
		}
	} else if !out.EvictionSeen {
		return fmt.Errorf("%w: extended form without memo or time", ErrCursorEncoding)
	}
	*c = out
	return nil
}

func (c Cursor) String() string {
	s := c.Rev.String()
	if c.EvictionSeen {
		s += "+evicted"
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
