package host_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// partitionedFleetHost is node name of fleet "t" with the fold "routes"
// in n partitions.
func partitionedFleetHost(t *testing.T, url, dir, name string, n int) host.Options {
	return host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url, Name: name}},
		Admin: host.AdminOptions{Node: name},
		Fleet: host.FleetOptions{Name: "t", Advertise: name + ":8080", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
		Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(dir, name, "routes"), Partitions: n}},
	}
}

// TestFleetPlacesPartitions: a fold of 4 partitions on a fleet of 3
// nodes is 4 units, each owned by its placement's owner with a standby,
// folded (its partition only) there and elsewhere on the third node; a
// key's raw value read by the fold's name on any node is answered by its
// partition's unit, locally or forwarded to the unit's owner, right after
// its write (min_revision), with the partition in a header; every node's
// partitions endpoint lists the 4 owners; a range by the fold's name on
// any node holds every key once (the units' pages merged). When the owner of a partition
// leaves, its units go to their standbys and every key still reads right
// through the other nodes. A node configured with another count of
// partitions is refused by the fleet. Mutations caught: the
// fleet's check of the count off (the node joins); the fleet's reads
// routed by the fold's name instead of the unit's (a unit elsewhere
// answers from its stopped copy: below min_revision).
func TestFleetPlacesPartitions(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(t.Context(), nc, natskv.BucketConfig{Name: "routes", History: 4}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	dir := t.TempDir()
	nodes := []string{"n1", "n2", "n3"}
	hs := map[string]*hosttest.Running{}
	apis := map[string]string{}
	for _, name := range nodes {
		hs[name] = hosttest.StartHost(t, partitionedFleetHost(t, srv.ClientURL(), dir, name, n))
		api := hosttest.LoopbackAPI(t, hs[name].H.Handler())
		t.Cleanup(api.Close)
		apis[name] = api.URL
	}
	var last uint64
	for i := range 200 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), fmt.Sprintf("v%d", i))
	}
	owners := map[int]string{}
	for p := range n {
		pl := protocol.Place(protocol.Unit{Fold: "routes", Partition: p}, nodes, 1)
		owners[p] = pl.Owner
		unit := host.UnitName("routes", p)
		hosttest.WaitFor(t, func() bool {
			for name, r := range hs {
				f := r.H.Fold(unit)
				role, _ := f.Role()
				st := f.Status()
				switch {
				case name == pl.Owner && (role != protocol.RoleOwner || st.State != httpapi.StateFollowing || st.Cursor < last):
					return false
				case name == pl.Standbys[0] && (role != protocol.RoleStandby || st.Cursor < last):
					return false
				case name != pl.Owner && name != pl.Standbys[0] && st.State != httpapi.StateElsewhere:
					return false
				}
			}
			return true
		})
		for k := range hosttest.RawOf(t, hs[pl.Owner].H.Fold(unit)) {
			if q := protocol.PartitionOf("routes", k, n); q != p {
				t.Errorf("unit %s on its owner %s holds key %q of partition %d", unit, pl.Owner, k, q)
			}
		}
	}
	t.Logf("owners by partition: %v", owners)
	for i := range 40 {
		k := fmt.Sprintf("route.h%d", i)
		rev := hosttest.Put(t, b, k, "new")
		for _, name := range nodes {
			code, body, hdr := fleetGet(t, fmt.Sprintf("%s/v1/folds/routes/raw/%s?min_revision=%d&wait=10s", apis[name], k, rev))
			p := protocol.PartitionOf("routes", k, n)
			if code != 200 || !strings.Contains(body, `"new"`) || hdr[2] != fmt.Sprint(p) {
				t.Fatalf("GET %s on %s after its write at %d: %d %s, headers %v (partition %d, owner %s)", k, name, rev, code, body, hdr, p, owners[p])
			}
		}
	}
	for _, name := range nodes {
		code, body, _ := fleetGet(t, apis[name]+"/v1/folds/routes/partitions")
		for p := range n {
			if code != 200 || !strings.Contains(body, fmt.Sprintf(`{"partition":%d,"owner":"%s"`, p, owners[p])) {
				t.Errorf("partitions on %s: %d %s, want partition %d owned by %s", name, code, body, p, owners[p])
			}
		}
	}

	// A range by the fold's name on any node merges the units' pages,
	// each from its owner (forwarded) or this node's copy.
	for _, name := range nodes {
		seen, next := map[string]bool{}, ""
		for page := 0; page < 20; page++ {
			path := apis[name] + "/v1/folds/routes/raw?prefix=route.&limit=50"
			if next != "" {
				path += "&next=" + next
			}
			code, body, _ := fleetGet(t, path)
			var pg rangePage
			if code != 200 || json.Unmarshal([]byte(body), &pg) != nil {
				t.Fatalf("range page %d on %s: %d %s", page, name, code, body)
			}
			for _, it := range pg.Items {
				if seen[it.Key] {
					t.Fatalf("range on %s: key %q twice", name, it.Key)
				}
				seen[it.Key] = true
			}
			if next = pg.Next; !pg.Truncated {
				break
			}
		}
		if len(seen) != 200 {
			t.Errorf("the merged range on %s: %d keys, want 200", name, len(seen))
		}
	}

	// The owner of partition 0 leaves (SIGTERM's path): its units go to
	// their standbys, and every key reads right through the other nodes.
	gone := owners[0]
	if err := hs[gone].Stop(t); err != nil {
		t.Fatal(err)
	}
	delete(hs, gone)
	var rest []string
	for _, name := range nodes {
		if name != gone {
			rest = append(rest, name)
		}
	}
	for p := range n {
		pl := protocol.Place(protocol.Unit{Fold: "routes", Partition: p}, rest, 1)
		hosttest.WaitFor(t, func() bool {
			role, _ := hs[pl.Owner].H.Fold(host.UnitName("routes", p)).Role()
			return role == protocol.RoleOwner
		})
	}
	for i := range 40 {
		k := fmt.Sprintf("route.h%d", i)
		rev := hosttest.Put(t, b, k, "after")
		for _, name := range rest {
			code, body, hdr := fleetGet(t, fmt.Sprintf("%s/v1/folds/routes/raw/%s?min_revision=%d&wait=10s", apis[name], k, rev))
			if code != 200 || !strings.Contains(body, `"after"`) {
				t.Fatalf("GET %s on %s after %s left: %d %s, headers %v", k, name, gone, code, body, hdr)
			}
		}
	}

	err = hosttest.StartErr(t, partitionedFleetHost(t, srv.ClientURL(), dir, "n4", 2))
	if !errors.Is(err, fleet.ErrPartitionsMismatch) || !strings.Contains(err.Error(), "4 partitions") {
		t.Errorf("a node with 2 partitions of a fold the fleet has in 4: %v, want ErrPartitionsMismatch", err)
	}
}
