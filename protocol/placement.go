package protocol

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// Placement of units over the nodes of a fleet (RATIONALE.md, "The fleet:
// placement by rendezvous, one claim register per unit, the server
// fences"). A unit is a fold's partition. Every node computes the same
// placement from the same set of live nodes (rendezvous hashing: no
// coordinator, and a node joining or leaving moves only its own share),
// and a unit changes owner only by a compare-and-set of its claim
// register, whose revision is the owner's epoch: two claims from one read
// cannot both succeed, and an epoch never repeats or goes back. Liveness
// (who is alive) is an input, never a safety argument: a node wrongly
// believed dead loses its unit to a claim, and the server refuses what it
// still does under its old epoch.

// Unit names a fold's partition: what a fleet places on its nodes.
type Unit struct {
	Fold      string
	Partition int
}

func (u Unit) String() string { return u.Fold + "/" + strconv.Itoa(u.Partition) }

// weight is node's rendezvous weight for u: murmur3's 64-bit finalizer
// over the FNV-1a 64 hashes of the unit (fold and partition, each ended by
// a zero byte) and of the node, combined. FNV alone, over the unit and the
// node concatenated, spreads badly (the node's few last bytes barely move
// the high bits: one of three nodes got half of fifty folds); the
// finalizer mixes every bit into every other.
func weight(u Unit, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(u.Fold))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(u.Partition)))
	h.Write([]byte{0})
	hu := h.Sum64()
	h.Reset()
	h.Write([]byte(node))
	return fmix64(hu ^ fmix64(h.Sum64()))
}

// fmix64 is murmur3's 64-bit finalizer.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// RankNodes orders nodes for u, best first, by rendezvous hashing (highest
// random weight; ties, which take a 64-bit collision, by name). The order
// of the input does not matter, duplicates count once, and removing a
// node keeps the others' order: the unit's next owner after its owner is
// its first standby.
func RankNodes(u Unit, nodes []string) []string {
	out := slices.Clone(nodes)
	slices.Sort(out)
	out = slices.Compact(out)
	slices.SortStableFunc(out, func(a, b string) int {
		if c := cmp.Compare(weight(u, b), weight(u, a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// Placement is where a unit runs: its owner, and the nodes that keep warm
// copies (standbys) to take it over.
type Placement struct {
	Owner    string
	Standbys []string
}

// Place is u's placement over the live nodes: the first of RankNodes owns
// it, the next standbys keep copies (fewer when fewer nodes live). No
// live node: no owner.
func Place(u Unit, live []string, standbys int) Placement {
	r := RankNodes(u, live)
	if len(r) == 0 {
		return Placement{}
	}
	n := min(max(standbys, 0), len(r)-1)
	return Placement{Owner: r[0], Standbys: r[1 : 1+n]}
}

// Claim is the value of a unit's claim register: its owner (a node's name
// and the incarnation of the process that claimed: a node restarted under
// the same name is another owner), and, while its owner hands it over,
// the node expected to claim it next. Epoch is the register's revision (a
// JetStream sequence: never repeated, never lower for a later write):
// only claims and releases write the register, so a change of epoch is a
// change of owner (a release included).
type Claim struct {
	Owner       string   // "": none
	Incarnation string   // the owner's process
	To          string   // with no Owner: the node a hand-over named ("": none)
	Epoch       Revision // the register's revision (0: never written)
}

// UnitView is what a node knows of one unit when it decides: the claim
// register as it last read it, who it holds alive, and the readiness its
// decision needs. The view may be stale or wrong about liveness: a
// decision on it is a compare-and-set from Claim.Epoch, which fails when
// the register moved since.
type UnitView struct {
	Unit        Unit
	Me          string
	Incarnation string // Me's process
	Claim       Claim
	Live        []string // the nodes held alive; Me among them unless Leaving
	// OwnerLive: Claim's owner is held alive in the incarnation that
	// claimed (a node restarted since is alive, its claim is not).
	OwnerLive bool
	Standbys  int // standbys per unit (the fleet's setting)
	// TargetReady: for an owner, whether the node it would hand the unit
	// to (the placement's owner) has caught up (its copy is within the
	// acceptable lag of the head).
	TargetReady bool
	// Leaving: Me is shutting down and hands its units over.
	Leaving bool
}

// Move is what a node does to a unit's claim register.
type Move uint8

const (
	// MoveNone: leave the register as it is.
	MoveNone Move = iota
	// MoveClaim: compare-and-set the register from Claim.Epoch to
	// {Owner: Me}; the write's revision is Me's epoch.
	MoveClaim
	// MoveHandOver: the owner compare-and-sets the register from
	// Claim.Epoch to {To: Decision.To} (or to no one, To ""), and stops
	// acting as the owner from the moment it asks: it publishes and
	// exports nothing more under its epoch.
	MoveHandOver
)

func (m Move) String() string {
	switch m {
	case MoveNone:
		return "none"
	case MoveClaim:
		return "claim"
	case MoveHandOver:
		return "hand-over"
	}
	return "Move(" + strconv.Itoa(int(m)) + ")"
}

// Decision is a node's move on one unit.
type Decision struct {
	Move Move
	To   string // MoveHandOver: the node to hand the unit to ("": none)
}

// Decide is what v.Me does to v.Unit's claim register:
//
//   - the owner (Me, in this incarnation) hands the unit over to the placement's owner once that
//     node has caught up (a node that joined, or one back from a pause),
//     and, leaving, at once to the placement's owner among the others (its
//     first standby), or to no one when no other node lives;
//   - with no owner, the node a hand-over named claims; when it names no
//     one, or a node not held alive, the placement's owner claims;
//   - with an owner not held alive, the placement's owner among the live
//     nodes claims (the first standby: rendezvous order is kept when the
//     owner drops out); a claim of Me's name by an earlier incarnation is
//     such an owner: a restarted node claims anew, under a new epoch, so
//     what its earlier process still does is fenced out;
//   - with a live owner, nobody moves.
//
// A leaving node claims nothing. Two nodes that both decide to claim from
// one read race on the compare-and-set: one wins, the other reads the
// register again and sees a live owner.
func Decide(v UnitView) Decision {
	c := v.Claim
	if owns(v) {
		if v.Leaving {
			return Decision{Move: MoveHandOver, To: Place(v.Unit, without(v.Live, v.Me), v.Standbys).Owner}
		}
		if p := Place(v.Unit, v.Live, v.Standbys); p.Owner != "" && p.Owner != v.Me && v.TargetReady {
			return Decision{Move: MoveHandOver, To: p.Owner}
		}
		return Decision{}
	}
	if v.Leaving || (c.Owner != "" && v.OwnerLive) {
		return Decision{}
	}
	if c.Owner == "" && c.To != "" && slices.Contains(v.Live, c.To) {
		if c.To == v.Me {
			return Decision{Move: MoveClaim}
		}
		return Decision{}
	}
	if Place(v.Unit, v.Live, v.Standbys).Owner == v.Me {
		return Decision{Move: MoveClaim}
	}
	return Decision{}
}

// Mark is what an owner does on reading the claim mark, the record of
// the newest owner's epoch in the stream its effects go to, before it
// publishes under its epoch (its batches expect that mark: the server
// refuses them once a newer owner wrote its own).
type Mark uint8

const (
	// MarkWrite: the mark is older than the owner's epoch: write the
	// owner's, conditioned on the mark just read.
	MarkWrite Mark = iota
	// MarkHeld: the mark is the owner's epoch already (its own write, or
	// its earlier process's: a node only acts under an epoch it claimed).
	MarkHeld
	// MarkFenced: a newer owner marked: this owner stops acting as one.
	MarkFenced
)

// FenceMark is an owner's move at epoch mine on reading the mark at
// current (0: none). A mark never goes back: an owner never writes over a
// newer one.
func FenceMark(current, mine Revision) Mark {
	switch {
	case current < mine:
		return MarkWrite
	case current == mine:
		return MarkHeld
	}
	return MarkFenced
}

// Role is how a node folds a unit.
type Role uint8

const (
	// RoleNone: the node does not fold the unit.
	RoleNone Role = iota
	// RoleStandby: the node folds the unit read-only: it publishes no
	// effects and exports nothing, and is ready to take it over.
	RoleStandby
	// RoleOwner: the node folds the unit, publishes its effects and
	// exports it, under its epoch.
	RoleOwner
)

func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleStandby:
		return "standby"
	case RoleOwner:
		return "owner"
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// RoleOf is how v.Me folds v.Unit: as the owner when the register names
// it; as a standby when the placement makes it the owner (it warms up to
// claim) or one of the standbys, or a hand-over names it; else not at
// all. A leaving node is the owner of what it still owns, nothing else.
func RoleOf(v UnitView) Role {
	if owns(v) {
		return RoleOwner
	}
	if v.Leaving {
		return RoleNone
	}
	p := Place(v.Unit, v.Live, v.Standbys)
	if p.Owner == v.Me || slices.Contains(p.Standbys, v.Me) || (v.Claim.Owner == "" && v.Claim.To == v.Me) {
		return RoleStandby
	}
	return RoleNone
}

// owns reports whether the register names v.Me, in this incarnation.
func owns(v UnitView) bool { return v.Claim.Owner == v.Me && v.Claim.Incarnation == v.Incarnation }

// without is nodes less node.
func without(nodes []string, node string) []string {
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == node })
}
