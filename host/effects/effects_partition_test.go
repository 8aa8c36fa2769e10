package effects_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// byHost splits "op|host\nentry" effects by host, in order.
func byHost(effects []string) map[string][]string {
	out := map[string][]string{}
	for _, e := range effects {
		_, payload, _ := strings.Cut(e, "|")
		h, _, _ := strings.Cut(payload, "\n")
		out[h] = append(out[h], e)
	}
	return out
}

// TestEffectsPartitionedFoldPublishesEachOnce: the example router folded
// as 4 partitions (4 units, each with its own outbox and fence
// FENCE.P) publishes exactly the router's effects, once each: every
// host's effects in its own order (a host's key is in one partition; the
// partitions interleave), across a restart with effects waiting in the
// outboxes; several units' fences (FENCE.P) are used. Mutation caught:
// units that fold every key (each host's effects published by all 4).
// Not shown here: why each unit needs its own fence (a fence moved by
// another fold says nothing of this one's effects, so a shared one would
// forget a unit's batch whose ack was lost; RATIONALE.md, "Plugin
// effects").
func TestEffectsPartitionedFoldPublishesEachOnce(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	nc, b, s := routesAndEvents(t)
	const n = 4
	opts := host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: nc.ConnectedUrl()}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
			EffectsStream: "ROUTE_EVENTS", EffectsSubjects: []string{"route.changed"}, EffectsFence: "foldhost.fence.rt", BatchSize: 3, Partitions: n}},
	}
	m := &routerModel{entries: map[string]string{}}
	wait := func(r *hosttest.Running) {
		t.Helper()
		var rev uint64
		if ret, _, err := b.Retention(context.Background()); err == nil {
			rev = uint64(ret.Last)
		}
		for _, f := range r.H.Folds() {
			hosttest.WaitCursor(t, f, rev)
		}
		hosttest.WaitFor(t, func() bool {
			info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
			if err != nil || int(info.State.Subjects["route.changed"]) < len(m.want) {
				return false
			}
			for _, f := range r.H.Folds() {
				if hosttest.OutboxLen(f) != 0 {
					return false
				}
			}
			return true
		})
		got, want := byHost(streamEffects(t, s)), byHost(m.want)
		for h := range want {
			if !slices.Equal(got[h], want[h]) {
				t.Fatalf("host %s (partition %d): effects %q, want %q", h, protocol.PartitionOf("routes", "route."+h, n), got[h], want[h])
			}
		}
		if len(got) != len(want) {
			t.Fatalf("effects of %d hosts, want %d", len(got), len(want))
		}
	}

	r := hosttest.StartHost(t, opts)
	for _, f := range r.H.Folds() {
		// Caught up first: a state-sync collapses changes.
		hosttest.WaitState(t, f, httpapi.StateFollowing)
	}
	routeWorkload(t, b, m, rng, 150)
	wait(r)
	// Effects wait in the outboxes while the stream takes nothing; the
	// host stops; restarted, it publishes them, then the next ones.
	hosttest.UpdateStream(t, nc.ConnectedUrl(), "ROUTE_EVENTS", func(c *jetstream.StreamConfig) { c.Subjects = []string{"elsewhere", "foldhost.fence.>"} })
	before := len(m.want)
	last := routeWorkload(t, b, m, rng, 100)
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	hosttest.UpdateStream(t, nc.ConnectedUrl(), "ROUTE_EVENTS", func(c *jetstream.StreamConfig) { c.Subjects = []string{"route.changed", "foldhost.fence.>"} })
	r = hosttest.StartHost(t, opts)
	routeWorkload(t, b, m, rng, 50)
	wait(r)
	used := 0
	for p := range n {
		if info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(fmt.Sprintf("foldhost.fence.rt.%d", p))); err == nil && info.State.NumSubjects > 0 {
			used++
		}
	}
	if used < 2 || len(m.want) <= before {
		t.Fatalf("%d units' fences used, %d effects after the restart: the workload does not exercise several partitions", used, len(m.want)-before)
	}
}
