package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetBucketDeletedUnderEffects: two nodes of a fleet fold the
// example router with an effects stream; the owner has marked its claim
// (its epoch) in the stream. The fleet's bucket is deleted while they run:
// it is made again with its epochs above the claim mark the host reads
// from the effects stream, the fold is owned again above it, and the next
// change's effect is published (once): the new owner is not fenced out by
// the old mark. Mutation caught: the host's floor not read (the remade
// bucket's epochs start low, the new owner's mark is refused as older:
// "fenced out", and the effect never lands).
func TestFleetBucketDeletedUnderEffects(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: 8}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js := hosttest.JS(t, srv.ClientURL())
	ev, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	// Epochs of the first bucket well above what a remade bucket would
	// reach without a floor: its revisions pushed up before the fleet.
	if _, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: fleet.BucketPrefix + "fx", History: 1, FirstRevision: 500}, natskv.Options{}); err != nil {
		t.Fatal(err)
	}
	plugin, dir := hosttest.BuiltPlugin(t, "example-router", "router-c"), t.TempDir()
	hs := map[string]*hosttest.Running{}
	for _, n := range []string{"n1", "n2"} {
		hs[n] = hosttest.StartHost(t, host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL(), Name: n}},
			Admin: host.AdminOptions{Node: n},
			Fleet: host.FleetOptions{Name: "fx", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: plugin, DataDir: filepath.Join(dir, n), EffectsStream: "EV", BatchSize: 1}},
		})
	}
	ownerEpoch := func() (string, protocol.Revision) {
		for n, h := range hs {
			if r, e := h.H.Fold("routes").Role(); r == protocol.RoleOwner {
				return n, e
			}
		}
		return "", 0
	}
	hosttest.WaitFor(t, func() bool { n, _ := ownerEpoch(); return n != "" })
	hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80"))
	waitStream(t, ev, 1)
	_, before := ownerEpoch()
	if before < 500 {
		t.Fatalf("the first owner's epoch %d, not from the pushed-up bucket", before)
	}

	if err := js.DeleteKeyValue(context.Background(), fleet.BucketPrefix+"fx"); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { n, e := ownerEpoch(); return n != "" && e > before })
	hosttest.Put(t, b, "route.b", hosttest.Route("10.0.0.2:80"))
	ids := waitStream(t, ev, 2)
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("effects after the bucket's deletion: %q", ids)
	}
	n, after := ownerEpoch()
	t.Logf("owner %s at epoch %d before the deletion, %d after", n, before, after)
	if st := hs[n].H.Fold("routes").Status().Effects; st.Held != "" || st.RefusedStale != 0 {
		t.Fatalf("the new owner's effects: %+v", st)
	}
}
