package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/protocol"
)

// Run keeps this node in the fleet until ctx ends or Leave completes: it
// watches the bucket, beats every Heartbeat, and decides every unit at
// each change it sees and each beat, telling the Runner its roles. A
// process that stops without Leave (killed, or its ctx ended) leaves its
// record and claims behind: the others take its units over once its
// record stayed unchanged for a NodeTTL. Run returns ErrSuperseded when
// another process took the node's name (it then runs no unit), nil when
// ctx ended or it left.
func (f *Fleet) Run(ctx context.Context) error {
	defer f.doneOnce.Do(func() { close(f.done) })
	w, err := f.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("fleet %s: watching the bucket: %w", f.o.Name, err)
	}
	defer func() {
		if w != nil { // nil when a rewatch failed
			_ = w.Stop()
		}
	}()
	tick := time.NewTicker(f.o.Heartbeat)
	defer tick.Stop()
	synced := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.leaveReq:
			f.leaving = true
			f.log.Info("leaving the fleet: handing this node's units over")
			if err := f.beat(ctx); err != nil {
				return f.stop(err)
			}
			if f.step(ctx) {
				return f.leave(ctx)
			}
		case e, ok := <-w.Updates():
			if !ok {
				// The watcher ended (the bucket deleted, the connection
				// closed): watch again, from what the bucket holds now.
				if w, err = f.rewatch(ctx); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("fleet %s: watching the bucket again: %w", f.o.Name, err)
				}
				synced = false
				continue
			}
			if e == nil {
				synced = true
			} else if err := f.apply(e); err != nil {
				return f.stop(err)
			}
			if synced && len(w.Updates()) == 0 && f.step(ctx) && f.leaving {
				return f.leave(ctx)
			}
		case <-tick.C:
			if err := f.beat(ctx); err != nil {
				if errors.Is(err, ErrSuperseded) {
					return f.stop(err)
				}
				if !errors.Is(err, errRecordGone) {
					f.log.Warn("fleet heartbeat failed; the others take this node for dead after node_ttl", "err", err, "node_ttl", f.o.NodeTTL.String())
				}
				if bucketGone(err) || errors.Is(err, errRecordGone) {
					// Deleted: made again (above the floor), and watched
					// from scratch (a watch of the deleted bucket may
					// never end, nor show the new one's).
					_ = w.Stop()
					if w, err = f.rewatch(ctx); err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return fmt.Errorf("fleet %s: watching the bucket again: %w", f.o.Name, err)
					}
					synced = false
					continue
				}
			}
			if synced && f.step(ctx) && f.leaving {
				return f.leave(ctx)
			}
		}
	}
}

// bucketGone reports whether err says the fleet's bucket does not exist
// (its stream deleted: no stream answers its subjects).
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrStreamNotFound) // the KV watcher's (nats.go's legacy API)
}

// rewatch watches the bucket again, making it again (above the floor)
// when it was deleted, and forgets what the old watch showed: the new
// one delivers what the bucket holds now (a bucket made again holds none
// of the old claims, whose epochs must not shadow the new ones).
func (f *Fleet) rewatch(ctx context.Context) (jetstream.KeyWatcher, error) {
	for attempt := 1; ; attempt++ {
		w, err := f.kv.WatchAll(ctx)
		if err == nil {
			f.nodes, f.claims = map[string]*seenNode{}, map[protocol.Unit]protocol.Claim{}
			return w, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if bucketGone(err) {
			kv, oerr := f.openBucket(ctx)
			if oerr == nil {
				f.kv = kv
				continue
			}
			err = oerr
		}
		if attempt%10 == 1 {
			f.log.Warn("cannot watch the fleet's bucket; retrying", "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Duration(attempt)*f.o.Heartbeat, f.o.NodeTTL)):
		}
	}
}

// stop drops every role (another process runs as this node, or the
// fleet failed) and returns err.
func (f *Fleet) stop(err error) error {
	f.log.Error("this node stops acting in the fleet: it folds no unit", "err", err)
	for _, spec := range f.o.Units {
		if p, ok := f.roles[spec.Unit]; ok && p.role != protocol.RoleNone {
			f.roles[spec.Unit] = placed{}
			f.o.Runner.SetRole(spec.Unit, protocol.RoleNone, 0)
		}
	}
	return err
}

// leave deletes this node's record once it owns nothing, and reports
// that it left.
func (f *Fleet) leave(ctx context.Context) error {
	rctx, cancel := f.rctx(ctx)
	defer cancel()
	if err := f.kv.Delete(rctx, nodeKey(f.o.Node), jetstream.LastRevision(f.myRev)); err != nil {
		f.log.Warn("leaving the fleet: deleting this node's record failed; the others see it gone after node_ttl", "err", err)
	}
	f.log.Info("left the fleet: every unit this node owned is handed over")
	close(f.left)
	return nil
}

// Leave hands this node's units over (each to its first standby) and
// takes the node out of the fleet, then Run returns; it waits until that
// is done or ctx ends (a unit not handed over by then is taken over by
// the others after a NodeTTL, like a killed node's).
func (f *Fleet) Leave(ctx context.Context) error {
	select {
	case f.leaveReq <- struct{}{}:
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-f.left:
		return nil
	case <-f.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fleet %s: leaving: %w (the units not handed over are taken over after node_ttl)", f.o.Name, ctx.Err())
	}
}

// apply records an entry of the bucket: a node's record, or a claim.
func (f *Fleet) apply(e jetstream.KeyValueEntry) error {
	key := e.Key()
	deleted := e.Operation() != jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(key, nodePrefix):
		name := strings.TrimPrefix(key, nodePrefix)
		if name == f.o.Node {
			// Another incarnation's record written after this one's is a
			// second process under this name. One from before it (an
			// earlier process of this node) is history a watch can still
			// show: a consumer on a replica that is catching up (a server
			// restarted under a leader change) delivered one.
			var rec nodeRecord
			if !deleted && json.Unmarshal(e.Value(), &rec) == nil && rec.Incarnation != f.inc {
				if e.Revision() > f.myRev {
					return fmt.Errorf("%w (%s, incarnation %s, at revision %d after this process's %d)", ErrSuperseded, f.o.Node, rec.Incarnation, e.Revision(), f.myRev)
				}
				f.log.Debug("an earlier process's record of this node, shown late by the watch: ignored",
					"incarnation", rec.Incarnation, "revision", protocol.Revision(e.Revision()), "own_revision", protocol.Revision(f.myRev))
			}
			return nil
		}
		if deleted {
			delete(f.nodes, name)
			return nil
		}
		var rec nodeRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			f.log.Warn("a node record does not parse; that node counts as dead", "node", name, "err", err)
			delete(f.nodes, name)
			return nil
		}
		n := f.nodes[name]
		if n == nil {
			n = &seenNode{}
			f.nodes[name] = n
		}
		if n.rev != e.Revision() {
			n.rev, n.changed = e.Revision(), f.o.Clock()
		}
		n.rec = rec
	case strings.HasPrefix(key, claimPrefix):
		u, ok := unitOfClaimKey(key)
		if !ok {
			return nil
		}
		c := protocol.Claim{Epoch: protocol.Revision(e.Revision())}
		if !deleted {
			var err error
			if c, err = decodeClaim(e.Value(), e.Revision()); err != nil {
				f.log.Warn("a claim register does not parse; it counts as unowned (the next claim replaces it)", "unit", u.String(), "err", err)
			}
		}
		if old, ok := f.claims[u]; !ok || old.Epoch <= c.Epoch {
			f.claims[u] = c
		}
	}
	return nil
}

// alive reports whether node, in incarnation inc ("": any), beats: its
// record changed within a NodeTTL of this node's clock.
func (f *Fleet) alive(node, inc string, now time.Time) bool {
	if node == f.o.Node {
		return inc == "" || inc == f.inc
	}
	n := f.nodes[node]
	return n != nil && (inc == "" || n.rec.Incarnation == inc) && now.Sub(n.changed) < f.o.NodeTTL
}

// liveNodes are the nodes units are placed on: alive and not leaving.
func (f *Fleet) liveNodes(now time.Time) []string {
	var live []string
	if !f.leaving {
		live = append(live, f.o.Node)
	}
	for name, n := range f.nodes {
		if !n.rec.Leaving && f.alive(name, "", now) {
			live = append(live, name)
		}
	}
	slices.Sort(live)
	return live
}

// ready reports whether node's copy of u has caught up.
func (f *Fleet) ready(node string, u protocol.Unit) bool {
	if node == f.o.Node {
		if p := f.roles[u]; p.role == protocol.RoleNone {
			return false
		}
		_, ready, _ := f.o.Runner.Progress(u)
		return ready
	}
	n := f.nodes[node]
	return n != nil && n.rec.Units[u.String()].Ready
}

// step decides every unit on what this node knows now, writes what it
// decides, and tells the Runner each change of role. It reports whether
// this node owns no unit (a leaving node is done).
func (f *Fleet) step(ctx context.Context) (ownsNone bool) {
	now := f.o.Clock()
	live := f.liveNodes(now)
	ownsNone = true
	for _, spec := range f.o.Units {
		u := spec.Unit
		v := protocol.UnitView{Unit: u, Me: f.o.Node, Incarnation: f.inc, Claim: f.claims[u], Live: live,
			Standbys: spec.Standbys, Leaving: f.leaving}
		v.OwnerLive = v.Claim.Owner != "" && f.alive(v.Claim.Owner, v.Claim.Incarnation, now)
		if t := protocol.Place(u, live, spec.Standbys).Owner; t != "" {
			v.TargetReady = f.ready(t, u)
		}
		if d := protocol.Decide(v); d.Move != protocol.MoveNone {
			if c, ok := f.write(ctx, u, v.Claim, d); ok {
				f.claims[u], v.Claim = c, c
			}
		}
		role := protocol.RoleOf(v)
		var epoch protocol.Revision
		if role == protocol.RoleOwner {
			epoch = v.Claim.Epoch
			ownsNone = false
		}
		if p, ok := f.roles[u]; !ok || p != (placed{role, epoch}) {
			f.roles[u] = placed{role, epoch}
			f.log.Info("unit role", "unit", u.String(), "role", role.String(), "epoch", uint64(epoch), "was", p.role.String())
			f.o.Runner.SetRole(u, role, epoch)
		}
	}
	f.publish(live)
	return ownsNone
}

// write applies d to u's claim register, conditioned on c (the register
// as this node last saw it). A register that moved meanwhile is read
// again, and nothing is written: the next step decides on it.
func (f *Fleet) write(ctx context.Context, u protocol.Unit, c protocol.Claim, d protocol.Decision) (protocol.Claim, bool) {
	next := protocol.Claim{Owner: f.o.Node, Incarnation: f.inc}
	if d.Move == protocol.MoveHandOver {
		next = protocol.Claim{To: d.To}
	}
	rctx, cancel := f.rctx(ctx)
	defer cancel()
	var rev uint64
	var err error
	if c.Epoch == 0 {
		rev, err = f.kv.Create(rctx, claimKey(u), encodeClaim(next))
	} else {
		rev, err = f.kv.Update(rctx, claimKey(u), encodeClaim(next), uint64(c.Epoch))
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if e, gerr := f.kv.Get(rctx, claimKey(u)); gerr == nil {
				_ = f.apply(e)
			}
			f.log.Debug("the claim register moved before this node's write", "unit", u.String(), "move", d.Move.String())
		} else if ctx.Err() == nil {
			f.log.Warn("writing a claim register failed; the next step decides again", "unit", u.String(), "move", d.Move.String(), "err", err)
		}
		return c, false
	}
	next.Epoch = protocol.Revision(rev)
	switch d.Move {
	case protocol.MoveClaim:
		f.log.Info("claimed a unit", "unit", u.String(), "epoch", rev, "was_owner", c.Owner, "was_epoch", uint64(c.Epoch))
		f.claimsWon.Add(1)
		if c.Owner != "" {
			f.takeovers.Add(1) // over an owner taken for dead (or an earlier incarnation)
		}
	case protocol.MoveHandOver:
		f.log.Info("handed a unit over", "unit", u.String(), "to", d.To, "epoch", rev)
	}
	return next, true
}
