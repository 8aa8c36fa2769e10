package effects_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// routerModel is the example router's effects contract (SPEC.md,
// "Effects"), computed by the test from the updates it makes: one effect
// per change of a host's entry.
type routerModel struct {
	entries map[string]string
	want    []string // "op|payload"
}

func (m *routerModel) put(host, entry string) {
	if old, ok := m.entries[host]; !ok || old != entry {
		m.want = append(m.want, "put|"+host+"\n"+entry)
	}
	m.entries[host] = entry
}

func (m *routerModel) del(host string) {
	if _, ok := m.entries[host]; ok {
		m.want = append(m.want, "delete|"+host+"\n")
	}
	delete(m.entries, host)
}

// routeWorkload makes n seeded updates of a few hosts (puts of a few
// entries, so some repeat one, and deletes) and records them in m.
func routeWorkload(t *testing.T, b *natskv.Bucket, m *routerModel, rng *rand.Rand, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		host := fmt.Sprintf("h%d.example.com", rng.IntN(8))
		if rng.IntN(5) == 0 {
			if err := b.KV().Delete(context.Background(), "route."+host); err != nil {
				t.Fatal(err)
			}
			m.del(host)
			rev, _, err := b.Retention(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			last = uint64(rev.Last)
			continue
		}
		addr, w := fmt.Sprintf("10.0.0.%d:80", rng.IntN(3)), 1+rng.IntN(2)
		last = hosttest.Put(t, b, "route."+host, fmt.Sprintf(`{"upstreams":[{"addr":%q,"weight":%d}]}`, addr, w))
		m.put(host, fmt.Sprintf("%s=%d", addr, w))
	}
	return last
}

// streamEffects reads the stream's messages in order as "op|payload",
// checking each one's subject and message id.
func streamEffects(t *testing.T, s jetstream.Stream) []string {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(msg.Subject, "foldhost.fence.") {
			continue
		}
		id := msg.Header.Get("Foldhost-Effect-Id")
		unit, _, _ := strings.Cut(id, "/") // the fold's, or one partition's (routes.P)
		if msg.Subject != "route.changed" || (unit != "routes" && !strings.HasPrefix(unit, "routes.")) || strings.Count(id, "/") != 2 {
			t.Fatalf("message %d: subject %q, id %q", seq, msg.Subject, id)
		}
		got = append(got, msg.Header.Get("Route-Op")+"|"+string(msg.Data))
	}
	return got
}

// waitEffects waits until the stream holds n messages and the fold's
// outbox is empty (nothing left to publish), then returns them.
func waitEffects(t *testing.T, s jetstream.Stream, f *host.Fold, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
		if err != nil {
			t.Fatal(err)
		}
		if int(info.State.Subjects["route.changed"]) >= n && hosttest.OutboxLen(f) == 0 {
			return streamEffects(t, s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d effects, want %d; outbox %d; status %+v %+v %s dropped %d", info.State.Subjects["route.changed"], n, hosttest.OutboxLen(f), f.Status().Effects, f.Status().Counters, f.Status().State, f.Store().EffectsDropped())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func diffEffects(got, want []string) string {
	if len(got) == len(want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		if i == len(got) {
			return ""
		}
		return fmt.Sprintf("first difference at %d: %q, want %q", i, got[i], want[i])
	}
	return fmt.Sprintf("%d effects, want %d:\n got %q\nwant %q", len(got), len(want), got, want)
}

// routesAndEvents is a NATS server with the bucket "routes" and the
// effects stream ROUTE_EVENTS capturing route.changed.
func routesAndEvents(t *testing.T) (*nats.Conn, *natskv.Bucket, jetstream.Stream) {
	t.Helper()
	_, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: 64}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := hosttest.EffectsStream("ROUTE_EVENTS", "route.changed")
	s, err := js.CreateStream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return nc, b, s
}

// TestEffectsPublishedExactlyInOrderAcrossRestarts: the example router
// (C build) folds seeded updates; the effects stream ends up holding
// exactly the router's effects, in order, once each, each with its id as
// Nats-Msg-Id. While the stream takes nothing (its subjects moved away)
// the effects wait in the outbox; the host is stopped without draining
// it; restarted (the store reopened), it publishes them before the next
// ones: nothing lost, nothing twice. Mutations caught: deleting an entry
// before its ack (the stopped host's would be lost), a publisher that
// skips a failed entry, an outbox not read in order.
func TestEffectsPublishedExactlyInOrderAcrossRestarts(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	nc, b, s := routesAndEvents(t)
	dir := t.TempDir()
	opts := host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: nc.ConnectedUrl()}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "routes"),
			EffectsStream: "ROUTE_EVENTS", EffectsSubjects: []string{"route.changed"}, BatchSize: 7}},
	}
	m := &routerModel{entries: map[string]string{}}

	// Live: published as folded. (Caught up first: a state-sync sees each
	// key's latest value only, so changes it collapses emit nothing.)
	r := hosttest.StartHost(t, opts)
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	hosttest.WaitCursor(t, f, routeWorkload(t, b, m, rng, 120))
	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("live: %s", d)
	}

	// The stream stops taking the subject: effects wait in the outbox.
	hosttest.UpdateStream(t, nc.ConnectedUrl(), "ROUTE_EVENTS", func(c *jetstream.StreamConfig) { c.Subjects = []string{"elsewhere", "foldhost.fence.>"} })
	published := len(m.want)
	hosttest.WaitCursor(t, f, routeWorkload(t, b, m, rng, 120))
	hosttest.WaitFor(t, func() bool {
		return hosttest.OutboxLen(f) == len(m.want)-published && f.Status().Effects.LastError != ""
	})
	if st := f.Status().Effects; st.PublishedByThisNode != uint64(published) || st.Outbox != int64(len(m.want)-published) {
		t.Fatalf("status %+v, want %d published, %d in the outbox", st, published, len(m.want)-published)
	}
	// The first waiting effect's wait grows while the stream takes nothing.
	w0 := f.Status().Effects.OutboxWaitSeconds
	hosttest.WaitFor(t, func() bool { return f.Status().Effects.OutboxWaitSeconds > w0 && w0 > 0 })
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	// Restarted with the stream taking it again: the waiting effects go
	// first, then the new ones.
	hosttest.UpdateStream(t, nc.ConnectedUrl(), "ROUTE_EVENTS", func(c *jetstream.StreamConfig) { c.Subjects = []string{"route.changed", "foldhost.fence.>"} })
	r = hosttest.StartHost(t, opts)
	f = r.H.Fold("routes")
	hosttest.WaitCursor(t, f, routeWorkload(t, b, m, rng, 60))
	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("after the restart: %s", d)
	}
	if st := f.Status().Effects; st.Outbox != 0 || st.OutboxWaitSeconds != 0 {
		t.Fatalf("status %+v: the outbox is empty", st)
	}
	if len(m.want) < 50 {
		t.Fatalf("only %d effects: the workload hardly changes anything", len(m.want))
	}
}

// TestEffectsStreamRefusedAtStart: a fold whose effects stream does not
// exist, or does not capture its effects subjects, does not start; the
// error names the stream and the subject.
func TestEffectsStreamRefusedAtStart(t *testing.T) {
	_, nc := natstest.Start(t)
	if _, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.*")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stream   string
		subjects []string
		want     string
	}{
		{"NOPE", nil, `effects_stream "NOPE" does not exist`},
		{"EV", []string{"route.changed.>"}, `it does not capture ["route.changed.>"] (it captures ["route.*" "foldhost.fence.>"])`},
		{"EV", []string{"other"}, `it does not capture ["other"]`},
	} {
		h, err := host.New(host.Options{
			Logger: hosttest.Quiet,
			NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: nc.ConnectedUrl()}},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"),
				EffectsStream: c.stream, EffectsSubjects: c.subjects}},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Start(context.Background())
		h.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start with effects_stream %q, subjects %q: %v, want %q", c.stream, c.subjects, err, c.want)
		}
	}
	// route.changed and route.* are captured: the start succeeds.
	for _, subjects := range [][]string{nil, {"route.changed"}, {"route.*"}} {
		h, err := host.New(host.Options{
			Logger: hosttest.Quiet,
			NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: nc.ConnectedUrl()}},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"),
				EffectsStream: "EV", EffectsSubjects: subjects}},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Start(context.Background())
		h.Close()
		if err != nil {
			t.Errorf("subjects %q: %v", subjects, err)
		}
	}
}

// TestEffectsOutsideTheSubjectsFailTheBatch: an effect to a subject the
// fold's effects subjects do not cover fails its batch as a plugin error
// (nothing committed: the outbox never holds what no stream takes).
func TestEffectsOutsideTheSubjectsFailTheBatch(t *testing.T) {
	_, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "other.>")); err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: nc.ConnectedUrl()}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"),
			EffectsStream: "EV"}},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	st := hosttest.WaitState(t, f, httpapi.StateFailed)
	if !strings.Contains(st.LastError, `subject "route.changed", outside the fold's effects subjects`) || st.Cursor != 0 || hosttest.OutboxLen(f) != 0 {
		t.Fatalf("status %+v (outbox %d)", st, hosttest.OutboxLen(f))
	}
}

// TestEffectsWithoutAStreamAreDropped: a fold without effects_stream drops
// its plugin's effects: the status counts them, one WARN says so however
// many there are, and nothing waits in the outbox. Mutation caught: a
// WARN per batch, or effects committed with no publisher to drain them.
func TestEffectsWithoutAStreamAreDropped(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	var logs syncbuf.Buffer
	r := hosttest.StartHost(t, host.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"), BatchSize: 1}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	}
	hosttest.WaitCursor(t, f, last)
	if st := f.Status().Effects; st == nil || st.Dropped != 5 || st.PublishedByThisNode != 0 || st.Stream != "" {
		t.Fatalf("effects status %+v, want 5 dropped", st)
	}
	if n := strings.Count(logs.String(), "no effects_stream"); n != 1 {
		t.Fatalf("%d WARN lines about dropped effects, want 1:\n%s", n, logs.String())
	}
	if n := hosttest.OutboxLen(f); n != 0 {
		t.Fatalf("%d effects in the outbox of a fold without a stream", n)
	}
}

// effectsBucketAndStream makes, on nc's server, the routes bucket (with
// history) and the effects stream EV capturing route.changed and the fences.
func effectsBucketAndStream(t *testing.T, nc *nats.Conn, history uint8) (*natskv.Bucket, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: history}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	return b, js, ev
}

// TestEffectsFenceOutlastsTheDuplicateWindow: the host stops (as a
// SIGKILL would) after the stream acknowledged a batch and before the
// outbox let go of it; it restarts after the stream's duplicate window
// has passed, so Nats-Msg-Id could no longer catch the repeat. The fence
// does: the restarted publisher reads that the batch landed and deletes
// it, and the stream holds every effect once. Mutation caught: a
// publisher that does not delete what the fence covers (the batch lands
// twice).
func TestEffectsFenceOutlastsTheDuplicateWindow(t *testing.T) {
	const window = 200 * time.Millisecond
	b, s, fo, url := hosttest.EffectsSetup(t, window)
	acked := make(chan struct{}, 1)
	var once sync.Once
	testhook.Set(t, &testhook.EffectsStep, func(ctx context.Context, step string) {
		if step != "after-ack" {
			return
		}
		once.Do(func() {
			acked <- struct{}{}
			<-ctx.Done() // the test stops the host here
		})
	})
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	m := &routerModel{entries: map[string]string{}}
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	for i := range 5 {
		hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
		m.put(fmt.Sprintf("h%d", i), "10.0.0.1:80=1")
	}
	select {
	case <-acked:
	case <-time.After(2 * time.Minute):
		t.Fatal("no batch was acknowledged")
	}
	left := hosttest.OutboxLen(f)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("the outbox was empty after the ack: nothing to repeat")
	}
	time.Sleep(3 * window) // the stream forgets the message ids
	r = hosttest.StartHost(t, o)
	f = r.H.Fold("routes")
	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("after the restart: %s", d)
	}
	if st := f.Status().Effects; st.FoundInStream == 0 {
		t.Fatalf("status %+v: the restart confirmed nothing through the fence", st)
	}
}

// TestEffectsTwoReplicasPublishOnce: two hosts fold the same bucket with
// the same plugin into their own stores and both publish to one stream.
// The router's effects name their update, so the two outboxes hold the
// same effects under the same ids however each replica batched: one
// update per batch on both, or one per batch against up to 64. The fence
// lets each chunk land once: the stream holds every effect once, in
// order, and at least one chunk was refused or confirmed because the
// other replica had moved the fence. In a third run the first replica
// stops halfway through the updates, and the second publishes the rest
// alone, again each effect once. Mutations caught: a batch without
// the expected fence sequence (effects land twice), effects filed under
// their batch's revision rather than their update's (with 64-update
// batches: effects land twice under different ids).
func TestEffectsTwoReplicasPublishOnce(t *testing.T) {
	for _, c := range []struct {
		sizes [2]int
		stop  bool
	}{{[2]int{1, 1}, false}, {[2]int{1, 64}, false}, {[2]int{1, 64}, true}} {
		sizes := c.sizes
		t.Run(fmt.Sprintf("batch_size %d and %d, first stops %v", sizes[0], sizes[1], c.stop), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			b, s, fo, url := hosttest.EffectsSetup(t, 0)
			var rs []*hosttest.Running
			for i, size := range sizes {
				fo.DataDir = filepath.Join(t.TempDir(), fmt.Sprint("replica", i))
				fo.BatchSize = size
				rs = append(rs, hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}))
				hosttest.WaitState(t, rs[i].H.Fold("routes"), httpapi.StateFollowing)
			}
			m := &routerModel{entries: map[string]string{}}
			last := routeWorkload(t, b, m, rng, 150)
			if c.stop {
				hosttest.WaitCursor(t, rs[0].H.Fold("routes"), last)
				if err := rs[0].Stop(t); err != nil {
					t.Fatal(err)
				}
				rs = rs[1:]
			}
			last = routeWorkload(t, b, m, rng, 150)
			for _, r := range rs {
				hosttest.WaitCursor(t, r.H.Fold("routes"), last)
			}
			got := waitEffects(t, s, rs[len(rs)-1].H.Fold("routes"), len(m.want))
			hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(rs[0].H.Fold("routes")) == 0 })
			if d := diffEffects(streamEffects(t, s), m.want); d != "" {
				t.Fatalf("two replicas: %s (first read %d)", d, len(got))
			}
			moves := 0
			for _, r := range rs {
				st := r.H.Fold("routes").Status()
				t.Logf("replica: %d batches; effects %+v", st.Counters.Batches, st.Effects)
				moves += int(st.Effects.FenceMoves + st.Effects.FoundInStream)
			}
			if c.stop {
				return
			}
			if moves == 0 {
				t.Fatal("no replica ever found the fence moved or a batch landed: the two did not compete")
			}
			if b0, b1 := rs[0].H.Fold("routes").Status().Counters.Batches, rs[1].H.Fold("routes").Status().Counters.Batches; sizes[0] != sizes[1] && b1 >= b0 {
				t.Fatalf("the replicas committed %d and %d batches: they batched alike, the test proves nothing", b0, b1)
			}
		})
	}
}

// TestEffectsStreamSettingsRefused: a stream that would break the fence
// is refused at the start, saying why: no atomic batches, a retention that
// removes the fence once consumed, a fence subject it does not capture.
// And an effect to the fence subject itself fails its batch. Mutation
// caught: any of the start checks removed (the start succeeds).
func TestEffectsStreamSettingsRefused(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg   jetstream.StreamConfig
		fence string
		want  string
	}{
		{jetstream.StreamConfig{Name: "NOATOM", Subjects: []string{"a.changed", "a.fence"}}, "a.fence", "effects_stream \"NOATOM\" cannot take the fold's effects:\n  - it does not allow atomic batch publishing"},
		{jetstream.StreamConfig{Name: "INTEREST", Subjects: []string{"b.changed", "b.fence"}, AllowAtomicPublish: true, Retention: jetstream.InterestPolicy}, "b.fence",
			"- it has Interest retention: it would remove the fence"},
		{jetstream.StreamConfig{Name: "NOFENCE", Subjects: []string{"c.changed"}, AllowAtomicPublish: true}, "",
			`- it does not capture ["foldhost.fence.routes"] (it captures ["c.changed"])`},
	} {
		if _, err := js.CreateStream(context.Background(), c.cfg); err != nil {
			t.Fatal(err)
		}
		h, err := host.New(host.Options{
			Logger: hosttest.Quiet,
			NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"),
				EffectsStream: c.cfg.Name, EffectsFence: c.fence}},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = h.Start(context.Background())
		h.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start with stream %s: %v, want %q", c.cfg.Name, err, c.want)
		}
	}
	// The fence on the subject the router's effects go to.
	if _, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed")); err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "r"),
			EffectsStream: "EV", EffectsFence: "route.changed"}},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	if st := hosttest.WaitState(t, f, httpapi.StateFailed); !strings.Contains(st.LastError, `subject "route.changed", a fold's effects fence`) || hosttest.OutboxLen(f) != 0 {
		t.Fatalf("status %+v (outbox %d)", st, hosttest.OutboxLen(f))
	}
}

// TestEffectToAnotherFoldsFenceRefused: an effect under foldhost.fence.
// (every fold's default fence), on a stream that captures it, fails its
// batch like one to the fold's own fence: published, it would move
// another fold's fence and make that fold take its next batch as landed.
// Mutation caught: the check of the namespace removed (the effect is
// committed to the outbox).
func TestEffectToAnotherFoldsFenceRefused(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "probe.>")); err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "probe-c"), DataDir: filepath.Join(t.TempDir(), "r"),
			EffectsStream: "EV"}},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "emit/probe.ok", "fine")
	hosttest.WaitFor(t, func() bool { return f.Status().Effects != nil && f.Status().Effects.PublishedByThisNode == 1 })
	hosttest.Put(t, b, "emit/foldhost.fence.other", "forged")
	if st := hosttest.WaitState(t, f, httpapi.StateFailed); !strings.Contains(st.LastError, `subject "foldhost.fence.other", a fold's effects fence`) || hosttest.OutboxLen(f) != 0 {
		t.Fatalf("status %+v (outbox %d)", st, hosttest.OutboxLen(f))
	}
}

// TestEffectsAReplicaJoiningByStateSyncWaitsForTheFence: a replica that
// starts empty beside a fold whose effects were published, while that
// fold holds effects it has not published yet (stopped before its
// publish), hydrates by a state-sync: its hydration's effects (the
// collapsed change, under ids of their own) are dropped, and its publisher
// holds until the fence passes the revision it caught up at. The first
// fold, restarted, publishes its own; an update past that revision moves
// the fence past it and ends the hold; then the first stops and the
// joined replica publishes alone. The stream holds every effect of the
// history once, in order. Mutations caught: no hold at the start (the
// replica's collapsed effects land first, the first fold's are deleted
// unpublished), the hydration's effects not dropped, a hold that does not
// end when the fence passes its point.
func TestEffectsAReplicaJoiningByStateSyncWaitsForTheFence(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	var block atomic.Bool // the first fold publishes nothing
	testhook.Set(t, &testhook.EffectsStep, func(ctx context.Context, step string) {
		if step == "before-publish" && block.Load() {
			<-ctx.Done()
		}
	})
	opts := func(dir string) host.Options {
		fo.DataDir = dir
		return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	}
	m := &routerModel{entries: map[string]string{}}
	putRoute := func(h, addr string) uint64 {
		m.put(h, addr+"=1")
		return hosttest.Put(t, b, "route."+h, fmt.Sprintf(`{"upstreams":[{"addr":%q,"weight":1}]}`, addr))
	}
	firstDir := filepath.Join(t.TempDir(), "first")
	first := hosttest.StartHost(t, opts(firstDir))
	hosttest.WaitState(t, first.H.Fold("routes"), httpapi.StateFollowing)
	for i := range 3 {
		putRoute(fmt.Sprintf("h%d", i), "10.0.0.1:80")
	}
	waitEffects(t, s, first.H.Fold("routes"), len(m.want))
	published := len(m.want)

	block.Store(true)
	putRoute("h0", "10.0.0.2:80")
	putRoute("h0", "10.0.0.3:80")
	last := putRoute("h3", "10.0.0.1:80")
	hosttest.WaitCursor(t, first.H.Fold("routes"), last)
	if n := hosttest.OutboxLen(first.H.Fold("routes")); n != 3 {
		t.Fatalf("the first fold's outbox holds %d effects, want 3", n)
	}
	if err := first.Stop(t); err != nil {
		t.Fatal(err)
	}
	block.Store(false)

	joined := hosttest.StartHost(t, opts(filepath.Join(t.TempDir(), "joined")))
	j := joined.H.Fold("routes")
	hosttest.WaitCursor(t, j, last)
	hosttest.WaitFor(t, func() bool {
		st := j.Status().Effects
		return strings.Contains(st.Held, "passes revision") || (st.PublishedByThisNode+st.FoundInStream) > 0
	})
	if st := j.Status().Effects; st.DroppedJoining == 0 || (st.PublishedByThisNode+st.FoundInStream) != 0 || !strings.Contains(st.Held, fmt.Sprintf("passes revision %d", last)) {
		t.Errorf("the joined replica's effects: %+v, want its hydration's dropped, none published, held until revision %d", st, last)
	}

	first = hosttest.StartHost(t, opts(firstDir))
	waitEffects(t, s, first.H.Fold("routes"), len(m.want))
	if d := diffEffects(streamEffects(t, s), m.want); d != "" || j.Status().Effects.Held == "" {
		t.Fatalf("after the first fold's restart (the stream held %d before): %s; the joined replica's hold %q", published, d, j.Status().Effects.Held)
	}
	last = putRoute("h1", "10.0.0.2:80")
	hosttest.WaitCursor(t, first.H.Fold("routes"), last)
	waitEffects(t, s, first.H.Fold("routes"), len(m.want))
	hosttest.WaitFor(t, func() bool { return j.Status().Effects.Held == "" && hosttest.OutboxLen(j) == 0 })
	if err := first.Stop(t); err != nil {
		t.Fatal(err)
	}
	last = putRoute("h2", "10.0.0.3:80")
	putRoute("h4", "10.0.0.1:80")
	waitEffects(t, s, j, len(m.want))
	if d := diffEffects(streamEffects(t, s), m.want); d != "" {
		t.Fatalf("a replica joined by state-sync: %s", d)
	}
	if st := j.Status().Effects; (st.PublishedByThisNode + st.FoundInStream) == 0 {
		t.Fatalf("the joined replica published nothing alone: %+v", st)
	}
}

// TestEffectsAHoldThatCannotBeRecordedFailsTheStart: a node joining by
// state-sync beside a fold whose effects were published must record its
// hold before it syncs. With the record failing (fault injection), the
// fold fails, its reason naming the hold, and publishes nothing; once the
// record works, a resume holds and syncs. A point that cannot be recorded
// at the catch-up leaves the hold syncing and the error in the status,
// until the next commit records it at its cursor. Mutations caught: a
// record's error ignored (the fold syncs unheld and publishes its
// collapsed change, under ids of its own), a point's failed record not
// retried (the hold syncs for ever, every effect dropped).
func TestEffectsAHoldThatCannotBeRecordedFailsTheStart(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	opts := func(dir string) host.Options {
		fo.DataDir = dir
		return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	}
	var failAtCatchUp atomic.Bool
	testhook.Set(t, &testhook.EffectsStep, func(_ context.Context, step string) {
		if step == "caught-up" && failAtCatchUp.Swap(false) {
			failHoldRecords(t)
		}
	})
	first := hosttest.StartHost(t, opts(filepath.Join(t.TempDir(), "first")))
	hosttest.WaitState(t, first.H.Fold("routes"), httpapi.StateFollowing)
	for i := range 2 {
		hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
	}
	waitEffects(t, s, first.H.Fold("routes"), 2)
	if err := first.Stop(t); err != nil {
		t.Fatal(err)
	}
	heal := failHoldRecords(t)
	joined := hosttest.StartHost(t, opts(filepath.Join(t.TempDir(), "joined")))
	j := joined.H.Fold("routes")
	st := hosttest.WaitState(t, j, httpapi.StateFailed)
	if !strings.Contains(st.Reason, "effects hold") || st.Cursor != 0 {
		t.Errorf("the fold failed at cursor %d with %q, want its hold's record failure before it synced", st.Cursor, st.Reason)
	}
	failAtCatchUp.Store(true)
	heal()
	if err := j.Resume(); err != nil {
		t.Fatal(err)
	}
	// Its point cannot be recorded at the catch-up: it stays syncing, and
	// the status says why.
	hosttest.WaitFor(t, func() bool { return strings.Contains(j.Status().LastError, "effects hold's point") })
	if st := j.Status(); st.Cursor == 0 || !strings.Contains(st.Effects.Held, "catching up") {
		t.Fatalf("after a failed record of its point: cursor %d, hold %q, want synced, the hold still syncing", st.Cursor, st.Effects.Held)
	}
	heal()
	// The next commit records it, at its own cursor (its effects dropped
	// too: the hold was still syncing).
	rev := hosttest.Put(t, b, "route.h2", `{"upstreams":[{"addr":"10.0.0.2:80","weight":1}]}`)
	hosttest.WaitFor(t, func() bool {
		st := j.Status()
		return st.Effects.Held == fmt.Sprintf("joined midway: until the fence passes revision %d", rev) && st.LastError == ""
	})
	if n := len(streamEffects(t, s)); n != 2 {
		t.Fatalf("the stream holds %d effects, want the first fold's 2", n)
	}
}

// TestEffectsReleaseAHold: a node that lost its store hydrates the bucket
// again while the fence shows its effects published: it holds its
// publisher, with nothing to wait for: once its first effect waited past
// effects_max_wait it is not ready, the reason naming the hold, until an
// operator releases it; then it publishes from its outbox's first entry,
// and is ready again. Its hydration's effects stay dropped (not
// announced).
// Mutations caught: a release that leaves the hold (nothing published).
func TestEffectsReleaseAHold(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	fo.EffectsMaxWait = 300 * time.Millisecond
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	m := &routerModel{entries: map[string]string{}}
	putRoute := func(h, addr string) uint64 {
		m.put(h, addr+"=1")
		return hosttest.Put(t, b, "route."+h, fmt.Sprintf(`{"upstreams":[{"addr":%q,"weight":1}]}`, addr))
	}
	r := hosttest.StartHost(t, o)
	hosttest.WaitState(t, r.H.Fold("routes"), httpapi.StateFollowing)
	putRoute("h0", "10.0.0.1:80")
	waitEffects(t, s, r.H.Fold("routes"), 1)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(fo.DataDir); err != nil {
		t.Fatal(err)
	}
	putRoute("h1", "10.0.0.1:80") // folded by the hydration: not announced
	m.want = m.want[:1]
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	last := putRoute("h2", "10.0.0.2:80")
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		return hosttest.OutboxLen(f) == 1 && !st.Ready && strings.Contains(st.Reason, "held, joined midway")
	})
	if err := f.ReleaseEffects(); err != nil {
		t.Fatal(err)
	}
	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("after the release: %s", d)
	}
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })
	if err := f.ReleaseEffects(); !errors.Is(err, httpapi.ErrNothingHeld) {
		t.Fatalf("a second release: %v, want ErrNothingHeld", err)
	}
}

// TestEffectsBootstrappedReplicaWaitsForTheExporter: a replica bootstrapped
// from an artifact of a fold that had effects unpublished when it exported
// (stopped before its publish) drops them (they are the exporter's) and
// holds its publisher until the fence covers the last effect the exporter
// filed. Its own effects of later updates wait; the exporter, restarted,
// publishes its own, which ends the hold; then the bootstrapped replica
// publishes alone. The stream holds every effect of the history once, in
// order. A node bootstrapped from an artifact whose effects were all
// published ends its hold with nothing of its own to publish. Mutations
// caught: no hold at the bootstrap (the replica's later effect lands
// first, and the exporter's are deleted unpublished), a held publisher
// with an empty outbox that does not read the fence (held for good).
func TestEffectsBootstrappedReplicaWaitsForTheExporter(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	var block atomic.Bool // the exporter publishes nothing
	testhook.Set(t, &testhook.EffectsStep, func(ctx context.Context, step string) {
		if step == "before-publish" && block.Load() {
			<-ctx.Done()
		}
	})
	store, err := dirstore.New(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	opts := func(dir string) host.Options {
		fo.DataDir = dir
		return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo},
			Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}, Logger: hosttest.Quiet}
	}
	m := &routerModel{entries: map[string]string{}}
	putRoute := func(h, addr string) uint64 {
		m.put(h, addr+"=1")
		return hosttest.Put(t, b, "route."+h, fmt.Sprintf(`{"upstreams":[{"addr":%q,"weight":1}]}`, addr))
	}
	exporterDir := filepath.Join(t.TempDir(), "exporter")
	exporter := hosttest.StartHost(t, opts(exporterDir))
	hosttest.WaitState(t, exporter.H.Fold("routes"), httpapi.StateFollowing)
	putRoute("h0", "10.0.0.1:80")
	putRoute("h1", "10.0.0.1:80")
	waitEffects(t, s, exporter.H.Fold("routes"), len(m.want))
	block.Store(true)
	putRoute("h0", "10.0.0.2:80")
	last := putRoute("h2", "10.0.0.1:80")
	hosttest.WaitCursor(t, exporter.H.Fold("routes"), last)
	if err := exporter.Stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ExportStopped(context.Background(), opts(exporterDir), "routes", true); err != nil {
		t.Fatal(err)
	}
	block.Store(false)

	joinedDir := filepath.Join(t.TempDir(), "joined")
	if _, err := host.Bootstrap(context.Background(), opts(joinedDir), "routes", host.BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}
	joined := hosttest.StartHost(t, opts(joinedDir))
	j := joined.H.Fold("routes")
	hosttest.WaitState(t, j, httpapi.StateFollowing)
	hosttest.WaitCursor(t, j, putRoute("h3", "10.0.0.1:80"))
	hosttest.WaitFor(t, func() bool {
		st := j.Status().Effects
		return st.Held != "" && hosttest.OutboxLen(j) == 1 || (st.PublishedByThisNode+st.FoundInStream) > 0
	})
	if st := j.Status().Effects; (st.PublishedByThisNode + st.FoundInStream) != 0 {
		t.Errorf("the bootstrapped replica published %d effects before the exporter's: %+v", (st.PublishedByThisNode + st.FoundInStream), st)
	}

	exporter = hosttest.StartHost(t, opts(exporterDir))
	waitEffects(t, s, exporter.H.Fold("routes"), len(m.want))
	hosttest.WaitFor(t, func() bool { return j.Status().Effects.Held == "" && hosttest.OutboxLen(j) == 0 })
	if err := exporter.Stop(t); err != nil {
		t.Fatal(err)
	}
	putRoute("h4", "10.0.0.1:80")
	waitEffects(t, s, j, len(m.want))
	if d := diffEffects(streamEffects(t, s), m.want); d != "" {
		t.Fatalf("a replica bootstrapped from an artifact: %s", d)
	}

	// From an artifact whose effects were all published, a node holds
	// nothing for long: the fence covers the exporter's last effect, and
	// the hold ends with no effect of its own to publish.
	if err := joined.Stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ExportStopped(context.Background(), opts(joinedDir), "routes", true); err != nil {
		t.Fatal(err)
	}
	thirdDir := filepath.Join(t.TempDir(), "third")
	if _, err := host.Bootstrap(context.Background(), opts(thirdDir), "routes", host.BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}
	third := hosttest.StartHost(t, opts(thirdDir)).H.Fold("routes")
	hosttest.WaitFor(t, func() bool {
		return third.Status().State == httpapi.StateFollowing && third.Status().Effects.Held == ""
	})
}

// TestEffectsPublishedOnceTheFoldCaughtUp: a fold that starts with a
// backlog (here the state-sync of a bucket of 600 hosts, one update a
// batch) publishes no effect before it has caught up with it, then all of
// them, in order. Mutation caught: the publisher not waiting for the
// catch-up (it publishes while the fold is hydrating).
func TestEffectsPublishedOnceTheFoldCaughtUp(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	var folding atomic.Pointer[host.Fold]
	var early atomic.Int64 // publishes begun while the fold was hydrating
	testhook.Set(t, &testhook.EffectsStep, func(_ context.Context, step string) {
		if f := folding.Load(); step == "before-publish" && f != nil && f.Status().State == httpapi.StateHydrating {
			early.Add(1)
		}
	})
	m := &routerModel{entries: map[string]string{}}
	for i := range 600 {
		h := fmt.Sprintf("h%03d", i)
		m.put(h, "10.0.0.1:80=1")
		hosttest.Put(t, b, "route."+h, `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
	}
	h, err := host.New(host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}, Logger: hosttest.Quiet,
		PluginCacheDir: os.Getenv("FOLDHOST_TEST_WASM_CACHE")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	folding.Store(h.Fold("routes")) // before Run starts the publisher
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if d := diffEffects(waitEffects(t, s, h.Fold("routes"), len(m.want)), m.want); d != "" {
		t.Fatalf("after the catch-up: %s", d)
	}
	if n := early.Load(); n > 0 {
		t.Fatalf("%d publishes began while the fold was hydrating", n)
	}
}

// replicaPair is two replicas of the router fold, behind and other, in
// data dirs of their own; set writes a route and records its effect in m.
type replicaPair struct {
	m                   *routerModel
	set                 func(h, addr string) uint64
	behindDir, otherDir string
	other               *hosttest.Running
	last                uint64 // the revision of the last route written
}

// foldBesideThenStop starts the two replicas (opts: a data dir's host
// options), writes n routes, waits until both folded them and their
// effects are published, and stops behind.
func foldBesideThenStop(t *testing.T, b *natskv.Bucket, s jetstream.Stream, opts func(dir string) host.Options, n int) *replicaPair {
	t.Helper()
	p := &replicaPair{m: &routerModel{entries: map[string]string{}},
		behindDir: filepath.Join(t.TempDir(), "behind"), otherDir: filepath.Join(t.TempDir(), "other")}
	p.set = func(h, addr string) uint64 {
		p.m.put(h, addr+"=1")
		return hosttest.Put(t, b, "route."+h, hosttest.Route(addr))
	}
	behind := hosttest.StartHost(t, opts(p.behindDir))
	p.other = hosttest.StartHost(t, opts(p.otherDir))
	for i := range n {
		p.last = p.set(fmt.Sprintf("h%d", i), "10.0.0.1:80")
	}
	hosttest.WaitCursor(t, behind.H.Fold("routes"), p.last)
	waitEffects(t, s, p.other.H.Fold("routes"), len(p.m.want))
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(behind.H.Fold("routes")) == 0 })
	if err := behind.Stop(t); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEffectsAReplicaRepairingBesideAnotherWaitsForTheFence: of two
// replicas of a fold on a history-1 bucket, one is down while the other
// folds on, and then holds effects it has not published (stopped before
// its publish); rewrites and a delete whose marker is purged expire the
// first one's cursor. At its restart it repairs, by each plan that folds
// a net change:
//   - a key-listing diff, and a re-list only (repair = "none"): the other
//     published after the first stopped, so the fence is past the last
//     effect the first filed: another replica publishes;
//   - a restore from the other's artifact, exported while it held its
//     unpublished effects: it published nothing after the first stopped
//     (the fence says nothing), but the artifact's node filed effects the
//     first never did;
//   - a restore from the artifact of a third node that joined by a
//     state-sync meanwhile (held, its effects dropped: it filed none), so
//     only its hold says another publisher may hold effects.
//
// The first attempt cannot record the hold (fault injection): it fails
// before folding anything, and the next one repairs. The repaired replica
// drops the repair's net change and holds its publisher until the fence
// passes the other's effects, keeping its own effects from then on (a
// restore's point is recorded before it folds: none is written after its
// last commit, where a crash would lose it). The other, restarted,
// publishes its own; then the repaired one publishes alone. The stream
// holds every effect of the history once, in order. Mutations caught: no
// hold at the repair (its net change lands first, and the other's
// unpublished effects are deleted), a re-list only or a restore not held,
// a restore's hold judged by the fence alone or blind to the artifact's
// own hold, a restore's point written when it ends, a hold's record
// failure ignored.
func TestEffectsAReplicaRepairingBesideAnotherWaitsForTheFence(t *testing.T) {
	for _, c := range []struct {
		mode protocol.RepairMode
		plan string
	}{
		{protocol.RepairAuto, "key-listing-diff"},
		{protocol.RepairNone, "relist-only"},
		{protocol.RepairRestore, "restore"},
		{protocol.RepairRestore, "restore-of-a-held-node"},
		{protocol.RepairRestore, "restore-of-a-quiet-node"},
	} {
		t.Run(c.plan, func(t *testing.T) { replicaRepairingBesideAnother(t, c.mode, c.plan) })
	}
}

func replicaRepairingBesideAnother(t *testing.T, mode protocol.RepairMode, variant string) {
	plan, _, _ := strings.Cut(variant, "-of-")
	restore, ofHeld, ofQuiet := plan == "restore", variant == "restore-of-a-held-node", variant == "restore-of-a-quiet-node"
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	var block atomic.Bool // the other replica publishes nothing
	var failAtRestoreDone atomic.Bool
	testhook.Set(t, &testhook.EffectsStep, func(ctx context.Context, step string) {
		switch {
		case step == "before-publish" && block.Load():
			<-ctx.Done()
		case step == "restore-done" && failAtRestoreDone.Swap(false):
			failHoldRecords(t) // a restore's hold must need no record after its last commit
		}
	})
	store, err := dirstore.New(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	scope := []string{"route."}
	if restore {
		scope = nil // a whole-bucket watch settles what it commits: its artifact's cursor can be resumed from
	}
	opts := func(dir string) host.Options {
		fo := host.FoldOptions{Name: "routes", Bucket: "rt", Scope: scope, Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"),
			DataDir: dir, Repair: mode, EffectsStream: "EV", BatchSize: 1}
		return host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo},
			Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}}
	}
	p := foldBesideThenStop(t, b, s, opts, 5)
	m, set, behindDir, otherDir, other, last := p.m, p.set, p.behindDir, p.otherDir, p.other, p.last
	cursorBefore := last
	// Every revision up to the cursor and the next is superseded or
	// purged below: the first retained revision is past cursor+1.
	block.Store(restore && !ofQuiet) // a restore's case: the fence stays at the first's last effect
	set("h0", "10.0.0.2:80")
	// The other folds h0 before it is written again below: a delivery
	// that skipped it (superseded, with History 1) would be a gap the
	// floor guard cannot tell from an eviction, and the other would
	// repair (a loaded machine's late consumer did).
	hosttest.WaitCursor(t, other.H.Fold("routes"), set("h4", "10.0.0.2:80"))
	if !restore || ofQuiet {
		waitEffects(t, s, other.H.Fold("routes"), len(m.want))
	}
	block.Store(true)
	set("h2", "10.0.0.2:80")
	if err := b.KV().Delete(context.Background(), "route.h1"); err != nil {
		t.Fatal(err)
	}
	m.del("h1")
	set("h3", "10.0.0.3:80")
	last = set("h0", "10.0.0.3:80")
	hosttest.WaitCursor(t, other.H.Fold("routes"), last)
	if restore && !ofHeld && !ofQuiet {
		if rep, err := other.H.Fold("routes").Export(context.Background(), true); err != nil || rep.(round.Report).Outcome != round.Published {
			t.Fatalf("export: %v %v", rep, err)
		}
	}
	if ofQuiet {
		// A node that folds without publishing effects (no effects_stream)
		// exports: its artifact says nothing of effects, only the fence
		// (past the first's last effect) tells the restore that the other
		// publishes.
		q := opts(filepath.Join(t.TempDir(), "quiet"))
		q.Folds[0].EffectsStream = ""
		silent := hosttest.StartHost(t, q)
		hosttest.WaitCursor(t, silent.H.Fold("routes"), last)
		if rep, err := silent.H.Fold("routes").Export(context.Background(), true); err != nil || rep.(round.Report).Outcome != round.Published {
			t.Fatalf("export: %v %v", rep, err)
		}
		if err := silent.Stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if ofHeld {
		// A node that joins now, by a state-sync, holds (the fence shows
		// the first's effects) at the revision it catches up at, and files
		// nothing: only its hold tells the restore of its artifact that
		// the other's effects may be unpublished.
		third := hosttest.StartHost(t, opts(filepath.Join(t.TempDir(), "third")))
		tf := third.H.Fold("routes")
		hosttest.WaitFor(t, func() bool {
			return tf.Status().Effects.Held == fmt.Sprintf("joined midway: until the fence passes revision %d", last)
		})
		if n := hosttest.OutboxLen(tf); n != 0 {
			t.Fatalf("the joining node filed %d effects, want none", n)
		}
		if rep, err := tf.Export(context.Background(), true); err != nil || rep.(round.Report).Outcome != round.Published {
			t.Fatalf("export: %v %v", rep, err)
		}
		if err := third.Stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Stop(t); err != nil {
		t.Fatal(err)
	}
	block.Store(false)
	if err := b.KV().PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}

	artifactAt := last
	if restore {
		// A write past the artifact's cursor: the restore's resume folds
		// it, and its effect is the fold's own (kept), the hold's point no
		// further than the artifact.
		last = set("h7", "10.0.0.7:80")
	}
	heal := failHoldRecords(t)
	failAtRestoreDone.Store(restore)
	behind := hosttest.StartHost(t, opts(behindDir))
	f := behind.H.Fold("routes")
	hosttest.WaitFor(t, func() bool { return f.Status().Repairs.Last != nil })
	if st := f.Status(); st.Repairs.Last.Outcome != "failed" || !strings.Contains(st.Repairs.Last.Error, "effects hold") || st.Cursor != cursorBefore {
		t.Fatalf("the first repair ended %q (%q) at cursor %d, want it failed on the hold's record before folding (cursor %d)",
			st.Repairs.Last.Outcome, st.Repairs.Last.Error, st.Cursor, cursorBefore)
	}
	if pending, err := f.Store().RepairPending(); err != nil || pending {
		t.Fatalf("after the failed attempt the store has a repair's batches (%t, %v), want none folded before its hold", pending, err)
	}
	heal() // the repair is retried
	if got := hosttest.WaitRepair(t, f, "done").Repairs.Last.Plan; got != plan {
		t.Fatalf("the repair ran plan %q, want %q", got, plan)
	}
	if restore {
		hosttest.WaitCursor(t, f, last) // the resume from the artifact's cursor
	}
	hosttest.WaitFor(t, func() bool {
		st := f.Status().Effects
		return strings.Contains(st.Held, "until the fence") || (st.PublishedByThisNode+st.FoundInStream) > 0
	})
	heal()
	st := f.Status().Effects
	if st.DroppedJoining == 0 || (st.PublishedByThisNode+st.FoundInStream) != 0 {
		t.Errorf("the repaired replica's effects: %+v, want its repair's dropped and none published", st)
	}
	switch want := fmt.Sprintf("until the fence covers %d/", artifactAt); {
	case ofHeld || ofQuiet:
		want = fmt.Sprintf("until the fence passes revision %d", artifactAt)
		fallthrough
	case restore:
		if !strings.Contains(st.Held, want) {
			// the artifact's point (the last effect its node filed, its
			// hold's, or its cursor), not the catch-up's: the fold's own
			// effects from there on are kept
			t.Errorf("the restored replica's hold %q, want %q", st.Held, want)
		}
		if n := hosttest.OutboxLen(f); n == 0 {
			t.Errorf("the restored replica's outbox is empty: the effect of the write past the artifact's cursor was dropped")
		}
	}
	// An effect of a write after the repair is the fold's own: kept (the
	// other files it too; the fence lets one through).
	dropped := st.DroppedJoining
	hosttest.WaitCursor(t, f, set("h6", "10.0.0.6:80"))
	if st := f.Status().Effects; st.DroppedJoining != dropped || hosttest.OutboxLen(f) == 0 {
		t.Errorf("after a write past the repair: %d effects dropped (%d before), outbox %d: want the new one kept", st.DroppedJoining, dropped, hosttest.OutboxLen(f))
	}
	other = hosttest.StartHost(t, opts(otherDir))
	waitEffects(t, s, other.H.Fold("routes"), len(m.want))
	if d := diffEffects(streamEffects(t, s), m.want); d != "" {
		t.Fatalf("after the other replica's restart: %s", d)
	}
	last = set("h4", "10.0.0.4:80")
	hosttest.WaitCursor(t, other.H.Fold("routes"), last)
	waitEffects(t, s, other.H.Fold("routes"), len(m.want))
	hosttest.WaitFor(t, func() bool { return f.Status().Effects.Held == "" && hosttest.OutboxLen(f) == 0 })
	if err := other.Stop(t); err != nil {
		t.Fatal(err)
	}
	set("h5", "10.0.0.5:80")
	waitEffects(t, s, f, len(m.want))
	if d := diffEffects(streamEffects(t, s), m.want); d != "" {
		t.Fatalf("a replica repaired beside another: %s", d)
	}
}
