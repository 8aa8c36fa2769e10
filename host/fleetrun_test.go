package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// fleetHost starts node name of fleet "t" on the server at url, running
// the folds f0..f3 (raw, one bucket each) under dir.
func fleetHost(t *testing.T, url, dir, name string) *hosttest.Running {
	t.Helper()
	var folds []host.FoldOptions
	for i := range 4 {
		folds = append(folds, host.FoldOptions{Name: fmt.Sprintf("f%d", i), DataDir: filepath.Join(dir, name, fmt.Sprintf("f%d", i))})
	}
	return hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url, Name: name}},
		Admin: host.AdminOptions{Node: name},
		Fleet: host.FleetOptions{Name: "t", Advertise: name + ":8080", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
		Folds: folds,
	})
}

// waitPlaced waits until every fold is owned by its placement's owner over
// the nodes of hs, folded (following) there and on its standby, and
// elsewhere on the others; it returns each fold's owner.
func waitPlaced(t *testing.T, hs map[string]*hosttest.Running) map[string]string {
	t.Helper()
	var live []string
	for n := range hs {
		live = append(live, n)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		owners, why := map[string]string{}, ""
		for i := range 4 {
			name := fmt.Sprintf("f%d", i)
			p := protocol.Place(protocol.Unit{Fold: name}, live, 1)
			for n, r := range hs {
				f := r.H.Fold(name)
				role, _ := f.Role()
				st := f.Status().State
				switch {
				case n == p.Owner && (role != protocol.RoleOwner || st != httpapi.StateFollowing):
					why = fmt.Sprintf("%s on %s (its owner): role %s, state %s", name, n, role, st)
				case len(p.Standbys) > 0 && n == p.Standbys[0] && (role != protocol.RoleStandby || st != httpapi.StateFollowing):
					why = fmt.Sprintf("%s on %s (its standby): role %s, state %s", name, n, role, st)
				case n != p.Owner && (len(p.Standbys) == 0 || n != p.Standbys[0]) && st != httpapi.StateElsewhere:
					why = fmt.Sprintf("%s on %s: state %s, want elsewhere", name, n, st)
				}
			}
			owners[name] = p.Owner
		}
		if why == "" {
			return owners
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not place its folds within 2m: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetRunsEachFoldOnItsOwnerAndStandby: three hosts of one fleet run
// each of four folds on its placement's owner and one standby (both fold
// every write), and leave it elsewhere on the third; a host stopped
// (SIGTERM's path: Run's context ends) hands its folds over before its
// Run returns, and the others own them, under new epochs, with every
// write folded.
func TestFleetRunsEachFoldOnItsOwnerAndStandby(t *testing.T) {
	srv, nc := natstest.Start(t)
	var buckets []*natskv.Bucket
	for i := range 4 {
		b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: fmt.Sprintf("f%d", i), History: 4}, natskv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		buckets = append(buckets, b)
	}
	dir := t.TempDir()
	hs := map[string]*hosttest.Running{}
	for _, n := range []string{"n1", "n2", "n3"} {
		hs[n] = fleetHost(t, srv.ClientURL(), dir, n)
	}
	owners := waitPlaced(t, hs)
	checkPartitions(t, hs, owners)
	var revs []uint64
	for i, b := range buckets {
		revs = append(revs, hosttest.Put(t, b, "k", fmt.Sprint("v", i)))
	}
	for i := range 4 {
		name := fmt.Sprintf("f%d", i)
		hosttest.WaitCursor(t, hs[owners[name]].H.Fold(name), revs[i])
	}

	leaver := owners["f0"]
	epochs := map[string]protocol.Revision{}
	for name, o := range owners {
		if o == leaver {
			_, epochs[name] = hs[o].H.Fold(name).Role()
		}
	}
	if err := hs[leaver].Stop(t); err != nil {
		t.Fatalf("the leaving host's Run: %v", err)
	}
	delete(hs, leaver)
	after := waitPlaced(t, hs)
	checkPartitions(t, hs, after)
	for name, was := range epochs {
		f := hs[after[name]].H.Fold(name)
		if _, e := f.Role(); e <= was {
			t.Errorf("%s: owned by %s at epoch %d, not above the leaver's %d", name, after[name], e, was)
		}
		hosttest.WaitCursor(t, f, revs[name[1]-'0'])
	}
}

// checkPartitions: every node answers GET /v1/folds/NAME/partitions with
// the fold's one partition, its owner, the owner's epoch and its standby,
// as the owner itself sees them.
func checkPartitions(t *testing.T, hs map[string]*hosttest.Running, owners map[string]string) {
	t.Helper()
	var live []string
	for n := range hs {
		live = append(live, n)
	}
	for n, r := range hs {
		srv := hosttest.LoopbackAPI(t, r.H.Handler())
		for name, owner := range owners {
			_, epoch := hs[owner].H.Fold(name).Role()
			want := protocol.Place(protocol.Unit{Fold: name}, live, 1)
			hosttest.WaitFor(t, func() bool {
				code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/"+name+"/partitions")
				var got httpapi.Partitions
				if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got.Partitions) != 1 {
					t.Fatalf("node %s, %s/partitions: %d %s", n, name, code, body)
				}
				p := got.Partitions[0]
				return p.Owner == owner && p.Epoch == uint64(epoch) && slices.Equal(p.Standbys, want.Standbys) && p.Advertise == owner+":8080"
			})
		}
		srv.Close()
	}
}

// TestFleetEffectsOnceAcrossAHandOver: two nodes of a fleet fold the
// example router, which emits an effect per changed route, with an effects
// stream. The owner publishes each change's effect; the standby publishes
// none (it drops what the fence shows published: its outbox empties);
// the owner leaves, the standby takes the fold over and publishes the
// changes after it: the stream holds one effect per change, each id once.
// Mutation caught: a standby whose publisher publishes (the effects were
// published by both: the fence keeps them once, but the standby's
// published count is not 0).
func TestFleetEffectsOnceAcrossAHandOver(t *testing.T) {
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
	plugin, dir := hosttest.BuiltPlugin(t, "example-router", "router-c"), t.TempDir()
	owner := protocol.Place(protocol.Unit{Fold: "routes"}, []string{"n1", "n2"}, 1).Owner
	standby := map[string]string{"n1": "n2", "n2": "n1"}[owner]
	hs := map[string]*hosttest.Running{}
	for _, n := range []string{"n1", "n2"} {
		fo := host.FoldOptions{Name: "routes", Plugin: plugin, DataDir: filepath.Join(dir, n), EffectsStream: "EV", BatchSize: 1}
		if n == owner {
			// The owner commits a change 300ms after the standby does: a
			// standby that publishes publishes first, and counts it.
			fo.BatchSize, fo.BatchWindow = 100, 300*time.Millisecond
		}
		hs[n] = hosttest.StartHost(t, host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL(), Name: n}},
			Admin: host.AdminOptions{Node: n},
			Fleet: host.FleetOptions{Name: "fx", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Folds: []host.FoldOptions{fo},
		})
	}
	hosttest.WaitFor(t, func() bool {
		r, _ := hs[owner].H.Fold("routes").Role()
		s, _ := hs[standby].H.Fold("routes").Role()
		return r == protocol.RoleOwner && s == protocol.RoleStandby && hs[standby].H.Fold("routes").Status().State == httpapi.StateFollowing
	})
	var last uint64
	for i := range 10 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), hosttest.Route("10.0.0.1:80"))
	}
	sf := hs[standby].H.Fold("routes")
	hosttest.WaitCursor(t, sf, last)
	waitStream(t, ev, 10)
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(sf) == 0 })
	if e := sf.Status().Effects; e == nil || e.PublishedByThisNode != 0 || e.FenceMoves != 0 {
		t.Fatalf("the standby published (or tried to publish) effects of its own: %+v", e)
	}

	if err := hs[owner].Stop(t); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { r, _ := sf.Role(); return r == protocol.RoleOwner })
	for i := 10; i < 15; i++ {
		hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), hosttest.Route("10.0.0.1:80"))
	}
	ids := waitStream(t, ev, 15)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("effect %s published twice", id)
		}
		seen[id] = true
	}
	if len(ids) != 15 {
		t.Errorf("%d effects for 15 changes: %v", len(ids), ids)
	}
}

// waitStream waits until stream s holds n effects (route.changed) and
// returns their ids; more than n fails.
func waitStream(t *testing.T, s jetstream.Stream, n int) []string {
	t.Helper()
	var ids []string
	hosttest.WaitFor(t, func() bool {
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Subjects["route.changed"]) >= n
	})
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == "route.changed" {
			ids = append(ids, m.Header.Get("Foldhost-Effect-Id"))
		}
	}
	if len(ids) > n {
		t.Fatalf("the stream holds %d effects, want %d: %v", len(ids), n, ids)
	}
	return ids
}
