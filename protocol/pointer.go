package protocol

import (
	"fmt"
	"strings"
)

// PointerState is what an exporter observes at the artifact pointer
// (`<prefix>/<key>.manifest.json`) just before it tries to swap it: absent,
// present with a parseable rank (the cursor revision of the artifact it
// names) and the fleet epoch it was published under (0: outside a fleet),
// or present but corrupt. The zero value is absent.
//
// Text encoding (logs, status): "absent", "rank:<revision>",
// "rank:<revision>@<epoch>" (epoch > 0), "corrupt".
type PointerState struct {
	present bool
	corrupt bool
	rank    Revision
	epoch   Revision
}

// PointerAbsent is the state of an empty slot.
func PointerAbsent() PointerState { return PointerState{} }

// PointerAt is a present, parseable pointer naming an artifact at rank.
func PointerAt(rank Revision) PointerState { return PointerState{present: true, rank: rank} }

// PointerAtEpoch is a present, parseable pointer naming an artifact at
// rank, published by a fleet's owner at epoch.
func PointerAtEpoch(rank, epoch Revision) PointerState {
	return PointerState{present: true, rank: rank, epoch: epoch}
}

// PointerCorrupt is a present pointer whose rank cannot be read.
func PointerCorrupt() PointerState { return PointerState{present: true, corrupt: true} }

// Present reports whether an object exists at the pointer.
func (p PointerState) Present() bool { return p.present }

// Rank returns the pointer's rank and whether it is present and parseable.
func (p PointerState) Rank() (Revision, bool) {
	return p.rank, p.present && !p.corrupt
}

// Epoch is the fleet epoch the pointer was published under (0: outside a
// fleet, absent or corrupt).
func (p PointerState) Epoch() Revision {
	if !p.present || p.corrupt {
		return 0
	}
	return p.epoch
}

func (p PointerState) String() string {
	switch {
	case !p.present:
		return "absent"
	case p.corrupt:
		return "corrupt"
	case p.epoch > 0:
		return "rank:" + p.rank.String() + "@" + p.epoch.String()
	}
	return "rank:" + p.rank.String()
}

// MarshalText encodes p as String does.
func (p PointerState) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText decodes the String form.
func (p *PointerState) UnmarshalText(b []byte) error {
	s := string(b)
	switch {
	case s == "absent":
		*p = PointerAbsent()
	case s == "corrupt":
		*p = PointerCorrupt()
	case strings.HasPrefix(s, "rank:"):
		rank, epoch, hasEpoch := strings.Cut(s[len("rank:"):], "@")
		var r, e Revision
		if err := r.UnmarshalText([]byte(rank)); err != nil {
			return fmt.Errorf("protocol: pointer state %q: %w", s, err)
		}
		if hasEpoch {
			if err := e.UnmarshalText([]byte(epoch)); err != nil || e == 0 {
				return fmt.Errorf("protocol: pointer state %q: the epoch after @ must be a revision above 0", s)
			}
		}
		*p = PointerAtEpoch(r, e)
	default:
		return fmt.Errorf("protocol: pointer state %q: want absent, corrupt, rank:N or rank:N@E", s)
	}
	return nil
}

// PointerPublishAllowed is the monotone pointer guard: an exporter may swap
// the pointer to an artifact of rank candidate iff the slot is absent, the
// pointer is corrupt (replaceable, never a wedge), or candidate is at or above
// the current rank. It refuses exactly when the current pointer is parseable
// and strictly newer; the exporter then reports "superseded by newer", a
// normal outcome. Together with a compare-and-swap write (no torn read between
// observe and write) the published rank never regresses.
func PointerPublishAllowed(current PointerState, candidate Revision) bool {
	rank, ok := current.Rank()
	return !ok || candidate >= rank
}

// PointerSwapAllowed is the pointer guard of an exporter in a fleet, at
// epoch (0: outside a fleet): the rank rule (PointerPublishAllowed), and
// the fence: a pointer published under a newer owner's epoch refuses an
// older owner's swap, as a claim mark does (FenceMark: the pointer is the
// unit's mark in the artifact store). With the conditional write against
// the pointer it read, the store refuses a stale owner's swap once a newer
// owner has written its epoch there (RaisePointerEpoch's job at a claim).
// Epoch 0 is not fenced and fences nothing: an exporter outside a fleet.
func PointerSwapAllowed(current PointerState, rank, epoch Revision) bool {
	if !PointerPublishAllowed(current, rank) {
		return false
	}
	return epoch == 0 || FenceMark(current.Epoch(), epoch) != MarkFenced
}

// Payload describes one stored artifact payload as the pruner sees it.
type Payload struct {
	Rank            Revision // cursor revision of the payload's manifest
	RankKnown       bool     // false when the payload's rank could not be read
	IsPointerTarget bool     // the current pointer names this payload
	AgedOut         bool     // older than the grace period
}

// PayloadPrunable is the prune guard: a payload may be deleted only when it is
// not the pointer's target, it has aged past the grace period, its rank is
// known, and that rank is strictly below the pointer's parseable rank.
//
// Strictly below, not at-or-below: PointerPublishAllowed admits a candidate
// equal to the pointer's rank, so a payload at the pointer's rank can still
// become the target (two exporters at the same cursor). Anything strictly
// below can never be published again because the pointer is monotone, so
// deleting it can never leave the pointer dangling. An absent or corrupt
// pointer prunes nothing.
func PayloadPrunable(p Payload, pointer PointerState) bool {
	rank, ok := pointer.Rank()
	return ok && !p.IsPointerTarget && p.AgedOut && p.RankKnown && p.Rank < rank
}
