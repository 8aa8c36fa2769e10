package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/tcpproxy"
	"github.com/foldhost/foldhost/protocol"
)

const roleOwner, roleStandby, roleNone = protocol.RoleOwner, protocol.RoleStandby, protocol.RoleNone

// fleetSpec is a fleet the bench runs in this process.
type fleetSpec struct {
	nodes    int // 1: one host, no fleet
	folds    int // f0, f1, …: each folds the bench's bucket
	plugin   string
	standbys int // each fold's (FoldOptions.Standbys: 0 is 0 here)
	ttl      FleetTTL
	// proxied: each node's NATS connection goes through a cutProxy of
	// its own (the takeover cuts it).
	proxied bool
	// store, when set, is every node's artifact store (but the bare
	// ones'), its export leases in a bucket of the fleet's own.
	store artifact.Store
}

// benchFleet is the nodes of a fleet the bench runs (n1, n2, …).
type benchFleet struct {
	b     *bench
	name  string // the fleet's ("": one node, no fleet)
	spec  fleetSpec
	dir   string
	nodes []*fleetNode
	// foldNames: f0, f1, …
	foldNames []string
	// stopping: nodes taken out of nodes (killed), being stopped.
	stopping sync.WaitGroup
	// bare: nodes started without spec.store.
	bare map[string]bool
}

// fleetNode is one node: a host, running once run was called.
type fleetNode struct {
	name  string
	h     *host.Host
	proxy *cutProxy // nil: connected to the server directly
	// stop ends the node's Run (it leaves the fleet, bounded by
	// LeaveTimeout) and closes it; nil before run.
	stop func() error
}

func (b *bench) newFleet(spec fleetSpec) *benchFleet {
	fl := &benchFleet{b: b, spec: spec, dir: b.nextDir(), bare: map[string]bool{}}
	for i := range spec.folds {
		fl.foldNames = append(fl.foldNames, fmt.Sprintf("f%d", i))
	}
	if spec.nodes > 1 {
		// Its bucket is foldhost_fleet_bench_<random>, deleted by close.
		fl.name = fmt.Sprintf("bench_%08x", rand.Uint32())
	}
	return fl
}

// leaseBucket is the bucket of the fleet's export leases.
func (fl *benchFleet) leaseBucket() string { return "foldhost_export_leases_" + fl.name }

// folds are the fleet's folds' names.
func (fl *benchFleet) folds() []string { return fl.foldNames }

// nodeNames are n1..n<nodes>.
func (fl *benchFleet) nodeNames() []string {
	var out []string
	for i := range fl.spec.nodes {
		out = append(out, fmt.Sprintf("n%d", i+1))
	}
	return out
}

// options are node's host options, connected to natsURL.
func (fl *benchFleet) options(node, natsURL string) host.Options {
	standbys := fl.spec.standbys
	if standbys == 0 {
		standbys = -1 // FoldOptions: 0 is the default (1), below 0 none
	}
	var folds []host.FoldOptions
	for _, f := range fl.folds() {
		folds = append(folds, host.FoldOptions{Name: f, Bucket: fl.b.bucket, Plugin: fl.spec.plugin, DataDir: filepath.Join(fl.dir, node, f),
			PluginCallTimeout: wasm.NoCallTimeout, Standbys: standbys})
	}
	o := host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: natsURL, Name: "foldhost-bench-" + node}},
		Admin:          host.AdminOptions{Node: node},
		PluginCacheDir: fl.b.cacheDir,
		Logger:         fl.b.quietLog,
		Folds:          folds,
	}
	if fl.name != "" {
		// LeaveTimeout: a stop hands over what it can within a heartbeat
		// (a node whose connection was cut cannot), and is not timed.
		o.Fleet = host.FleetOptions{Name: fl.name, Advertise: node + ":0", Heartbeat: fl.spec.ttl.Heartbeat, NodeTTL: fl.spec.ttl.NodeTTL,
			LeaveTimeout: fl.spec.ttl.Heartbeat}
	}
	if fl.spec.store != nil && !fl.bare[node] {
		o.Artifacts = host.ArtifactOptions{Store: fl.spec.store, Where: "bench", Holder: node, LeaseBucket: fl.leaseBucket()}
	}
	return o
}

// startAll starts every node, one after the other: each joins the fleet
// (its record written) and folds nothing until run.
func (fl *benchFleet) startAll(ctx context.Context) error {
	for _, name := range fl.nodeNames() {
		n, err := fl.start(ctx, name)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		fl.nodes = append(fl.nodes, n)
	}
	return nil
}

// start starts node name (a node restarted under its name waits a
// node_ttl to take its name over).
func (fl *benchFleet) start(ctx context.Context, name string) (*fleetNode, error) {
	n := &fleetNode{name: name}
	natsURL := fl.b.url
	if fl.spec.proxied {
		var err error
		if n.proxy, natsURL, err = newCutProxy(fl.b.url); err != nil {
			return nil, err
		}
	}
	h, err := host.New(fl.options(name, natsURL))
	if err == nil {
		err = h.Start(ctx) // closes h when it fails
	}
	if err != nil {
		if n.proxy != nil {
			n.proxy.cut()
		}
		return nil, err
	}
	n.h = h
	return n, nil
}

// runAll runs every node.
func (fl *benchFleet) runAll(ctx context.Context) {
	for _, n := range fl.nodes {
		n.run(ctx)
	}
}

// run runs the node until stop.
func (n *fleetNode) run(ctx context.Context) {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.h.Run(rctx) }()
	var once sync.Once
	var err error
	n.stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
			n.h.Close()
			if n.proxy != nil {
				n.proxy.cut()
			}
		})
		return err
	}
}

// close stops every node at once, deletes the fleet's bucket and the
// nodes' stores; it returns what a node's Run ended with.
func (fl *benchFleet) close() error {
	errs := make([]error, len(fl.nodes))
	var wg sync.WaitGroup
	for i, n := range fl.nodes {
		wg.Go(func() {
			switch {
			case n.stop != nil:
				if err := n.stop(); err != nil {
					errs[i] = fmt.Errorf("node %s: %w", n.name, err)
				}
			case n.h != nil:
				n.h.Close()
				if n.proxy != nil {
					n.proxy.cut()
				}
			}
		})
	}
	wg.Wait()
	fl.stopping.Wait()
	if fl.name != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		buckets := []string{fleet.BucketPrefix + fl.name}
		if fl.spec.store != nil {
			buckets = append(buckets, fl.leaseBucket())
		}
		for _, b := range buckets {
			if err := fl.b.js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
				fmt.Fprintf(fl.b.warn, "foldhost: bench: could not delete the fleet's bucket %s: %v\n", b, err)
			}
		}
	}
	return errors.Join(append(errs, os.RemoveAll(fl.dir))...)
}

// copyOf is n's copy of fold: its role on n (a host without a fleet owns
// every fold), the owner's epoch as n knows it, its cursor and its state.
func (n *fleetNode) copyOf(fold string) (protocol.Role, protocol.Revision, uint64, httpapi.State) {
	cur, _, state := n.h.Fold(fold).Progress()
	fl := n.h.Fleet()
	if fl == nil {
		return roleOwner, 0, cur, httpapi.State(state)
	}
	st, _ := fl.Unit(protocol.Unit{Fold: fold})
	return st.Role, st.Epoch, cur, httpapi.State(state)
}

// failed is the first copy that failed, said so; nil when none did.
func (fl *benchFleet) failed() error {
	for _, n := range fl.nodes {
		for _, f := range fl.folds() {
			if _, _, _, st := n.copyOf(f); st == httpapi.StateFailed {
				return fmt.Errorf("fold %s failed on node %s: %s", f, n.name, n.h.Fold(f).Status().LastError)
			}
		}
	}
	return nil
}

// describe is every copy's state, for an error.
func (fl *benchFleet) describe() string {
	var out []string
	for _, n := range fl.nodes {
		for _, f := range fl.folds() {
			st := n.h.Fold(f).Status()
			role, epoch, _, _ := n.copyOf(f)
			out = append(out, fmt.Sprintf("%s on %s: %s at epoch %d, %s at %d (lag %d), NATS %s (%d drops, %q), last error %q",
				f, n.name, role, epoch, st.State, st.Cursor, st.Lag, st.NATS.State, st.NATS.Disconnects, st.NATS.LastError, st.LastError))
		}
	}
	return strings.Join(out, "; ")
}

// waitHead waits until every fold's owner folded up to head (owners),
// then until every copy of it did (copies: the owner and its standbys),
// each timed from t0. A fleet whose cursors all stay put for two minutes
// has stalled, and is said so.
func (fl *benchFleet) waitHead(ctx context.Context, t0 time.Time, head uint64) (owners, copies time.Duration, err error) {
	standbys := 0
	if fl.name != "" {
		standbys = min(fl.spec.standbys, fl.spec.nodes-1)
	}
	var last uint64
	moved, polls := time.Now(), 0
	err = waitUntil(ctx, func() (bool, error) {
		var sum uint64
		ownersAt, copiesAt := 0, 0
		for _, f := range fl.folds() {
			owned, atHead, folding := false, 0, 0
			for _, n := range fl.nodes {
				role, epoch, cur, _ := n.copyOf(f)
				sum += cur
				if role == roleNone {
					continue
				}
				folding++
				if cur >= head {
					atHead++
					// In a fleet an owner has an epoch (before its first
					// step a fold's role is its default's).
					owned = owned || (role == roleOwner && (fl.name == "" || epoch > 0))
				}
			}
			if owned {
				ownersAt++
			}
			if owned && atHead == folding && folding == 1+standbys {
				copiesAt++
			}
		}
		if owners == 0 && ownersAt == len(fl.folds()) {
			owners = time.Since(t0)
		}
		if copiesAt == len(fl.folds()) {
			copies = time.Since(t0)
			return true, nil
		}
		if sum != last {
			last, moved = sum, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			return false, fmt.Errorf("the fleet stalled: its folds' cursors stayed put for 2 minutes (%d of %d folds' owners at the head %d): %s",
				ownersAt, len(fl.folds()), head, fl.describe())
		}
		if polls++; polls%100 == 0 {
			// Per mille of a round, within the rounds' bar.
			all := max(1, head*uint64(len(fl.folds())*(1+standbys)))
			fl.b.prog.Update(fl.b.round.done*1000+int64(min(sum, all)*1000/all), max(1, fl.b.round.total)*1000, fl.b.round.what)
			return false, fl.failed()
		}
		return false, nil
	})
	return owners, copies, err
}

// startPlaced starts and runs every node, and waits until the fleet is
// placed at head (waitPlaced).
func (fl *benchFleet) startPlaced(ctx context.Context, head uint64) (map[string]*fleetNode, error) {
	if err := fl.startAll(ctx); err != nil {
		return nil, err
	}
	fl.runAll(ctx)
	return fl.waitPlaced(ctx, head)
}

// waitPlaced waits (up to two minutes) until every fold is owned by its
// placement's owner over the fleet's nodes, folded up to head there and
// on its standbys, and folded by no other node; it returns each fold's
// owner.
func (fl *benchFleet) waitPlaced(ctx context.Context, head uint64) (map[string]*fleetNode, error) {
	var names []string
	for _, n := range fl.nodes {
		names = append(names, n.name)
	}
	deadline := time.Now().Add(2 * time.Minute)
	owners, why := map[string]*fleetNode{}, ""
	err := waitUntil(ctx, func() (bool, error) {
		why = ""
		for _, f := range fl.folds() {
			p := protocol.Place(protocol.Unit{Fold: f}, names, fl.spec.standbys)
			for _, n := range fl.nodes {
				role, epoch, cur, st := n.copyOf(f)
				want := roleNone
				switch {
				case n.name == p.Owner:
					want = roleOwner
				case slices.Contains(p.Standbys, n.name):
					want = roleStandby
				}
				switch {
				case role != want:
					why = fmt.Sprintf("fold %s on %s: role %s, want %s", f, n.name, role, want)
				case want == roleOwner && epoch == 0:
					why = fmt.Sprintf("fold %s on %s: owner at no epoch yet", f, n.name)
				case want != roleNone && (st != httpapi.StateFollowing || cur < head):
					why = fmt.Sprintf("fold %s on %s (%s): %s at %d, want following at %d", f, n.name, role, st, cur, head)
				}
				if want == roleOwner {
					owners[f] = n
				}
			}
		}
		if why != "" && time.Now().After(deadline) {
			return false, fmt.Errorf("the fleet did not settle within 2 minutes: %s", why)
		}
		if why != "" {
			return false, fl.failed()
		}
		return true, nil
	})
	return owners, err
}

// cutProxy is a TCP proxy between a node and the NATS server: cut closes
// it for good (its listener, and every connection through it), so that
// the node loses the server as a killed process does (the server drops
// its connection and subscriptions, its record stops beating) and cannot
// reconnect.
type cutProxy struct{ p *tcpproxy.Proxy }

// newCutProxy proxies to the first server of natsURL, and returns the
// URL that reaches it through the proxy.
func newCutProxy(natsURL string) (*cutProxy, string, error) {
	first, _, _ := strings.Cut(natsURL, ",")
	u, err := url.Parse(first)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("the NATS URL %q has no host:port to proxy", natskv.Redact(first))
	}
	p, err := tcpproxy.New(u.Host)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	return &cutProxy{p}, u.String(), nil
}

// cut closes the proxy for good, and waits for its goroutines.
func (c *cutProxy) cut() { c.p.Close() }
