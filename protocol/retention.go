package protocol

import (
	"strconv"
	"time"
)

// Retention is what a bucket's stream can evict, read live from the stream
// (config at bucket creation is not authoritative: operators edit streams).
// Revisions older than First are gone; what matters for repair is whether
// retention can evict a key's *current* value, not just superseded history.
type Retention struct {
	Window

	// MaxAge > 0: messages older than MaxAge are evicted, current values
	// included. 0 means no age limit.
	MaxAge time.Duration

	// PerMessageTTL: the stream allows per-message TTLs, so any current
	// value may expire on its own schedule.
	PerMessageTTL bool

	// DiscardOldLimit: the stream discards old messages when a stream-wide
	// limit (max bytes or max messages) is reached, so a current value can be
	// evicted by unrelated writes. The per-subject history limit of a KV
	// bucket does not count: it only evicts superseded revisions.
	DiscardOldLimit bool
}

// EvictsCurrentValues reports whether retention can remove a key's current
// value without anyone deleting it.
func (r Retention) EvictsCurrentValues() bool {
	return r.MaxAge > 0 || r.PerMessageTTL || r.DiscardOldLimit
}

// HasEvicted reports whether this reading shows retention may have evicted a
// current value: eviction is in force and the log no longer starts at
// revision 1. It is conservative: the first retained revision also rises when
// only superseded messages went, and NATS cannot tell the two apart, so the
// answer errs towards "evicted" (a restore where a key-listing diff would have
// done), never the other way. The first time a fold reads this as true it
// sets its cursor's EvictionSeen memo, and never clears it.
func (r Retention) HasEvicted() bool {
	return r.EvictsCurrentValues() && r.First > 1
}

// ListingIsTruth reports whether "the bucket does not list key K" means "K was
// deleted", which is what a key-listing diff assumes. True when retention
// never evicts current values, or can but has evicted nothing yet (first
// retained revision <= 1); never once the fold has seen eviction
// (evictionSeen, the cursor's memo): a key that aged out is missing from the
// listing forever after, even when eviction is later turned off.
func ListingIsTruth(evictsCurrentValues bool, first Revision, evictionSeen bool) bool {
	if evictionSeen {
		return false
	}
	return !evictsCurrentValues || first <= 1
}

// Truth is a three-valued answer to "is the key listing the truth?".
type Truth uint8

const (
	// TruthUnknown: retention could not be read.
	TruthUnknown Truth = iota
	// TruthYes: not listed means deleted.
	TruthYes
	// TruthNo: not listed may mean aged out.
	TruthNo
)

func (t Truth) String() string {
	switch t {
	case TruthUnknown:
		return "unknown"
	case TruthYes:
		return "yes"
	case TruthNo:
		return "no"
	}
	return "Truth(" + strconv.Itoa(int(t)) + ")"
}

// ListingTruth applies ListingIsTruth to a retention reading; r == nil means
// retention could not be read.
func ListingTruth(r *Retention, evictionSeen bool) Truth {
	if r == nil {
		if evictionSeen {
			return TruthNo // the memo answers without a reading
		}
		return TruthUnknown
	}
	if ListingIsTruth(r.EvictsCurrentValues(), r.First, evictionSeen) {
		return TruthYes
	}
	return TruthNo
}

// GapHoldsNoEviction reports whether a cursor that looks expired (retention's
// first revision is past cursor+1) may still resume from the first retained
// revision because every missing message was superseded, not evicted.
//
// That holds when age is the bucket's only way to evict a current value
// (MaxAge set, no per-message TTLs, no discard-old limit) and the cursor's
// message is at most half of MaxAge old at serverNowUnixNano (the server's
// clock, not ours): every later message is younger still, so none aged out,
// and each missing one was overwritten by a later write the resume delivers.
// Half, not all, of MaxAge is headroom for clock steps and leader changes; a
// message stamped later than the server's now by more than that headroom
// means the clocks disagree beyond it, and is refused. A time that is unknown
// or not positive (0 from an old server without a timestamp, a corrupt
// cursor) never qualifies.
//
// Assumes the stream did not switch from a discard-old limit to age-only
// while the fold was down.
func GapHoldsNoEviction(r Retention, cursorMsgUnixNano, serverNowUnixNano int64) bool {
	if r.MaxAge <= 0 || r.PerMessageTTL || r.DiscardOldLimit {
		return false
	}
	if cursorMsgUnixNano <= 0 || serverNowUnixNano <= 0 {
		return false
	}
	half := int64(r.MaxAge / 2)
	// Both times are positive, so neither difference can overflow.
	if cursorMsgUnixNano > serverNowUnixNano {
		return cursorMsgUnixNano-serverNowUnixNano <= half
	}
	return serverNowUnixNano-cursorMsgUnixNano <= half
}
