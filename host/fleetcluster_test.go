package host_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetStreamLeaderKilledMidClaim: a fleet of two nodes on a
// 3-server NATS cluster, its bucket and the folds' buckets R3. Three
// times, a node leaves (its folds handed over: claims by compare-and-set
// on the fleet's bucket) and, as the claims go out, the fleet bucket's
// stream leader is shut down. The fleet settles with every fold owned
// once, by the placement's owner over the live node, under an epoch above
// the one before; the server and the node come back and the fleet settles
// again, epochs still rising. Every fold then folds a write on its owner.
func TestFleetStreamLeaderKilledMidClaim(t *testing.T) {
	c := hosttest.StartCluster(t, 3)
	js, err := jetstream.New(hosttest.Conn(t, c.URLs()))
	if err != nil {
		t.Fatal(err)
	}
	var kvs []jetstream.KeyValue
	for i := range 4 {
		kvs = append(kvs, hosttest.Retry(t, "create an R3 bucket", func(ctx context.Context) (jetstream.KeyValue, error) {
			return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("f%d", i), History: 4, Replicas: 3})
		}))
	}
	dir := t.TempDir()
	start := func(name string) *hosttest.Running {
		var folds []host.FoldOptions
		for i := range 4 {
			folds = append(folds, host.FoldOptions{Name: fmt.Sprintf("f%d", i), DataDir: filepath.Join(dir, name, fmt.Sprintf("f%d", i))})
		}
		return hosttest.StartHost(t, host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: c.URLs(), Name: name}},
			Admin: host.AdminOptions{Node: name},
			Fleet: host.FleetOptions{Name: "t", Replicas: 3, Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Folds: folds,
		})
	}
	leaderOf := func() string {
		return hosttest.Retry(t, "the fleet stream's leader", func(ctx context.Context) (string, error) {
			s, err := js.Stream(ctx, "KV_"+fleet.BucketPrefix+"t")
			if err != nil {
				return "", err
			}
			if cl := s.CachedInfo().Cluster; cl != nil && cl.Leader != "" {
				return cl.Leader, nil
			}
			return "", errors.New("no leader yet")
		})
	}
	hs := map[string]*hosttest.Running{"n1": start("n1"), "n2": start("n2")}
	epochs := map[string]protocol.Revision{}
	owners := settleChanged(t, hs, epochs)
	for round := range 3 {
		victim := owners[fmt.Sprintf("f%d", round)]
		leader := leaderOf()
		left := make(chan error, 1)
		go func() { left <- hs[victim].Stop(t) }()
		c.Stop(c.Index(leader)) // as the hand-over's claims go out
		if err := <-left; err != nil {
			t.Logf("round %d: the leaving node %s: %v", round, victim, err)
		}
		delete(hs, victim)
		owners = settleChanged(t, hs, epochs)
		c.Start(c.Index(leader))
		hs[victim] = start(victim)
		owners = settleChanged(t, hs, epochs)
		t.Logf("round %d: %s left while %s, the stream leader, was shut down; epochs now %v", round, victim, leader, epochs)
	}
	for i, kv := range kvs {
		rev := hosttest.Retry(t, "put", func(ctx context.Context) (uint64, error) { return kv.Put(ctx, "k", []byte("v")) })
		name := fmt.Sprintf("f%d", i)
		hosttest.WaitCursor(t, hs[owners[name]].H.Fold(name), rev)
	}
}

// settleChanged waits until the fleet of hs is placed and records each
// fold's owner epoch, which must not go back (epochs).
func settleChanged(t *testing.T, hs map[string]*hosttest.Running, epochs map[string]protocol.Revision) map[string]string {
	t.Helper()
	owners := waitPlaced(t, hs)
	for f, o := range owners {
		_, e := hs[o].H.Fold(f).Role()
		if e < epochs[f] {
			t.Fatalf("fold %s owned by %s at epoch %d, below the last one seen, %d", f, o, e, epochs[f])
		}
		epochs[f] = e
	}
	return owners
}
