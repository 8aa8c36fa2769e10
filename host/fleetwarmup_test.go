package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetJoinWarmsUpFromArtifacts: a node joining a fleet with a fresh
// data dir installs the fold's published artifact before it folds, and
// folds from NATS only the delta past the artifact's cursor; every value
// is right. A node joining with its artifact store unreachable (an S3
// endpoint nobody listens on) starts anyway and hydrates the whole bucket
// from NATS. The times to catch up are logged (FOLDHOST_TEST_WARMUP_KEYS
// sets the bucket's size for a measurement). Mutations caught: the warm-up off (the joiner folds every
// update: delivered N+D, not D); a warm-up failure failing the start.
func TestFleetJoinWarmsUpFromArtifacts(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "f0", History: 4}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js := hosttest.JS(t, srv.ClientURL())
	kv, err := js.KeyValue(context.Background(), "f0")
	if err != nil {
		t.Fatal(err)
	}
	n, d := 5000, 20
	if v := os.Getenv("FOLDHOST_TEST_WARMUP_KEYS"); v != "" { // a measurement: more keys
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	plugin := hosttest.BuiltPlugin(t, "example-router", "router-c")
	putMany(t, js, 0, n)
	arts, err := dirstore.New(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	deadStore, err := s3store.New(s3store.Options{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", hosttest.FreePort(t)), Bucket: "gone",
		AccessKey: "k", SecretKey: "s", UsePathStyle: true, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func(name string, store artifact.Store) *hosttest.Running {
		return hosttest.StartHost(t, host.Options{
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL(), Name: name}},
			Admin:     host.AdminOptions{Node: name},
			Fleet:     host.FleetOptions{Name: "t", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: name, LeaseTTL: time.Second},
			Folds:     []host.FoldOptions{{Name: "f0", Plugin: plugin, DataDir: filepath.Join(dir, name)}},
		})
	}

	n1 := start("n1", arts)
	f1 := n1.H.Fold("f0")
	hosttest.WaitFor(t, func() bool { r, _ := f1.Role(); return r == protocol.RoleOwner })
	last := lastRev(t, b)
	hosttest.WaitCursor(t, f1, last)
	rep, err := f1.Export(context.Background(), true)
	if err != nil || rep.(round.Report).Outcome != round.Published {
		t.Fatalf("export on n1: %+v, %v", rep, err)
	}
	putMany(t, js, n, d)
	last = lastRev(t, b)

	// joined waits until the node r, started at began, folds f0 in a
	// role, caught up, and returns the time it took and what NATS
	// delivered to it.
	joined := func(name string, r *hosttest.Running, began time.Time) (took time.Duration, delivered uint64) {
		t.Helper()
		f := r.H.Fold("f0")
		hosttest.WaitFor(t, func() bool { role, _ := f.Role(); return role != protocol.RoleNone })
		hosttest.WaitCursor(t, f, last)
		took = time.Since(began)
		hosttest.SameEntries(t, name, hosttest.FoldOf(t, f), hosttest.TruthOf(t, kv))
		return took, f.Status().Counters.DeliveredSinceStart
	}
	began := time.Now()
	n2 := start("n2", arts)
	warm, got := joined("n2", n2, began)
	if got > uint64(d) {
		t.Errorf("n2 joined with the artifact published and folded %d updates from NATS, want at most the %d past its cursor", got, d)
	}
	if err := n2.Stop(t); err != nil {
		t.Fatal(err)
	}

	began = time.Now()
	n3 := start("n3", nil) // no artifact store: a full hydration from NATS
	full, got := joined("n3", n3, began)
	if got != uint64(n+d) {
		t.Errorf("n3 (no artifact store) folded %d updates from NATS, want all %d", got, n+d)
	}
	if err := n3.Stop(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("joined from the artifact in %v (%d updates from NATS); by a full hydration in %v: ratio %.2f",
		warm.Round(time.Millisecond), d, full.Round(time.Millisecond), float64(warm)/float64(full))

	n4 := start("n4", deadStore) // its warm-up fails: it hydrates from NATS
	if _, got := joined("n4", n4, time.Now()); got != uint64(n+d) {
		t.Errorf("n4 (artifact store unreachable) folded %d updates from NATS, want all %d", got, n+d)
	}
}

// putMany writes keys k<from>..k<from+count-1> of bucket f0, published
// asynchronously and waited for.
func putMany(t *testing.T, js jetstream.JetStream, from, count int) {
	t.Helper()
	acked := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			t.Fatal("the writes were not acknowledged within 5m")
		}
	}
	for i := from; i < from+count; i++ {
		_, err := js.PublishAsync(fmt.Sprintf("$KV.f0.k%06d", i), []byte(hosttest.Route(fmt.Sprintf("10.%d.%d.%d:80", i>>16, i>>8&255, i&255))))
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// A loaded server acknowledges slower than this writes (the
			// client's window stalled past its wait): let the acks catch
			// up, then write it again.
			acked()
			i--
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	acked()
}

func lastRev(t *testing.T, b *natskv.Bucket) uint64 {
	t.Helper()
	ret, _, err := b.Retention(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return uint64(ret.Last)
}
