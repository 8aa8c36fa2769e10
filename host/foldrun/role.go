package foldrun

import (
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// A fold in a fleet runs on this node as its unit's owner or as a
// standby (protocol.RoleOf); a host without a fleet owns every fold. A
// standby folds as the owner does (its views, its outbox), but publishes
// no effect (its publisher drops what the owner's fence shows published)
// and exports nothing: the owner does, under its epoch.

// SetRole makes the fold its unit's owner at epoch, or a standby (any
// other role: the host stops a fold that has none). Safe for concurrent
// use; it takes effect at once: a publisher waiting to publish looks
// again.
func (f *Fold) SetRole(role protocol.Role, epoch protocol.Revision) {
	f.epoch.Store(uint64(epoch))
	f.role.Store(int32(role))
	f.fx.Wake()
	select {
	case f.roleChanged <- struct{}{}:
	default:
	}
}

// Role is the fold's role and its epoch (the owner's).
func (f *Fold) Role() (protocol.Role, protocol.Revision) {
	return protocol.Role(f.role.Load()), protocol.Revision(f.epoch.Load())
}

// owner reports whether the fold publishes and exports: it owns its unit.
func (f *Fold) owner() bool { return protocol.Role(f.role.Load()) == protocol.RoleOwner }

// Progress is how far the fold is, for a fleet's hand-overs: its cursor,
// whether it caught up (following, ready), and its state.
func (f *Fold) Progress() (cursor uint64, ready bool, state string) {
	st := f.state.Load()
	return uint64(f.store.Cursor().Rev), f.ready.Load() && st == httpapi.StateFollowing, string(st)
}

// MarkElsewhere records that the fold does not run on this node: a
// fleet placed it on others (its state says so; its store stays open,
// frozen at its cursor).
func (f *Fold) MarkElsewhere() { f.state.Store(httpapi.StateElsewhere) }
