package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// takeovers measures Takeover at ttl over kills kills: a fleet of
// FleetNodes nodes, each connected through a cutProxy, folding one fold
// with one standby.
func (b *bench) takeovers(ctx context.Context, plugin string, ttl FleetTTL, kills int) (t *Takeover, err error) {
	fl := b.newFleet(fleetSpec{nodes: FleetNodes, folds: 1, plugin: plugin, standbys: 1, ttl: ttl, proxied: true})
	defer func() { err = errors.Join(err, fl.close()) }()
	what := fmt.Sprintf("fleet: takeover at node_ttl %v, heartbeat %v", ttl.NodeTTL, ttl.Heartbeat)
	b.prog.Status(what + ": starting the fleet")
	head := b.head
	owners, err := fl.startPlaced(ctx, head)
	if err != nil {
		return nil, err
	}
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return nil, err
	}
	const fold = "f0"
	t = &Takeover{NodeTTLSeconds: ttl.NodeTTL.Seconds(), HeartbeatSeconds: ttl.Heartbeat.Seconds(), Kills: kills}
	for k := range kills {
		b.prog.Update(int64(k), int64(kills), what)
		victim := owners[fold]
		_, epoch, _, _ := victim.copyOf(fold)
		var next *fleetNode
		var took time.Duration
		pprof.Do(ctx, pprof.Labels("variant", "fleet takeover"), func(ctx context.Context) {
			next, took, err = fl.kill(ctx, victim, fold, epoch)
		})
		if err != nil {
			return nil, fmt.Errorf("kill %d (%s, the owner at epoch %d): %w", k+1, victim.name, epoch, err)
		}
		t.Seconds = append(t.Seconds, took.Seconds())
		// The new owner follows: a write after the kill is folded there.
		rev, err := kv.Put(ctx, "route.fleetprobe", []byte(`{"upstreams":[{"addr":"10.8.8.8:80"}]}`))
		if err != nil {
			return nil, err
		}
		if err := waitFolded(ctx, next.h.Fold(fold), rev); err != nil {
			return nil, fmt.Errorf("after kill %d, the new owner %s: %w", k+1, next.name, err)
		}
		head = rev
		// A new node takes the killed one's place; the fleet settles (a
		// hand-over to it, when the placement ranks it first).
		name := fmt.Sprintf("n%d", FleetNodes+k+1)
		n, err := fl.start(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("starting %s in place of %s: %w", name, victim.name, err)
		}
		fl.nodes[slices.Index(fl.nodes, victim)] = n
		n.run(ctx)
		if owners, err = fl.waitPlaced(ctx, head); err != nil {
			return nil, fmt.Errorf("after kill %d: %w", k+1, err)
		}
	}
	b.prog.End()
	t.P50Seconds, t.P99Seconds = quantile(t.Seconds, 0.5), quantile(t.Seconds, 0.99)
	t.MaxSeconds = slices.Max(t.Seconds)
	t.P50VsNodeTTL = t.P50Seconds / t.NodeTTLSeconds
	return t, nil
}

// kill cuts victim's NATS connection, and waits until another node owns
// fold under an epoch above epoch and follows; it returns that node and
// the time from the cut. The victim is then stopped beside what follows
// (close waits for it; its Run's error is the lost connection's: ignored):
// a node cut off from NATS takes seconds to stop.
func (fl *benchFleet) kill(ctx context.Context, victim *fleetNode, fold string, epoch protocol.Revision) (*fleetNode, time.Duration, error) {
	t0 := time.Now()
	victim.proxy.cut()
	deadline := t0.Add(5*fl.spec.ttl.NodeTTL + time.Minute)
	var next *fleetNode
	err := waitUntil(ctx, func() (bool, error) {
		for _, n := range fl.nodes {
			if n == victim {
				continue
			}
			if role, e, _, st := n.copyOf(fold); role == roleOwner && e > epoch && st == httpapi.StateFollowing {
				next = n
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("no other node owned the fold within %v", time.Since(t0).Round(time.Second))
		}
		return false, nil
	})
	took := time.Since(t0)
	fl.stopping.Go(func() { _ = victim.stop() })
	return next, took, err
}
