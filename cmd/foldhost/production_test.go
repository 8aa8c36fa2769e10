package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/command"
)

// prodWait bounds every wait of TestProductionExample: a ceiling against a
// hang on a busy machine, never a measure of speed.
const prodWait = 2 * time.Minute

// TestProductionExample deploys deploy/production as docs/production.md
// says, on one machine: three NATS servers from nats-server.conf (TLS,
// client certificates mapped to users, the nodes' permissions), the
// guide's nats commands (buckets and the effects stream, replicas 3), an
// S3 store (versitygw), the plugin pushed to the object store, and three
// `foldhost run` processes from node1.toml, node2.toml and node3.toml
// (each loaded as foldhost loads it) with foldhost.env's variables. Only
// what differs on a test machine is substituted, the way an operator
// would: the NATS URLs through FOLDHOST_NATS_URL, and textually (each
// replaced text must be in the file) the addresses and ports, the
// machines' directories (/etc, /var under a directory per machine), the
// S3 endpoint and the secrets' values; the certificates are made here,
// with the subjects the guide says. Over a MiB is written to inventory
// before the start (the nodes' state-syncs take it under flow control).
//
// Then: every fold is placed as the fleet's rendezvous places it on three
// nodes (its owner following, its standby following, the third node not
// folding it; GET /v1/folds/NAME/partitions on every node) and `foldhost
// fleet status` says so; every node runs the pushed module (`foldhost
// plugins`); a KV write is read back through every node's HTTP API with
// min_revision (the node that does not fold the fold forwards the read
// to the owner); the router's effects land in the stream, each once, at
// every step below; an export on the owner lands in S3 with the owner's
// epoch on the pointer, and one on a standby is refused. The owner of
// routes gets SIGTERM: it exits 0, its folds are owned by the two others
// (the new owner's epoch on the pointer), reads go on; started again, it
// gets its folds back. The owner of routes is SIGKILLed: the standby
// answers reads from its copy, the node without the fold answers 503 with
// Retry-After until the standby takes the fold over (a takeover counted
// in foldhost_fleet_takeovers_total); restarted, the node waits out its
// old record and gets its folds back. No NATS server logs a permission
// violation. foldhost.service is parsed for the keys the guide relies on
// (systemd-analyze is not run: systemd is not here).
//
// Mutations caught (each tried): a permission dropped from
// nats-server.conf's FOLDHOST_NODE (subscribe on the forwarded reads'
// subject, publish on _INBOX.>: the read through the node without the
// fold fails; $JS.FC.>: the servers log violations;
// $KV.foldhost_plugins.>: no node records its module;
// $KV.foldhost_export_leases.>: the export fails; $O.foldhost_modules.>:
// the push fails); the guide's stream without 'foldhost.fence.>' (the
// nodes refuse it and exit); a key of node1.toml misspelled (the configs
// differ beyond the node's name, and it does not load);
// TimeoutStopSec=30s (not above shutdown_grace); in the code, a leaving
// node that hands nothing over (no hand-over logged), a new owner that
// does not raise the pointer's epoch, a dead owner never taken over (the
// placement after the kill never comes), a read of a dead owner's fold
// answered 502.
func TestProductionExample(t *testing.T) {
	natsCLI := os.Getenv("FOLDHOST_NATS_CLI")
	if natsCLI == "" {
		t.Fatal("FOLDHOST_NATS_CLI is not set: the guide's nats commands run through the nats CLI; install it (from the repository root): " +
			`GOBIN="$PWD/bin" go install github.com/nats-io/natscli/nats@v0.5.0 && export FOLDHOST_NATS_CLI="$PWD/bin/nats"`)
	}
	ex := readProductionExample(t)
	root := t.TempDir()
	c := startExampleCluster(t, ex, natsCLI, root)
	ctx := context.Background()

	env := exampleEnv(t, ex.env, map[string]string{
		"FOLDHOST_S3_ACCESS_KEY": s3test.AccessKey,
		"FOLDHOST_S3_SECRET_KEY": s3test.SecretKey,
		"FOLDHOST_ADMIN_TOKEN":   "production-test-token",
	})
	env[config.EnvNATSURL] = c.nats.urls

	var nodes []*exampleNode
	for i, text := range ex.nodes {
		machine := filepath.Join(root, fmt.Sprintf("node%d", i+1))
		nodes = append(nodes, installNode(t, fmt.Sprintf("node%d.toml", i+1), text, c.ca, machine, c.s3.Endpoint, env))
	}
	checkUnitFile(t, ex.unit, ex.nodes[0], nodes[0].cfg)
	var folds []string
	standbys := map[string]int{}
	for _, f := range nodes[0].cfg.Folds {
		folds = append(folds, f.Name)
		standbys[f.Name] = f.Standbys
	}
	if !slices.Equal(folds, []string{"routes", "inventory"}) {
		t.Fatalf("the example's folds are %v; the test writes and reads routes (the router's) and inventory (raw)", folds)
	}
	fleetName := nodes[0].cfg.Fleet.Name

	// The plugin, pushed as the guide says (with a node's config and
	// identity), before the nodes start.
	module := routerBuild(t)
	if code, out, errOut := runCLI(t, env, "plugin", "push", module, "--config", nodes[0].cfgPath, "--fold", "routes"); code != command.ExitOK {
		t.Fatalf("plugin push: exit %d: %s %s", code, out, errOut)
	}

	// Over a MiB in inventory before the start: the nodes' state-syncs
	// pass it under flow control (their answers need $JS.FC.>).
	inventory, err := c.js.KeyValue(ctx, "inventory")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	var invRev uint64
	for i := range 24 {
		if invRev, err = inventory.Put(ctx, fmt.Sprintf("item.%02d", i), []byte(big)); err != nil {
			t.Fatal(err)
		}
	}

	for _, n := range nodes {
		n.start(t, env)
	}
	all := []string{nodes[0].name, nodes[1].name, nodes[2].name}
	placed := waitPlaced(t, nodes, all, folds, standbys)
	for _, n := range nodes {
		if code, body, _ := n.get(t, "/readyz"); code != 200 {
			t.Errorf("%s /readyz: %d %s", n.name, code, body)
		}
	}
	checkFleetStatus(t, nodes[2], placed)
	checkReplicas(t, c.js)
	checkPluginRecords(t, env, nodes[0].cfgPath, "routes", sha256Of(t, module), all)

	routes, err := c.js.KeyValue(ctx, "routes")
	if err != nil {
		t.Fatal(err)
	}
	wrote := 0
	put := func(host, value string) uint64 {
		t.Helper()
		rev, err := routes.Put(ctx, "route."+host, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		wrote++
		return rev
	}
	readEverywhere(t, nodes, placed["inventory"], "/v1/folds/inventory/raw/item.23", invRev, big)
	rev := put("a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`)
	readEverywhere(t, nodes, placed["routes"], "/v1/folds/routes/view/host/a", rev, "10.0.0.1:80=3,10.0.0.2:80=1")
	waitEffects(t, c.js, "ROUTE_EVENTS", "route.changed", wrote)

	// An export, on the owner of routes, lands in S3 under its epoch; on
	// its standby it is refused.
	owner := nodeNamed(t, nodes, placed["routes"].Owner)
	checkExport(t, c, env, owner, rev)
	waitPointerEpoch(t, c, "routes", placed["routes"].Epoch)
	standby := nodeNamed(t, nodes, placed["routes"].Standbys[0])
	if code, out, errOut := runCLI(t, env, "export", "--config", standby.cfgPath, "--fold", "routes"); code == command.ExitOK || !strings.Contains(out+errOut, "its owner exports it") {
		t.Errorf("export on the standby %s: exit %d, want a refusal naming the owner: %s %s", standby.name, code, out, errOut)
	}

	// SIGTERM on the owner of routes: it hands its folds over and exits 0.
	stopped := time.Now()
	owner.proc.signal(t, syscall.SIGTERM)
	if code := owner.proc.waitExit(t, prodWait); code != 0 {
		t.Fatalf("%s: exit %d after SIGTERM, want 0:\n%s", owner.name, code, owner.proc.log())
	}
	if !strings.Contains(owner.proc.log(), "left the fleet: every unit this node owned is handed over") {
		t.Errorf("%s did not log its hand-over:\n%s", owner.name, owner.proc.log())
	}
	t.Logf("%s exited %v after its SIGTERM", owner.name, time.Since(stopped).Round(time.Millisecond))
	rest, restNames := othersThan(nodes, owner)
	after := waitPlaced(t, rest, restNames, folds, standbys)
	t.Logf("its folds placed over %v %v after the SIGTERM", restNames, time.Since(stopped).Round(time.Millisecond))
	checkMoved(t, placed, after, owner.name)
	waitPointerEpoch(t, c, "routes", after["routes"].Epoch)
	rev = put("b", `{"upstreams":[{"addr":"10.0.0.3:80"}]}`)
	readEverywhere(t, rest, after["routes"], "/v1/folds/routes/view/host/b", rev, "10.0.0.3:80=1")
	waitEffects(t, c.js, "ROUTE_EVENTS", "route.changed", wrote)

	// Started again, it rejoins: the placement is the first one again.
	restarted := time.Now()
	owner.start(t, env)
	again := waitPlaced(t, nodes, all, folds, standbys)
	t.Logf("%s restarted: the first placement again after %v", owner.name, time.Since(restarted).Round(time.Millisecond))
	checkSameOwners(t, placed, again)
	waitPointerEpoch(t, c, "routes", again["routes"].Epoch)
	rev = put("c", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	readEverywhere(t, nodes, again["routes"], "/v1/folds/routes/view/host/c", rev, "10.0.0.2:80=1")
	readEverywhere(t, nodes, again["routes"], "/v1/folds/routes/view/host/a", rev, "10.0.0.1:80=3,10.0.0.2:80=1")
	waitEffects(t, c.js, "ROUTE_EVENTS", "route.changed", wrote)

	// SIGKILL on the owner of routes: no hand-over; its standby takes the
	// fold over once the owner's record stayed unchanged for node_ttl.
	victim := nodeNamed(t, nodes, again["routes"].Owner)
	heir := nodeNamed(t, nodes, again["routes"].Standbys[0])
	rest, restNames = othersThan(nodes, victim)
	third := nodeNamed(t, rest, slices.DeleteFunc(slices.Clone(restNames), func(n string) bool { return n == heir.name })[0])
	takeoversBefore := heir.metric(t, "foldhost_fleet_takeovers_total")
	killed := time.Now()
	victim.proc.signal(t, syscall.SIGKILL)
	victim.proc.waitExit(t, prodWait)
	waitGone(t, c.nats.admin.nc, fleetName, victim.name)
	checkReadsWhileOwnerDead(t, heir, third, victim.name, rev)
	dead := waitPlaced(t, rest, restNames, folds, standbys)
	t.Logf("%s killed: its folds placed over %v after %v (node_ttl %v)", victim.name, restNames,
		time.Since(killed).Round(time.Millisecond), victim.cfg.Fleet.NodeTTL)
	checkMoved(t, again, dead, victim.name)
	if dead["routes"].Owner != heir.name {
		t.Errorf("routes taken over by %s, not by its standby %s", dead["routes"].Owner, heir.name)
	}
	if got := heir.metric(t, "foldhost_fleet_takeovers_total"); got <= takeoversBefore {
		t.Errorf("%s: foldhost_fleet_takeovers_total %v after its takeover, %v before", heir.name, got, takeoversBefore)
	}
	waitPointerEpoch(t, c, "routes", dead["routes"].Epoch)
	rev = put("d", `{"upstreams":[{"addr":"10.0.0.4:80"}]}`)
	readEverywhere(t, rest, dead["routes"], "/v1/folds/routes/view/host/d", rev, "10.0.0.4:80=1")
	waitEffects(t, c.js, "ROUTE_EVENTS", "route.changed", wrote)

	// Restarted, it finds its old record and waits a node_ttl before it
	// takes its name over, then gets its folds back.
	restarted = time.Now()
	victim.start(t, env)
	final := waitPlaced(t, nodes, all, folds, standbys)
	t.Logf("%s restarted after its death: the first placement again after %v", victim.name, time.Since(restarted).Round(time.Millisecond))
	if !strings.Contains(victim.proc.log(), "waiting a node_ttl") {
		t.Errorf("%s, restarted after its death, did not wait out its old record:\n%s", victim.name, victim.proc.log())
	}
	checkSameOwners(t, placed, final)
	rev = put("e", `{"upstreams":[{"addr":"10.0.0.5:80"}]}`)
	readEverywhere(t, nodes, final["routes"], "/v1/folds/routes/view/host/e", rev, "10.0.0.5:80=1")
	readEverywhere(t, nodes, final["routes"], "/v1/folds/routes/view/host/d", rev, "10.0.0.4:80=1")
	waitEffects(t, c.js, "ROUTE_EVENTS", "route.changed", wrote)

	if v := c.nats.violations(); len(v) > 0 {
		t.Errorf("the NATS servers logged violations (a permission nats-server.conf lacks?):\n%s", strings.Join(v, "\n"))
	}
}

// checkReplicas checks that what the guide makes, and what foldhost
// finds, has three replicas.
func checkReplicas(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"KV_foldhost_fleet_prod", "KV_foldhost_export_leases", "KV_foldhost_plugins",
		"OBJ_foldhost_modules", "ROUTE_EVENTS", "KV_routes", "KV_inventory"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
		} else if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, got)
		}
	}
}

// checkExport runs the guide's export of routes on its owner: published
// at rev or later, under the S3 prefix.
func checkExport(t *testing.T, c *exampleCluster, env map[string]string, owner *exampleNode, rev uint64) {
	t.Helper()
	code, out, errOut := runCLI(t, env, "export", "--config", owner.cfgPath, "--fold", "routes", "--json")
	if code != command.ExitOK {
		t.Fatalf("export on %s: exit %d: %s %s", owner.name, code, out, errOut)
	}
	if rs := exportResults(t, out); len(rs) != 1 || rs[0].Outcome != host.ExportPublished || rs[0].Cursor < rev {
		t.Fatalf("export on %s: %+v, want published at %d or later", owner.name, rs, rev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), prodWait)
	defer cancel()
	objs, err := c.s3.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &c.s3Bucket, Prefix: &c.s3Prefix})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs.Contents {
		keys = append(keys, *o.Key)
	}
	if !slices.Contains(keys, c.pointerObject("routes")) {
		t.Fatalf("no artifact pointer of routes under s3://%s/%s: %v", c.s3Bucket, c.s3Prefix, keys)
	}
}

// checkMoved checks that the folds gone's placement named moved to other
// nodes, each under a newer epoch, and the others kept their owners.
func checkMoved(t *testing.T, before, after map[string]httpapi.PartitionStatus, gone string) {
	t.Helper()
	for f, b := range before {
		a := after[f]
		switch {
		case b.Owner == gone && (a.Owner == gone || a.Epoch <= b.Epoch):
			t.Errorf("fold %s: owned by %s at epoch %d after %s left, by %s at %d before", f, a.Owner, a.Epoch, gone, b.Owner, b.Epoch)
		case b.Owner != gone && a.Owner != b.Owner:
			t.Errorf("fold %s: owned by %s after %s left, by %s before: only the leaving node's folds move", f, a.Owner, gone, b.Owner)
		}
	}
}

// checkSameOwners checks that every fold is owned as in the first
// placement.
func checkSameOwners(t *testing.T, first, now map[string]httpapi.PartitionStatus) {
	t.Helper()
	for f, p := range first {
		if now[f].Owner != p.Owner {
			t.Errorf("fold %s: owned by %s after the rejoin, by %s at first", f, now[f].Owner, p.Owner)
		}
	}
}

// checkReadsWhileOwnerDead reads route.c (at rev) of routes after its
// owner, the node named dead, was killed, before the takeover: its
// standby heir answers from its own copy; third, which does not fold it,
// answers 503 with Retry-After: 1 (unless the takeover already came: the
// test is not timed against node_ttl).
func checkReadsWhileOwnerDead(t *testing.T, heir, third *exampleNode, dead string, rev uint64) {
	t.Helper()
	code, body, h := heir.get(t, fmt.Sprintf("/v1/folds/routes/view/host/c?min_revision=%d", rev))
	if code != 200 || h.Get(host.NodeHeader) != heir.name {
		t.Errorf("a read through the standby %s with the owner dead: %d %s (answered by %q), want 200 from its copy", heir.name, code, body, h.Get(host.NodeHeader))
	}
	code, body, h = third.get(t, "/v1/folds/routes/view/host/c")
	if code == 503 && h.Get("Retry-After") == "1" {
		return
	}
	_, pbody, _ := third.get(t, "/v1/folds/routes/partitions")
	if strings.Contains(pbody, `"owner":"`+dead+`"`) {
		t.Errorf("a read through %s (which does not fold routes) with its owner %s dead: %d %s (Retry-After %q), want 503 with Retry-After 1",
			third.name, dead, code, body, h.Get("Retry-After"))
	} else {
		t.Logf("the takeover came before the read through %s: %d %s", third.name, code, body)
	}
}

// sha256Of is the hex sha256 of the file at path.
func sha256Of(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
