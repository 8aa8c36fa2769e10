package fleet

import (
	"slices"

	"github.com/foldhost/foldhost/protocol"
)

// Snapshot is what this node knows of the fleet, as of its last step.
type Snapshot struct {
	Fleet, Node string
	// Live are the nodes units are placed on (alive, not leaving).
	Live []string
	// Advertise is each known node's HTTP address.
	Advertise map[string]string
	Units     []UnitStatus
	// Claims counts the claims this node won; Takeovers those of them
	// over an owner taken for dead.
	Claims, Takeovers uint64
}

// UnitStatus is one unit as this node sees it.
type UnitStatus struct {
	Unit protocol.Unit
	// Owner, Epoch and To are the claim register's (To: a hand-over's
	// target while the unit has no owner).
	Owner string
	Epoch protocol.Revision
	To    string
	// Standbys are the placement's.
	Standbys []string
	// Role is this node's.
	Role protocol.Role
	// Cursor and State are the owner's, as its record reports them (this
	// node's own when it owns the unit).
	Cursor uint64
	State  string
}

// Snapshot is what this node knows of the fleet now. Safe for concurrent
// use.
func (f *Fleet) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Live = slices.Clone(s.Live)
	s.Units = slices.Clone(s.Units)
	s.Claims, s.Takeovers = f.claimsWon.Load(), f.takeovers.Load()
	return s
}

// Unit is what this node knows of one unit now (false: not one of the
// fleet's units). Safe for concurrent use.
func (f *Fleet) Unit(u protocol.Unit) (UnitStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.snapIdx[u]
	if !ok {
		return UnitStatus{}, false
	}
	return f.snap.Units[i], true
}

// publish makes the snapshot of this step.
func (f *Fleet) publish(live []string) {
	s := Snapshot{Fleet: f.o.Name, Node: f.o.Node, Live: live, Advertise: map[string]string{f.o.Node: f.o.Advertise}}
	for name, n := range f.nodes {
		s.Advertise[name] = n.rec.Advertise
	}
	for _, spec := range f.o.Units {
		u := spec.Unit
		c := f.claims[u]
		st := UnitStatus{Unit: u, Owner: c.Owner, Epoch: c.Epoch, To: c.To, Standbys: protocol.Place(u, live, spec.Standbys).Standbys, Role: f.roles[u].role}
		switch {
		case c.Owner == f.o.Node && c.Incarnation == f.inc:
			st.Cursor, _, st.State = f.o.Runner.Progress(u)
		case f.nodes[c.Owner] != nil:
			r := f.nodes[c.Owner].rec.Units[u.String()]
			st.Cursor, st.State = r.Cursor, r.State
		}
		s.Units = append(s.Units, st)
	}
	idx := make(map[protocol.Unit]int, len(s.Units))
	for i, st := range s.Units {
		idx[st.Unit] = i
	}
	f.mu.Lock()
	f.snap, f.snapIdx = s, idx
	f.mu.Unlock()
}
