package effects_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// TestEffectsPoisonToDeadLetters: the effects stream takes messages of
// 512 bytes at most; the router folds seeded updates of short host names
// and of host names of 600 bytes, whose effects (payload "<host>\n<entry>")
// the stream refuses for good. Those become the fold's dead letters (an
// effect's id, subject, size and the server's reason; one WARN each;
// counted in the status), the others are published exactly, in order, and
// the outbox empties. A replay keeps the effects' dead letters. Mutation
// caught: the server's "message size exceeds maximum" taken as transient
// (the outbox blocks at the first oversize effect).
func TestEffectsPoisonToDeadLetters(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	url, b := hosttest.NATSServer(t)
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	const maxMsg = 512
	cfg := hosttest.EffectsStream("EV", "route.changed")
	cfg.MaxMsgSize = maxMsg
	s, err := js.CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r := hosttest.StartHost(t, host.Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
			EffectsStream: "EV", BatchSize: 5}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)

	m := &routerModel{entries: map[string]string{}}    // the effects that fit
	long := &routerModel{entries: map[string]string{}} // the poison ones
	longHost := func(i int) string { return fmt.Sprintf("%s.h%d.example.com", strings.Repeat("x", 600), i) }
	var last uint64
	for i := range 150 {
		mdl, host := m, fmt.Sprintf("h%d.example.com", rng.IntN(8))
		if rng.IntN(4) == 0 {
			mdl, host = long, longHost(rng.IntN(3))
		}
		if rng.IntN(6) == 0 {
			if err := b.KV().Delete(context.Background(), "route."+host); err != nil {
				t.Fatal(err)
			}
			mdl.del(host)
			rev, _, err := b.Retention(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			last = uint64(rev.Last)
			continue
		}
		addr := fmt.Sprintf("10.0.0.%d:80", rng.IntN(3))
		last = hosttest.Put(t, b, "route."+host, fmt.Sprintf(`{"upstreams":[{"addr":%q,"weight":1}]}`, addr))
		mdl.put(host, addr+"=1")
		if i == 140 && len(long.want) == 0 { // at least one, whatever the random draws
			last = hosttest.Put(t, b, "route."+longHost(9), `{"upstreams":[{"addr":"10.0.0.9:80","weight":1}]}`)
			long.put(longHost(9), "10.0.0.9:80=1")
		}
	}
	// A later effect that fits goes after them.
	last = hosttest.Put(t, b, "route.tail.example.com", `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
	m.put("tail.example.com", "10.0.0.1:80=1")
	hosttest.WaitCursor(t, f, last)

	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("the effects that fit: %s", d)
	}
	st := f.Status()
	if st.Effects.DeadLettered != uint64(len(long.want)) || st.Effects.Outbox != 0 || st.DeadLetters == nil || st.DeadLetters.Stored != int64(len(long.want)) {
		t.Fatalf("status effects %+v dead letters %+v: want %d effects dead-lettered", st.Effects, st.DeadLetters, len(long.want))
	}
	dls, err := f.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	prev := ""
	for _, d := range dls {
		e := d.Effect
		if e == nil || d.Op != fold.OpEffect || d.Key != "" || e.Subject != "route.changed" || e.Size <= maxMsg ||
			!strings.HasPrefix(e.ID, fmt.Sprintf("routes/%d/", d.Rev)) || !strings.Contains(d.Error, "message size exceeds maximum allowed (error 10054") {
			t.Fatalf("dead letter %+v (effect %+v)", d, e)
		}
		if !strings.Contains(logs.String(), `"effect":"`+e.ID+`"`) {
			t.Fatalf("no WARN names effect %s", e.ID)
		}
		got = append(got, e.ID)
		if prev >= e.ID && len(prev) == len(e.ID) {
			t.Fatalf("dead letters out of order: %s after %s", e.ID, prev)
		}
		prev = e.ID
	}
	if len(got) != len(long.want) {
		t.Fatalf("%d effect dead letters %q, want %d", len(got), got, len(long.want))
	}
	if n := strings.Count(logs.String(), "moved to the dead letters"); n != len(long.want) {
		t.Fatalf("%d WARN lines for %d poison effects", n, len(long.want))
	}
	res, err := f.ReplayDeadLetters(context.Background(), "")
	if err != nil || res.Effects != len(long.want) || res.Replayed != 0 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if dls, _ := f.DeadLetters(); len(dls) != len(long.want) {
		t.Fatalf("%d dead letters after the replay, want the %d effects kept", len(dls), len(long.want))
	}
	t.Logf("%d effects published, %d dead-lettered", len(m.want), len(long.want))
}

// TestEffectsMaxWaitReadiness: with effects_max_wait = 300ms, a stream
// that stops capturing the effects' subject makes /readyz answer 503 once
// the outbox's first effect has waited longer, the reason naming the wait
// and the publisher's error; once the stream captures it again the outbox
// drains and the fold is ready again. A fold with the wait disabled stays
// ready meanwhile. Mutation caught: readiness that ignores the outbox
// (readyz stays 200).
func TestEffectsMaxWaitReadiness(t *testing.T) {
	b, _, fo, url := hosttest.EffectsSetup(t, 0)
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	fo.EffectsMaxWait = 300 * time.Millisecond
	patient := fo
	patient.Name, patient.DataDir, patient.EffectsMaxWait = "patient", filepath.Join(t.TempDir(), "patient"), -1
	patient.Bucket, patient.EffectsFence = "routes", "foldhost.fence.patient"
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo, patient}})
	f, fp := r.H.Fold("routes"), r.H.Fold("patient")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	hosttest.WaitState(t, fp, httpapi.StateFollowing)
	web := httptest.NewServer(r.H.Handler())
	defer web.Close()
	readyz := func() (int, string) {
		code, body, err := hosttest.HTTPGetBody(web.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	drained := func() bool { return hosttest.OutboxLen(f) == 0 && hosttest.OutboxLen(fp) == 0 }
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`))
	hosttest.WaitFor(t, drained)
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz with the effects published: %d %s", code, body)
	}

	cfg := hosttest.EffectsStream("EV", "route.changed")
	cfg.Subjects = []string{"elsewhere", "foldhost.fence.>"}
	if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	last := hosttest.Put(t, b, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool { code, _ := readyz(); return code == http.StatusServiceUnavailable })
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "fold routes: effects: the outbox's first effect has waited") ||
		!strings.Contains(body, "more than effects_max_wait (300ms); 1 wait; last error: ") || strings.Contains(body, "fold patient") {
		t.Fatalf("readyz with the stream taking nothing: %d %s", code, body)
	}
	if st := f.Status(); st.Ready || st.Effects.MaxWaitSeconds != 0.3 || hosttest.OutboxLen(fp) != 1 {
		t.Fatalf("status %+v %+v (patient's outbox %d)", st, st.Effects, hosttest.OutboxLen(fp))
	}

	if _, err := js.UpdateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed")); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, drained)
	hosttest.WaitFor(t, func() bool { code, _ := readyz(); return code == http.StatusOK })
}

// TestEffectsPoisonOverMaxPayload: a server with max_payload 2048 and a
// stream without a size limit; an effect larger than max_payload (the
// client refuses to send it) becomes a dead letter saying so, and the
// effects before and after it are published in order. Mutation caught:
// nats.ErrMaxPayload taken as transient (the outbox blocks).
func TestEffectsPoisonOverMaxPayload(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Options{Dir: t.TempDir(), MaxPayload: 2048})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	b, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
			EffectsStream: "EV"}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	m := &routerModel{entries: map[string]string{}}
	big := strings.Repeat("y", 2100) + ".example.com"
	var last uint64
	for _, h := range []string{"a.example.com", big, "b.example.com"} {
		last = hosttest.Put(t, b, "route."+h, `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
		if h != big {
			m.put(h, "10.0.0.1:80=1")
		}
	}
	hosttest.WaitCursor(t, f, last)
	if d := diffEffects(waitEffects(t, s, f, len(m.want)), m.want); d != "" {
		t.Fatalf("the effects that fit: %s", d)
	}
	dls, err := f.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Effect == nil || !strings.Contains(dls[0].Error, "larger than the NATS server's max_payload (2048 bytes") ||
		dls[0].Effect.Size < 2100 || f.Status().Effects.DeadLettered != 1 {
		t.Fatalf("dead letters %+v, status %+v", dls, f.Status().Effects)
	}
}
