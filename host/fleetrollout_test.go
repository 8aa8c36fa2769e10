package host_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetRollingPluginUpgrade: a fold whose module comes from a NATS
// object store, in a fleet of three nodes. Node c folds it with view
// schema 1 (keyview1), then is left with no role (its store frozen with
// schema 1's views) when a third node joins. Schema 2 (keyview2) is pushed
// while c does not fold: the owner and the standby rebuild their views
// live. The owner then leaves and c becomes the standby: before it folds
// anything it rebuilds its schema-1 views with the new module, so its
// views are schema 2's for every key, none of schema 1's left, and no
// update folded by one version is mixed with another's. Mutation caught:
// no rebuild before following when the stored view schema differs (c
// keeps its s1/ views beside the new s2/ ones, and records no rebuild).
func TestFleetRollingPluginUpgrade(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "keyview"}
	hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	dir := t.TempDir()
	start := func(name string) *hosttest.Running {
		return hosttest.StartHost(t, host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url, Name: name}},
			Admin: host.AdminOptions{Node: name},
			Fleet: host.FleetOptions{Name: "t", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(dir, name)}},
		})
	}
	unit := protocol.Unit{Fold: "routes"}
	p := protocol.Place(unit, []string{"n1", "n2", "n3"}, 1)
	owner, standby := p.Owner, p.Standbys[0]
	var c string // the node the three-node placement leaves without a role
	for _, n := range []string{"n1", "n2", "n3"} {
		if n != owner && n != standby {
			c = n
		}
	}
	role := func(r *hosttest.Running) protocol.Role { ro, _ := r.H.Fold("routes").Role(); return ro }
	hs := map[string]*hosttest.Running{c: start(c), owner: start(owner)}
	a := hosttest.Put(t, b, "a", "1")
	hosttest.WaitCursor(t, hs[c].H.Fold("routes"), a)
	if v := hosttest.ViewsOf(t, hs[c].H.Fold("routes")); v["s1/a"] != "1" {
		t.Fatalf("%s's views with schema 1: %v", c, v)
	}
	hs[standby] = start(standby)
	hosttest.WaitFor(t, func() bool {
		return hs[c].H.Fold("routes").Status().State == httpapi.StateElsewhere && role(hs[owner]) == protocol.RoleOwner && role(hs[standby]) == protocol.RoleStandby
	})

	v2 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview2"))
	bk := hosttest.Put(t, b, "b", "2")
	for _, n := range []string{owner, standby} {
		f := hs[n].H.Fold("routes")
		hosttest.WaitFor(t, func() bool {
			v := hosttest.ViewsOf(t, f)
			return f.Status().Plugin.SHA256 == v2 && f.Status().Cursor >= bk && v["s2/a"] == "1" && v["s2/b"] == "2" && v["s1/a"] == ""
		})
	}
	// c, folding nothing, takes the module too (its object watch), and
	// keeps its schema-1 views as they are meanwhile.
	cf := hs[c].H.Fold("routes")
	hosttest.WaitFor(t, func() bool { return cf.Status().Plugin.SHA256 == v2 })
	if v := hosttest.ViewsOf(t, cf); len(v) != 1 || v["s1/a"] != "1" {
		t.Fatalf("%s's views while it folds nothing: %v, want its schema-1 views as they were", c, v)
	}
	if err := hs[owner].Stop(t); err != nil {
		t.Fatalf("the owner's leaving: %v", err)
	}
	delete(hs, owner)
	hosttest.WaitFor(t, func() bool { return role(hs[c]) == protocol.RoleStandby })
	last := hosttest.Put(t, b, "c", "3")
	hosttest.WaitCursor(t, cf, last)
	hosttest.WaitCursor(t, hs[standby].H.Fold("routes"), last)
	want := map[string]string{"s2/a": "1", "s2/b": "2", "s2/c": "3"}
	for n, r := range hs {
		got := hosttest.ViewsOf(t, r.H.Fold("routes"))
		if len(got) != len(want) {
			t.Errorf("%s's views %v, want %v", n, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s's views %v, want %v", n, got, want)
				break
			}
		}
	}
	if rb := cf.Status().Rebuild; rb == nil || rb.Last == nil || rb.Last.Live || !strings.Contains(rb.Last.Why, "view schema 1") {
		t.Errorf("%s's last rebuild: %+v, want one before following, from view schema 1", c, rebuildText(rb))
	}
}

func rebuildText(rb *httpapi.RebuildStatus) string {
	if rb == nil || rb.Last == nil {
		return fmt.Sprintf("%+v", rb)
	}
	return fmt.Sprintf("%+v", *rb.Last)
}
