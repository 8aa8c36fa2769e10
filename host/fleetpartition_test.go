package host_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/forward"
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
// any node holds every key once (the units' pages merged), and so does
// its ndjson stream. When the owner of a partition
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
		// Its ndjson stream: those pages back to back.
		code, body, _ := fleetGet(t, apis[name]+"/v1/folds/routes/raw?prefix=route.&format=ndjson")
		if lines := strings.Split(strings.TrimSpace(body), "\n"); code != 200 || len(lines) != 201 || !strings.HasPrefix(lines[200], `{"end":true,"count":200,`) {
			t.Errorf("the merged ndjson stream on %s: %d, %d lines, ending %q", name, code, len(lines), lines[len(lines)-1])
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

// TestFleetQueriesByTheFoldsName: a query by a partitioned fold's name
// answers on every node of a fleet of 3 what one fold of the whole
// bucket answers, read-your-writes through min_revision, wherever the
// units are: "routes" (2 partitions, a standby each: one node folds both
// units and the two others forward the query to it, X-Foldhost-Node
// naming it); a fold of 3 partitions without standbys whose units are on
// 3 nodes (each node reads its own unit and the two others through their
// owners, a range in pages); a fold of 2 partitions without standbys on
// 2 nodes (the third forwards to an owner). Scans forward and reverse
// (ranges of 2 keys) and gets; the router's queries over 3 units on 3
// nodes against one whole fold. A min_revision no unit reaches answers
// 504 after the wait, units read through their owners too; an empty key
// is a key not found; a query that waited for its query instance longer
// than the call timeout still reads its remote units; a query forwarded
// to a node that folds no unit answers 503; a unit read through its owner
// whose views another view schema wrote (one unit folded by query2.wasm:
// a rolling upgrade caught midway) is refused with 503. When the node
// that folds both of routes' units leaves, the two left answer every fold
// themselves. Mutations caught: the query not forwarded to the node that
// folds every unit (answered elsewhere); a unit of another node read from
// this node's stale copy (504); a remote range's next page not moved past
// the last key (entries twice), or moved as a forward one when reverse
// (entries lost); the remote reads' deadline started before the wait for
// an instance (503); the empty key asked of the owner (503); 404 for the
// node without units; the remote view schema check off (200 over views
// the module misreads).
func TestFleetQueriesByTheFoldsName(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(t.Context(), nc, natskv.BucketConfig{Name: "routes", History: 4}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := hosttest.BuiltPlugin(t, "testdata", "query")
	nodes := []string{"n1", "n2", "n3"}
	defer host.SetFirstRemotePage(1)() // a remote range in many pages, even of a few entries
	// spread is a fold of n partitions without standbys whose units the
	// placement puts on n nodes.
	spread := func(prefix string, n int) string {
		for i := 0; ; i++ {
			name, seen := fmt.Sprintf("%s%d", prefix, i), map[string]bool{}
			for p := range n {
				seen[protocol.Place(protocol.Unit{Fold: name, Partition: p}, nodes, 0).Owner] = true
			}
			if len(seen) == n {
				return name
			}
		}
	}
	three, two, rthree, mixed := spread("three", 3), spread("two", 2), spread("rthree", 3), spread("mixed", 2)
	// mixed's partition 1 is folded by a module of view schema 2 (a
	// rolling upgrade caught midway), partition 0 by schema 1's.
	upgraded := protocol.Place(protocol.Unit{Fold: mixed, Partition: 1}, nodes, 0).Owner
	notYet := protocol.Place(protocol.Unit{Fold: mixed, Partition: 0}, nodes, 0).Owner
	router := hosttest.BuiltPlugin(t, "example-router", "router-c")
	hs := map[string]*hosttest.Running{}
	apis := map[string]string{}
	for _, name := range nodes {
		o := partitionedFleetHost(t, srv.ClientURL(), dir, name, 2)
		o.Folds[0].Plugin = plugin
		for fold, n := range map[string]int{three: 3, two: 2, rthree: 3, "rwhole": 1, mixed: 2} {
			p := plugin
			switch {
			case fold == rthree || fold == "rwhole":
				p = router
			case fold == mixed && name == upgraded:
				p = hosttest.BuiltPlugin(t, "testdata", "query2")
			}
			fo := host.FoldOptions{Name: fold, Bucket: "routes", Plugin: p, Partitions: n, Standbys: -1,
				DataDir: filepath.Join(dir, name, fold)}
			if fold == three { // one query at a time, a second at most: a query waits for its turn
				fo.PluginQueryInstances, fo.PluginCallTimeout = 1, time.Second
			}
			o.Folds = append(o.Folds, fo)
		}
		hs[name] = hosttest.StartHost(t, o)
		api := hosttest.LoopbackAPI(t, hs[name].H.Handler())
		t.Cleanup(api.Close)
		apis[name] = api.URL
	}
	live := map[string]bool{}
	value := func(k string) string { return hosttest.Route(fmt.Sprintf("10.0.0.%d:80", len(k)*7%10)) }
	var last uint64
	for i := range 300 {
		k := fmt.Sprintf("route.h%03d", i%100+i/100*1000) // hosts of 4 and 5 characters
		last, live[k] = hosttest.Put(t, b, k, value(k)), true
	}
	// holders are the nodes that fold every unit of routes.
	holders := func(nodes []string) map[string]bool {
		out := map[string]bool{}
		for _, name := range nodes {
			out[name] = true
		}
		for p := range 2 {
			pl := protocol.Place(protocol.Unit{Fold: "routes", Partition: p}, nodes, 1)
			for name := range out {
				if name != pl.Owner && !slices.Contains(pl.Standbys, name) {
					delete(out, name)
				}
			}
		}
		return out
	}
	ask := func(node, fold, query, input string) queryAnswer {
		t.Helper()
		var got queryAnswer
		// A fleet still settling its placement answers 503: ask again.
		hosttest.WaitFor(t, func() bool {
			got = askQuery(t, apis[node], fold, query, input, fmt.Sprintf("min_revision=%d&wait=10s", last))
			return got.code != http.StatusServiceUnavailable
		})
		return got
	}
	check := func(nodes []string) {
		t.Helper()
		want := slices.Sorted(maps.Keys(live))
		hold := holders(nodes)
		for _, fold := range []string{"routes", three, two} {
			forwarded := 0
			for _, name := range nodes {
				got := ask(name, fold, "scan", "route.")
				if got.code != 200 || got.body != strings.Join(want, "\n")+"\n" {
					t.Fatalf("scan of %s on %s: %d, %d bytes (%.200q), want the %d keys", fold, name, got.code, len(got.body), got.body, len(want))
				}
				if c, _ := strconv.ParseUint(got.cursor, 10, 64); c < last {
					t.Errorf("scan of %s on %s: cursor %q, below min_revision %d", fold, name, got.cursor, last)
				}
				if fold == "routes" && !hold[name] {
					forwarded++
					if !hold[got.node] {
						t.Errorf("the query on %s was answered by %q, which does not fold both units (those that do: %v)", name, got.node, hold)
					}
				}
				rev := slices.Clone(want)
				slices.Reverse(rev)
				if got := ask(name, fold, "rscan", "route.h1"); got.code != 200 || got.body != strings.Join(filterPrefix(rev, "route.h1"), "\n")+"\n" {
					t.Fatalf("rscan of %s on %s: %d, %d bytes (%.200q)", fold, name, got.code, len(got.body), got.body)
				}
				for _, k := range want[:5] {
					if got := ask(name, fold, "get", k); got.code != 200 || got.body != value(k) {
						t.Errorf("get %s of %s on %s: %d %s", k, fold, name, got.code, got.body)
					}
				}
			}
			if fold == "routes" {
				t.Logf("nodes %v: %d folding both units of routes (%v), %d queries forwarded", nodes, len(hold), hold, forwarded)
			}
		}
		// The router over 3 units on 3 nodes answers as over the whole
		// bucket: top_upstreams reads every upstream/ entry, in ranges of
		// 1,024 (each remote unit's in pages of 1, 2, 4, ...).
		for _, name := range nodes {
			for _, q := range [][2]string{{"top_upstreams", "3"}, {"hosts_of_upstream", "10.0.0.0:80"}, {"hosts_of_upstream", "10.0.0.7:80"}} {
				want, got := ask(name, "rwhole", q[0], q[1]), ask(name, rthree, q[0], q[1])
				want.body = strings.Replace(want.body, "fold rwhole:", "fold "+rthree+":", 1)
				if got.code != 200 || got.code != want.code || got.body != want.body {
					t.Errorf("%s(%s) of %s on %s: %d %.300s\nwant (the whole fold's): %d %.300s", q[0], q[1], rthree, name, got.code, got.body, want.code, want.body)
				}
			}
		}
	}
	check(nodes)
	// A min_revision no unit reaches: 504 within the wait, whether the
	// units are read here or through their owners.
	for _, fold := range []string{"routes", three} {
		t0 := time.Now()
		got := askQuery(t, apis["n1"], fold, "scan", "route.", fmt.Sprintf("min_revision=%d&wait=300ms", last+1000))
		if got.code != http.StatusGatewayTimeout || time.Since(t0) > 5*time.Second {
			t.Errorf("a query of %s at a revision no unit reaches: %d %s after %v, want 504 after the 300ms wait", fold, got.code, got.body, time.Since(t0))
		}
	}
	if len(holders(nodes)) == len(nodes) {
		t.Fatal("every node folds both units: the placement left nothing to forward")
	}
	// A unit read through its owner whose views another view schema
	// wrote is refused (503, ask again), as a local one is: the module
	// would misread them.
	if got := ask0(t, apis[notYet], mixed, last); got.code != http.StatusServiceUnavailable || !strings.Contains(got.body, "view schema 2") {
		t.Errorf("a query of %s on %s (view schema 1) reading partition 1 on %s (view schema 2): %d %s, want 503 naming the schemas", mixed, notYet, upgraded, got.code, got.body)
	}
	// An empty key read through a unit's owner is a key not found, as a
	// whole fold's plugin sees it (the API refuses to read an empty key).
	for _, fold := range []string{"routes", three, two} {
		if got := ask("n1", fold, "get", ""); got.code != http.StatusUnprocessableEntity || !strings.Contains(got.body, "not found") {
			t.Errorf("get of the empty key of %s: %d %s, want the plugin's 422 not found", fold, got.code, got.body)
		}
	}
	// A query that waits longer than the call timeout (1s) for the one
	// query instance (behind two spinning queries, each cut at 1s) still
	// reads its remote units: their reads are bounded by its call, not by
	// its wait.
	var spins sync.WaitGroup
	for range 3 {
		spins.Go(func() { askQuery(t, apis["n1"], three, "spin", "", "") })
	}
	hosttest.WaitFor(t, func() bool { // one spin timed out (1s): another runs, the third waits
		outcomes, _ := queryMetrics(t, hs["n1"].H, three, "spin")
		return outcomes["error"] >= 1
	})
	if got := askQuery(t, apis["n1"], three, "scan", "route.h1", ""); got.code != 200 || got.body != strings.Join(filterPrefix(slices.Sorted(maps.Keys(live)), "route.h1"), "\n")+"\n" {
		t.Errorf("a query of %s that waited for its instance behind two spins: %d %.300s", three, got.code, got.body)
	}
	spins.Wait()
	// A query forwarded to a node that folds no unit of the fold (its
	// forwarder's placement behind) is told to retry, not 404.
	for _, name := range nodes {
		holdsOne := false
		for p := range 2 {
			holdsOne = holdsOne || protocol.Place(protocol.Unit{Fold: two, Partition: p}, nodes, 0).Owner == name
		}
		if holdsOne {
			continue
		}
		c, err := forward.NewClient(nc)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		err = c.Do(t.Context(), "foldhost.fleet.t.read."+name, w, httptest.NewRequest(http.MethodGet, "/v1/folds/"+two+"/query/scan?input=route.", nil),
			forward.Options{From: "test", FirstWait: time.Minute, ChunkWait: time.Minute})
		c.Close()
		if err != nil || w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("a query of %s forwarded to %s, which folds none of its units: %v %d %s, want 503 with Retry-After", two, name, err, w.Code, w.Body.String())
		}
	}

	// A node that folds both of routes' units leaves.
	var gone string
	for name := range holders(nodes) {
		gone = name
	}
	if err := hs[gone].Stop(t); err != nil {
		t.Fatal(err)
	}
	rest := slices.DeleteFunc(slices.Clone(nodes), func(s string) bool { return s == gone })
	for i := range 30 {
		k := fmt.Sprintf("route.h%03d", 500+i)
		last, live[k] = hosttest.Put(t, b, k, value(k)), true
	}
	check(rest)
}

// filterPrefix is the keys of ks that start with prefix, in their order.
func filterPrefix(ks []string, prefix string) []string {
	var out []string
	for _, k := range ks {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// ask0 asks a scan of fold on base once its units are placed and caught
// up to last: until an answer other than a 503 that is not about view
// schemas (a fleet still settling).
func ask0(t *testing.T, base, fold string, last uint64) queryAnswer {
	t.Helper()
	var got queryAnswer
	hosttest.WaitFor(t, func() bool {
		got = askQuery(t, base, fold, "scan", "route.", fmt.Sprintf("min_revision=%d&wait=10s", last))
		return got.code != http.StatusServiceUnavailable || strings.Contains(got.body, "view schema")
	})
	return got
}
