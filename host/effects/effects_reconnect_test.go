package effects_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"
)

// TestEffectsBatchInFlightAcrossAReconnect: a batch whose answer is lost
// because the connection dropped (the server stored it; its reply died
// with the connection) is settled promptly once NATS is back, not after
// the request's whole timeout: the fence shows it landed, and it is
// counted as found in the stream, published once. The request timeout
// here is five minutes; the settle is expected in well under one.
// Mutation caught: the publisher's requests not bounded by a reconnect
// (untilReconnect) wait out the five minutes.
func TestEffectsBatchInFlightAcrossAReconnect(t *testing.T) {
	b, s, fo, url := hosttest.EffectsSetup(t, 0)
	proxy := hosttest.NewCutProxyFake(t, url)
	var arm atomic.Bool
	testhook.Set(t, &testhook.EffectsStep, func(_ context.Context, step string) {
		if step == "before-publish" && arm.CompareAndSwap(true, false) {
			proxy.HoldReplies() // the batch goes out; its answer will not come back
		}
	})
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: proxy.URL()}, RequestTimeout: 5 * time.Minute},
		Folds: []host.FoldOptions{fo},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80"))
	hosttest.WaitFor(t, func() bool { e := f.Status().Effects; return e != nil && e.PublishedByThisNode == 1 && e.Outbox == 0 })

	arm.Store(true)
	hosttest.Put(t, b, "route.b", hosttest.Route("10.0.0.2:80"))
	// The batch is in the stream (the server stored it and answered into
	// the held connection).
	hosttest.WaitFor(t, func() bool {
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
		return err == nil && info.State.Subjects["route.changed"] == 2
	})
	if arm.Load() || hosttest.OutboxLen(f) != 1 {
		t.Fatalf("the batch was not held in flight (armed %v, outbox %d)", arm.Load(), hosttest.OutboxLen(f))
	}
	cut := time.Now()
	proxy.Cut()
	deadline := cut.Add(time.Minute)
	for hosttest.OutboxLen(f) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the batch in flight across the reconnect was not settled %v after it (request timeout 5m): effects %+v", time.Since(cut), f.Status().Effects)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("settled %v after the reconnect", time.Since(cut).Round(time.Millisecond))
	if e := f.Status().Effects; e.PublishedByThisNode != 1 || e.FoundInStream != 1 {
		t.Fatalf("effects %+v: want 1 published by this node, 1 found in the stream", e)
	}
	if got := streamEffects(t, s); len(got) != 2 {
		t.Fatalf("the stream holds %d effects, want 2: %q", len(got), got)
	}
}
