package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestClusterFailover: on a 3-node JetStream cluster with an R3 bucket,
// shutting the stream's leader down while two hosts fold it under load
// loses nothing (each fold equals the bucket), the old leader rejoins and
// the folds still equal the bucket, and the consumer count comes back to one
// per fold; then one host's fold is wiped
// and bootstrapped back from the artifact the other exported to their
// shared store, and both end identical to the bucket.
func TestClusterFailover(t *testing.T) {
	c := hosttest.StartCluster(t, 3)
	client := hosttest.Conn(t, c.URLs())
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	kv := hosttest.Retry(t, "create the R3 bucket", func(ctx context.Context) (jetstream.KeyValue, error) {
		// History 64 keeps every revision this test writes: with history 1
		// the outage's overwrites leave a gap that only the cursor-expiry
		// repair (not yet built) can close; the fold then stops, by design.
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "routes", History: 64, Replicas: 3})
	})
	leaderOf := func() string {
		return hosttest.Retry(t, "stream info", func(ctx context.Context) (string, error) {
			s, err := js.Stream(ctx, "KV_routes")
			if err != nil {
				return "", err
			}
			if l := s.CachedInfo().Cluster; l == nil || l.Leader == "" {
				return "", errors.New("no leader yet")
			}
			return s.CachedInfo().Cluster.Leader, nil
		})
	}
	last := uint64(0)
	putN := func(from, n int) {
		for i := from; i < from+n; i++ {
			last = hosttest.Retry(t, "put", func(ctx context.Context) (uint64, error) {
				return kv.Put(ctx, fmt.Sprintf("k.%03d", i%150), []byte(fmt.Sprint(i)))
			})
		}
	}

	base := t.TempDir()
	arts, err := dirstore.New(filepath.Join(base, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	opts := func(node string) host.Options {
		return host.Options{
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: c.URLs(), Name: node}},
			Artifacts: host.ArtifactOptions{Store: arts, Where: "shared", Holder: node, LeaseTTL: time.Minute},
			Folds:     []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, node)}},
		}
	}
	a, b := hosttest.StartHost(t, opts("a")), hosttest.StartHost(t, opts("b"))
	fa, fb := a.H.Fold("routes"), b.H.Fold("routes")

	putN(0, 300)
	leader := leaderOf()
	c.Stop(c.Index(leader)) // mid-watch: both folds are following (a server shutdown, not a crash)
	t.Logf("stopped the stream leader %s after revision %d", leader, last)
	putN(300, 600) // through the election
	hosttest.WaitCursor(t, fa, last)
	hosttest.WaitCursor(t, fb, last)
	truth := hosttest.TruthOf(t, kv)
	hosttest.SameEntries(t, "fold a after the failover", hosttest.FoldOf(t, fa), truth)
	hosttest.SameEntries(t, "fold b after the failover", hosttest.FoldOf(t, fb), truth)
	c.Start(c.Index(leader)) // back, as a follower
	if now := leaderOf(); now == leader {
		t.Logf("note: %s was elected leader again", now)
	}
	putN(900, 300)
	hosttest.WaitCursor(t, fa, last)
	hosttest.WaitCursor(t, fb, last)
	truth = hosttest.TruthOf(t, kv)
	hosttest.SameEntries(t, "fold a after the rejoin", hosttest.FoldOf(t, fa), truth)
	hosttest.SameEntries(t, "fold b after the rejoin", hosttest.FoldOf(t, fb), truth)
	consumers := func() int {
		return hosttest.Retry(t, "stream info", func(ctx context.Context) (int, error) {
			s, err := js.Stream(ctx, "KV_routes")
			if err != nil {
				return 0, err
			}
			return s.CachedInfo().State.Consumers, nil
		})
	}
	// One watch per fold; a consumer abandoned by the failover is reaped by
	// the server once inactive (one that lived on the killed node only once
	// that node is back, so this is checked after the rejoin).
	deadline := time.Now().Add(3 * time.Minute)
	for consumers() > 2 {
		if time.Now().After(deadline) {
			s, _ := js.Stream(context.Background(), "KV_routes")
			lister := s.ListConsumers(context.Background())
			for ci := range lister.Info() {
				t.Logf("consumer %s: delivered %d, push-bound %v, inactive threshold %v, created %v", ci.Name, ci.Delivered.Stream, ci.PushBound, ci.Config.InactiveThreshold, ci.Created)
			}
			t.Fatalf("%d consumers after the failover, want at most 2", consumers())
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Fold b is wiped and bootstrapped back from a's artifact.
	if _, err := fa.Export(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(t); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(base, "b")); err != nil {
		t.Fatal(err)
	}
	res, err := host.Bootstrap(context.Background(), withLogger(opts("b")), "routes", host.BootstrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b = hosttest.StartHost(t, opts("b"))
	fb = b.H.Fold("routes")
	putN(1200, 100)
	hosttest.WaitCursor(t, fa, last)
	hosttest.WaitCursor(t, fb, last)
	if d := fb.Status().Counters.DeliveredSinceStart; d > last-res.Cursor {
		t.Errorf("the bootstrapped fold received %d updates, more than the %d since the artifact", d, last-res.Cursor)
	}
	truth = hosttest.TruthOf(t, kv)
	hosttest.SameEntries(t, "fold a at the end", hosttest.FoldOf(t, fa), truth)
	hosttest.SameEntries(t, "bootstrapped fold b", hosttest.FoldOf(t, fb), truth)
	da, err := fold.Digest(fa.Store())
	if err != nil {
		t.Fatal(err)
	}
	if db, err := fold.Digest(fb.Store()); err != nil || db != da {
		t.Errorf("the folds differ after the bootstrap (%v)", err)
	}
}

func withLogger(o host.Options) host.Options {
	o.Logger = hosttest.Quiet
	return o
}
