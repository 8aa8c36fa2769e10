package effects_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
)

// routeChanged is how many route.changed messages s holds.
func routeChanged(t *testing.T, s jetstream.Stream) int {
	t.Helper()
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects["route.changed"])
}

// TestEffectsNoSyncKillPublishesOnce: the router fold with the store's
// defaults (NoSync commits, batches of up to 100 updates) publishes the
// effect of each of a few route changes, one batch each, and is SIGKILLed:
// pebble's WAL buffer dies with the process, so the store may reopen at an
// earlier cursor, and the restart re-folds the lost tail in one batch. The
// stream must still hold each change's effect once, for a plugin whose
// effects name their update (the router as built) and for one whose
// effects do not (router-c-plain, ABI minor 1's plain emit). Mutation
// caught: publishing entries before they are durable (Store.SyncOutbox
// removed): the plain-emit fold's re-folded tail files its effects under
// the batch's last revision, other ids than the published ones, and every
// one but the id the fence covers is published a second time (seen: 82
// effects for 41 changes). The naming fold passes either way (its re-fold
// files the same ids, which the fence covers): it guards the fence's side.
func TestEffectsNoSyncKillPublishesOnce(t *testing.T) {
	for _, c := range []struct{ name, dir, build string }{
		{"effects naming their update", "example-router", "router-c"},
		{"plain effects", "testdata", "router-c-plain"},
	} {
		t.Run(c.name, func(t *testing.T) { noSyncKill(t, hosttest.BuiltPlugin(t, c.dir, c.build)) })
	}
}

func noSyncKill(t *testing.T, plugin string) {
	srv, nc := natstest.Start(t)
	url := srv.ClientURL()
	b, _, ev := effectsBucketAndStream(t, nc, 64)
	data := filepath.Join(t.TempDir(), "routes")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: plugin, DataDir: data, EffectsStream: "EV"}}}
	r := hosttest.StartHost(t, o)
	hosttest.WaitState(t, r.H.Fold("routes"), httpapi.StateFollowing)
	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "route.seed", `{"upstreams":[{"addr":"10.9.0.1:80","weight":1}]}`))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	changes := 1
	for round := range 2 {
		cmd, out, stderr := hosttest.StartChild(t, killEffectsEnv+"=run", killEffectsURL+"="+url, killEffectsDir+"="+data,
			killEffectsPlugin+"="+plugin, killEffectsNoSync+"=1")
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "started" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child did not start: %s", stderr.String())
		}
		// Each change published before the next is made: one batch each.
		var last uint64
		for i := range 20 {
			last = hosttest.Put(t, b, fmt.Sprintf("route.r%dh%d", round, i), `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
			changes++
			deadline := time.Now().Add(time.Minute)
			for routeChanged(t, ev) < changes {
				if time.Now().After(deadline) {
					t.Fatalf("change %d never published: %s", changes, stderr.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		st, cur, err := fold.Open(data, fold.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Close()
		// Without the sync before a publish, the whole tail is lost here
		// (the cursor of the previous round): nothing filled pebble's WAL
		// block, nothing synced it.
		t.Logf("round %d: last change at revision %d, the killed store's cursor %d", round, last, cur.Rev)
	}

	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	rev, _, err := b.Retention(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hosttest.WaitCursor(t, f, uint64(rev.Last))
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 })
	got := streamEffects(t, ev)
	seen := map[string]int{}
	for _, e := range got {
		seen[e]++
	}
	dups := 0
	for e, n := range seen {
		if n > 1 {
			dups += n - 1
			t.Logf("%d times: %q", n, e)
		}
	}
	if len(got) != changes || dups > 0 {
		t.Fatalf("the stream holds %d effects for %d changes (%d repeated); status %+v", len(got), changes, dups, f.Status().Effects)
	}
}

// TestEffectsMaxWaitWhenTheFenceCannotBeRead: the effects stream is gone
// by the time the publisher first reads its fence (deleted after the
// start checked it; a missing permission to read messages does the same),
// so nothing is ever published. The fold must turn not ready once its
// outbox's first effect waited longer than effects_max_wait. Mutation
// caught: the outbox's head noted only after a fence read that succeeded
// (the fold stayed ready for good, its outbox growing).
func TestEffectsMaxWaitWhenTheFenceCannotBeRead(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed")); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL()}}, Logger: hosttest.Quiet,
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
			EffectsStream: "EV", EffectsMaxWait: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		h.Close()
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), "EV"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done; h.Close() }()
	f := h.Fold("routes")
	// A live effect: a fold that started on a bucket with history and
	// could not read its fence drops its hydration's (joinEffects).
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`))
	// Waited for as the reason, not as readiness lost: a loaded machine
	// showed the fold not yet ready at all ("hydrating") at the first look.
	deadline := time.Now().Add(20 * time.Second)
	for st := f.Status(); st.Ready || !strings.Contains(st.Reason, "effects_max_wait"); st = f.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("20s after an effect was committed that cannot be published (effects_max_wait 300ms): ready %v, reason %q, effects %+v",
				st.Ready, st.Reason, st.Effects)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEffectsFenceOfAnotherFold: two hosts fold one bucket through one
// plugin into folds of different names that were given one fence subject
// (a copy-pasted effects_fence). Each fold's effects are its own (ids
// "a/…" and "b/…"), so the stream must hold every change once per fold.
// A fence written by the other fold says nothing of this fold's outbox.
// Mutation caught: the fence's fold not checked (its cover, read as this
// fold's, deleted effects never published: lost).
func TestEffectsFenceOfAnotherFold(t *testing.T) {
	srv, nc := natstest.Start(t)
	url := srv.ClientURL()
	b, _, ev := effectsBucketAndStream(t, nc, 0)
	plugin := hosttest.BuiltPlugin(t, "example-router", "router-c")
	var folds []*host.Fold
	for _, name := range []string{"a", "b"} {
		r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Folds: []host.FoldOptions{{Name: name, Bucket: "routes", Plugin: plugin, DataDir: filepath.Join(t.TempDir(), name),
				EffectsStream: "EV", EffectsFence: "foldhost.fence.shared", BatchSize: 1 + len(folds)*3}}})
		folds = append(folds, r.H.Fold(name))
		hosttest.WaitState(t, r.H.Fold(name), httpapi.StateFollowing)
	}
	const n = 60
	var last uint64
	for i := range n {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), `{"upstreams":[{"addr":"10.0.0.1:80","weight":1}]}`)
	}
	for _, f := range folds {
		hosttest.WaitCursor(t, f, last)
		hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 })
	}
	per := map[string]int{}
	for _, e := range streamAuditAll(t, ev) {
		per[strings.SplitN(e, "/", 2)[0]]++
	}
	if per["a"] != n || per["b"] != n {
		t.Fatalf("effects in the stream per fold: %v, want %d each; status a %+v, b %+v", per, n, folds[0].Status().Effects, folds[1].Status().Effects)
	}
}

// streamAuditAll is the effect ids of every route.changed message.
func streamAuditAll(t *testing.T, s jetstream.Stream) []string {
	t.Helper()
	var ids []string
	for _, e := range streamAudit(t, s) {
		ids = append(ids, e.id)
	}
	return ids
}
