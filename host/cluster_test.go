package host_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// natsCluster is a JetStream cluster of embedded servers joined by routes,
// each on fixed ports so a node can be stopped and started again.
type natsCluster struct {
	t     *testing.T
	nodes []*clusterNode
}

type clusterNode struct {
	name, dir       string
	port, routePort int
	srv             *embeddednats.Server
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startCluster(t *testing.T, n int) *natsCluster {
	c := &natsCluster{t: t}
	for i := range n {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("n%d", i), dir: t.TempDir(), port: freePort(t), routePort: freePort(t)})
	}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

func (c *natsCluster) start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	var routes []string
	for j, o := range c.nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.routePort))
		}
	}
	srv, err := embeddednats.Start(embeddednats.Options{Dir: n.dir, Port: n.port, StartTimeout: time.Minute,
		Cluster: &embeddednats.ClusterOptions{Name: "fh", ServerName: n.name, Port: n.routePort, Routes: routes}})
	if err != nil {
		c.t.Fatalf("node %s: %v", n.name, err)
	}
	n.srv = srv
}

func (c *natsCluster) stop(i int) {
	if n := c.nodes[i]; n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
}

// urls is every node's client URL, as a client's server list.
func (c *natsCluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
	}
	return strings.Join(us, ",")
}

func (c *natsCluster) index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}

// retry runs op until it succeeds (a cluster electing a leader refuses for
// a while), failing the test after a generous ceiling.
func retry[T any](t *testing.T, what string, op func(ctx context.Context) (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := op(ctx)
		cancel()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 2m: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type kvEntry struct {
	rev   protocol.Revision
	value string
}

// truthOf reads the bucket's current entries.
func truthOf(t *testing.T, kv jetstream.KeyValue) map[string]kvEntry {
	keys := retry(t, "list keys", func(ctx context.Context) ([]string, error) { return kv.Keys(ctx) })
	m := map[string]kvEntry{}
	for _, k := range keys {
		e := retry(t, "get "+k, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, k) })
		m[k] = kvEntry{protocol.Revision(e.Revision()), string(e.Value())}
	}
	return m
}

// foldOf reads a fold's raw entries.
func foldOf(t *testing.T, f *host.Fold) map[string]kvEntry {
	t.Helper()
	m := map[string]kvEntry{}
	err := f.Store().RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		m[string(k)] = kvEntry{rev, string(v)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameEntries(t *testing.T, who string, got, want map[string]kvEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d keys, the bucket has %d", who, len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: key %s = %+v (present %t), the bucket has %+v", who, k, g, ok, w)
		}
	}
}

// TestClusterFailover: on a 3-node JetStream cluster with an R3 bucket,
// shutting the stream's leader down while two hosts fold it under load
// loses nothing (each fold equals the bucket), the old leader rejoins and
// the folds still equal the bucket, and the consumer count comes back to one
// per fold; then one host's fold is wiped
// and bootstrapped back from the artifact the other exported to their
// shared store, and both end identical to the bucket.
func TestClusterFailover(t *testing.T) {
	c := startCluster(t, 3)
	client := nc(t, c.urls())
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	kv := retry(t, "create the R3 bucket", func(ctx context.Context) (jetstream.KeyValue, error) {
		// History 64 keeps every revision this test writes: with history 1
		// the outage's overwrites leave a gap that only the cursor-expiry
		// repair (not yet built) can close; the fold then stops, by design.
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "routes", History: 64, Replicas: 3})
	})
	leaderOf := func() string {
		return retry(t, "stream info", func(ctx context.Context) (string, error) {
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
			last = retry(t, "put", func(ctx context.Context) (uint64, error) {
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
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: c.urls(), Name: node}},
			Artifacts: host.ArtifactOptions{Store: arts, Where: "shared", Holder: node, LeaseTTL: time.Minute},
			Folds:     []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, node)}},
		}
	}
	a, b := startHost(t, opts("a")), startHost(t, opts("b"))
	fa, fb := a.h.Fold("routes"), b.h.Fold("routes")

	putN(0, 300)
	leader := leaderOf()
	c.stop(c.index(leader)) // mid-watch: both folds are following (a server shutdown, not a crash)
	t.Logf("stopped the stream leader %s after revision %d", leader, last)
	putN(300, 600) // through the election
	waitCursor(t, fa, last)
	waitCursor(t, fb, last)
	truth := truthOf(t, kv)
	sameEntries(t, "fold a after the failover", foldOf(t, fa), truth)
	sameEntries(t, "fold b after the failover", foldOf(t, fb), truth)
	c.start(c.index(leader)) // back, as a follower
	if now := leaderOf(); now == leader {
		t.Logf("note: %s was elected leader again", now)
	}
	putN(900, 300)
	waitCursor(t, fa, last)
	waitCursor(t, fb, last)
	truth = truthOf(t, kv)
	sameEntries(t, "fold a after the rejoin", foldOf(t, fa), truth)
	sameEntries(t, "fold b after the rejoin", foldOf(t, fb), truth)
	consumers := func() int {
		return retry(t, "stream info", func(ctx context.Context) (int, error) {
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
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(base, "b")); err != nil {
		t.Fatal(err)
	}
	res, err := host.Bootstrap(context.Background(), withLogger(opts("b")), "routes", host.BootstrapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b = startHost(t, opts("b"))
	fb = b.h.Fold("routes")
	putN(1200, 100)
	waitCursor(t, fa, last)
	waitCursor(t, fb, last)
	if d := fb.Status().Counters.DeliveredSinceStart; d > last-res.Cursor {
		t.Errorf("the bootstrapped fold received %d updates, more than the %d since the artifact", d, last-res.Cursor)
	}
	truth = truthOf(t, kv)
	sameEntries(t, "fold a at the end", foldOf(t, fa), truth)
	sameEntries(t, "bootstrapped fold b", foldOf(t, fb), truth)
	da, err := fold.Digest(fa.Store())
	if err != nil {
		t.Fatal(err)
	}
	if db, err := fold.Digest(fb.Store()); err != nil || db != da {
		t.Errorf("the folds differ after the bootstrap (%v)", err)
	}
}

func withLogger(o host.Options) host.Options {
	o.Logger = quiet
	return o
}
