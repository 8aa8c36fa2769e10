package round

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/lease"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// liveFold is a fold.Follow running in the background.
type liveFold struct {
	store     *fold.Store
	loop      atomic.Pointer[fold.Loop]
	delivered atomic.Int64
	cancel    context.CancelFunc
	done      chan error
}

func followBucket(t *testing.T, b *natskv.Bucket, dir string) *liveFold {
	t.Helper()
	st, _, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &liveFold{store: st, cancel: cancel, done: make(chan error, 1)}
	go func() {
		_, err := fold.Follow(ctx, b.Feed(natskv.Scope{}, natskv.WatchOptions{}), st, fold.NopPlugin, fold.FollowConfig{
			Loop:   fold.LoopConfig{OnApplied: func(a fold.Applied) { f.delivered.Add(int64(a.Updates)) }},
			OnLoop: func(l *fold.Loop) { f.loop.Store(l) },
		})
		f.done <- err
	}()
	t.Cleanup(func() { f.stop(t) })
	return f
}

func (f *liveFold) stop(t *testing.T) {
	if f.cancel == nil {
		return
	}
	f.cancel()
	if err := <-f.done; err != nil {
		t.Errorf("fold stopped with %v", err)
	}
	f.cancel = nil
	f.store.Close()
}

// waitHead waits until the fold's cursor reaches the stream head.
func (f *liveFold) waitHead(t *testing.T, b *natskv.Bucket) protocol.Revision {
	t.Helper()
	ret, _, err := b.Retention(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f.store.Cursor().Rev < ret.Last || f.loop.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("fold at %v did not reach the head %d within 30s", f.store.Cursor(), ret.Last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return ret.Last
}

func putN(t *testing.T, b *natskv.Bucket, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := b.KV().Put(context.Background(), fmt.Sprintf("k%04d", i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRoundThenDeltaOnlyBootstrap: node A exports a live fold under the
// lease; node B bootstraps from the artifact and then receives only what
// was written after the artifact's cursor, ending identical to A.
func TestRoundThenDeltaOnlyBootstrap(t *testing.T) {
	_, nc := natstest.Start(t)
	ctx := context.Background()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "leases"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ls := lease.New(lb.KV(), lease.Options{})
	tr, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	const before, during, delta = 300, 50, 40
	putN(t, b, 0, before)
	a := followBucket(t, b, filepath.Join(t.TempDir(), "a"))
	a.waitHead(t, b)
	putN(t, b, before, during) // the loop is live while the round runs
	head := a.waitHead(t, b)

	if err := a.store.SetOrigin(fold.NewOrigin("routes", nil, time.Time{})); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Key: "routes", Holder: "node-a", TTL: time.Minute, StageDir: t.TempDir()}
	res, err := Run(ctx, a.loop.Load(), a.store, tr, ls, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || res.Outcome != artifact.Published || res.Cursor.Rev != head {
		t.Fatalf("round = %+v, want published at %d", res, head)
	}
	rec, err := ls.Read(ctx, "routes")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, err := rec.CompletedCursor(); err != nil || !ok || c != res.Cursor {
		t.Fatalf("lease record does not carry the exported cursor: %+v %v", rec, err)
	}
	// Another node in the same TTL: the lease is held, nothing exported.
	cfg.Holder = "node-c"
	if res2, err := Run(ctx, a.loop.Load(), a.store, tr, ls, cfg); err != nil || !res2.Skipped {
		t.Fatalf("second round within the TTL = %+v, %v; want skipped", res2, err)
	}

	putN(t, b, 1000, delta) // written after the artifact's cursor

	bDir := filepath.Join(t.TempDir(), "b")
	m, err := artifact.Download(t.Context(), tr, "routes", bDir, artifact.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Bucket != "routes" {
		t.Fatalf("manifest bucket %q, want routes", m.Bucket)
	}
	if c, _ := m.DecodeCursor(); c != res.Cursor {
		t.Fatalf("downloaded artifact at %v, exported %v", c, res.Cursor)
	}
	node := followBucket(t, b, bDir)
	final := node.waitHead(t, b)
	if got := node.delivered.Load(); got != delta {
		t.Fatalf("bootstrapped node received %d updates, want only the delta %d (not %d)", got, delta, before+during+delta)
	}
	a.waitHead(t, b)
	if da, db := storetest.DumpStore(t, a.store), storetest.DumpStore(t, node.store); !reflect.DeepEqual(da, db) {
		t.Fatalf("bootstrapped node differs from the exporter at %d", final)
	}
}

// idleSource is a fold.Source that delivers nothing until stopped: a loop
// that only serves requests.
type idleSource struct{ ch chan fold.Event }

func (s *idleSource) Events() <-chan fold.Event { return s.ch }
func (s *idleSource) Stop()                     {}
func (s *idleSource) Err() error                { return nil }

// TestRoundSupersededAbandonsTheLease: a slow exporter whose fold is behind
// the published pointer gets artifact.SupersededByNewer, the pointer stays, and the
// lease is freed at once for the next round.
func TestRoundSupersededAbandonsTheLease(t *testing.T) {
	ls := leaseOn(t)
	tr, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(st *fold.Store, holder string, now time.Time) Result {
		t.Helper()
		src := &idleSource{ch: make(chan fold.Event)}
		loop := fold.NewLoop(st, fold.NopPlugin, fold.LoopConfig{})
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { loop.Run(lctx, src); close(done) }()
		defer func() { cancel(); <-done }()
		res, err := Run(ctx, loop, st, tr, ls, Config{Key: "k", Holder: holder, TTL: time.Minute,
			StageDir: t.TempDir(), Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	fresh, stale := storetest.OpenStore(t), storetest.OpenStore(t)
	storetest.CommitN(t, fresh, 20)
	storetest.CommitN(t, stale, 5)
	if res := run(fresh, "fresh", leaseT0); res.Outcome != artifact.Published {
		t.Fatalf("fresh round = %+v", res)
	}
	ptr, _ := tr.Pointer(t.Context(), "k")
	// Two minutes later the fresh lease has expired; the stale node wins it,
	// exports, and is superseded.
	later := leaseT0.Add(2 * time.Minute)
	if res := run(stale, "stale", later); res.Skipped || res.Outcome != artifact.SupersededByNewer {
		t.Fatalf("stale round = %+v, want superseded", res)
	}
	if now, _ := tr.Pointer(t.Context(), "k"); string(now) != string(ptr) {
		t.Fatal("a superseded round moved the pointer")
	}
	// Abandoned: a third node wins the lease at the same instant.
	g, err := ls.TryAcquire(ctx, "k", "third", time.Minute, later)
	if err != nil || g == nil {
		t.Fatalf("lease not freed after a superseded round: %v %v", g, err)
	}
}

// leaseOn is a lease over a bucket of a fresh embedded server.
func leaseOn(t *testing.T) *lease.Lease {
	t.Helper()
	_, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(t.Context(), nc, natskv.BucketConfig{Name: "leases"}, natskv.Options{RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return lease.New(b.KV(), lease.Options{RequestTimeout: 5 * time.Second})
}

// leaseT0 is the tests' lease clock origin.
var leaseT0 = time.Unix(1_718_000_000, 0)

// TestSkippedRoundSaysWhatHoldsTheLease: a skipped round names whether the
// holder's round completed or never did (running, or crashed: its lease
// then holds until it expires), and the completion survives JSON.
func TestSkippedRoundSaysWhatHoldsTheLease(t *testing.T) {
	exp := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := Report{Fold: "f", Key: "f", Outcome: Skipped, LeaseHolder: "node-b", LeaseExpires: exp}
	if s := r.String(); !strings.Contains(s, "node-b holds") || !strings.Contains(s, "has not completed") || strings.Contains(s, "completed a round") {
		t.Errorf("running or crashed holder: %s", s)
	}
	r.LeaseCompleted = exp.Add(-time.Minute)
	if s := r.String(); !strings.Contains(s, "completed a round at 2026-12-01T09:59:00Z") {
		t.Errorf("completed holder: %s", s)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || !back.LeaseCompleted.Equal(r.LeaseCompleted) {
		t.Fatalf("JSON round trip: %s -> %+v (%v)", b, back, err)
	}
}
