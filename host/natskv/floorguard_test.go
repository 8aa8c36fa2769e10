package natskv

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/natsload"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestFloorGuardTripsWhenRetentionOverrunsAStalledWatch: a whole-bucket watch
// whose reader stalls while a burst overruns a discard-old limit must end
// with fold.ErrCursorExpired (mid-watch) before it hands on anything past the
// gap, where a raw NATS watch silently skips the evicted messages.
func TestFloorGuardTripsWhenRetentionOverrunsAStalledWatch(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "overrun"})
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Discard = jetstream.DiscardOld
	cfg.MaxMsgs = 100
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	put(t, b, "k0", "first")
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 1}, WatchOptions{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The burst, while nobody reads: 20 MB of distinct keys.
	val := []byte(strings.Repeat("x", 2048))
	const n = 10000
	natsload.Publish(t, js, n, func(i int) *nats.Msg {
		return &nats.Msg{Subject: fmt.Sprintf("$KV.overrun.k%d", i+1), Data: val}
	})

	frontier := protocol.Revision(1)
	for ev := range w.Events() {
		if ev.Synced {
			continue
		}
		if ev.Rev != frontier+1 {
			t.Fatalf("watch handed on revision %d after %d: a gap passed the floor guard", ev.Rev, frontier)
		}
		frontier = ev.Rev
	}
	err = w.Err()
	var ce *CursorError
	if !errors.Is(err, fold.ErrCursorExpired) || !errors.As(err, &ce) || !ce.MidWatch {
		t.Fatalf("watch ended with %v after revision %d, want a mid-watch fold.ErrCursorExpired", err, frontier)
	}
	if ce.Cursor != frontier || ce.Retention.First <= frontier+1 {
		t.Fatalf("guard reported frontier %d first %d; delivered up to %d", ce.Cursor, ce.Retention.First, frontier)
	}
	t.Logf("delivered contiguously up to %d of %d, then: %v", frontier, n+1, err)
}

// TestWatchSurvivesServerRestart: a watch keeps delivering across a restart
// of the server (same port, same storage), and Stop leaves no consumer
// behind.
func TestWatchSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, 0)
	port := s.Port()
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "restart"})
	put(t, b, "a", "1")
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, w, 1); got[0] != 1 {
		t.Fatalf("got %v", got)
	}
	s.Shutdown()
	s2 := startServer(t, dir, port)
	// Wait for the client to reconnect, then write.
	deadline := time.Now().Add(20 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var rev protocol.Revision
	for rev == 0 {
		r, err := b.KV().Put(t.Context(), "b", []byte("2"))
		if err == nil {
			rev = protocol.Revision(r)
		} else if time.Now().After(deadline) {
			t.Fatalf("put after restart: %v", err)
		}
	}
	// The watcher re-arms itself from its frontier when the connection
	// comes back (a consumer re-created when its heartbeats time out
	// would resume unchecked: TestWatchRearmRefusesAGapMadeInTheOutage).
	restarted := time.Now()
	timeout := time.After(60 * time.Second)
	for got := false; !got; {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended at the restart: %v", w.Err())
			}
			if ev.Synced {
				continue // the marker after the initial value
			}
			if ev.Rev != rev {
				t.Fatalf("after restart got %+v, want revision %d", ev, rev)
			}
			got = true
		case <-timeout:
			t.Fatal("no delivery within 60s of the server restart")
		}
	}
	t.Logf("first delivery %v after the put that followed the restart", time.Since(restarted).Round(time.Millisecond))
	w.Stop()
	if w.Err() != nil {
		t.Fatalf("Err after Stop = %v", w.Err())
	}
	// No consumer left behind: the ordered consumer is deleted on Stop.
	js, _ := jetstream.New(nc)
	for {
		st, err := js.Stream(t.Context(), b.stream)
		if err == nil && st.CachedInfo().State.Consumers == 0 {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("consumers still on the stream after Stop: %v %v", st.CachedInfo().State.Consumers, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = s2
}

// TestWatchRearmRefusesAGapMadeInTheOutage: while the watch's client is
// cut off, the stream is written to and compacted past the watch's
// frontier. When the client reconnects, the watch re-arms through the
// resume check and ends with ErrCursorExpired, delivering nothing past the
// gap. The client's own recovery (what runs without the re-arm) resumes at
// the next sequence, which the server silently clamps to the first one it
// still has: the watch would hand on revision 4 after 1 and end with no
// error. A prefix watch: the floor guard, which would catch the gap in
// band, does not run on one.
func TestWatchRearmRefusesAGapMadeInTheOutage(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, 0)
	port := s.Port()
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "gap"})
	put(t, b, "k.1", "1")
	w, err := b.Watch(t.Context(), Scope{Prefixes: []string{"k."}}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got := collect(t, w, 1); got[0] != 1 {
		t.Fatalf("got %v", got)
	}
	s.Shutdown()

	// The outage: the server runs on another port, where the watch's
	// client cannot find it; revisions 2..4 are written and 1..3 purged.
	other := startServer(t, dir, 0)
	nc2 := connect(t, other.ClientURL())
	b2 := openBucket(t, nc2, BucketConfig{Name: "gap"})
	for i := 2; i <= 4; i++ {
		put(t, b2, fmt.Sprintf("k.%d", i), fmt.Sprint(i))
	}
	js, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "KV_gap")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(t.Context(), jetstream.WithPurgeSequence(4)); err != nil {
		t.Fatal(err)
	}
	nc2.Close()
	other.Shutdown()

	// Back on the watch's port.
	startServer(t, dir, port)
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); !errors.Is(err, fold.ErrCursorExpired) {
					t.Fatalf("the watch ended with %v, want ErrCursorExpired", err)
				}
				return
			}
			if ev.SettleOnly() {
				if ev.Settle > 1 {
					t.Fatalf("settled up to %d past a gap (2..3 were purged in the outage)", ev.Settle)
				}
				continue
			}
			if !ev.Synced {
				t.Fatalf("delivered revision %d past a gap (2..3 were purged in the outage): the resume was not checked", ev.Rev)
			}
		case <-timeout:
			t.Fatal("the watch neither ended nor delivered within 2m of the server's return")
		}
	}
}
