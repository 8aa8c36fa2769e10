package natskv

import (
	"fmt"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  delivery
		ok    bool
	}{
		{"$JS.ACK.KV_b.c1.1.42.7.1700000000000000001.3", delivery{dseq: 7, sseq: 42, time: 1700000000000000001, pending: 3}, true},
		{"$JS.ACK._.ACCHASH.KV_b.c1.1.42.7.1700000000000000001.3.tok", delivery{dseq: 7, sseq: 42, time: 1700000000000000001, pending: 3}, true},
		{"$JS.ACK.dom.ACCHASH.KV_b.c1.1.42.7.5.0", delivery{dseq: 7, sseq: 42, time: 5, pending: 0}, true},
		{"$JS.ACK.dom.ACCHASH.KV_b.c1.1.42.7.5.0.tok.more", delivery{dseq: 7, sseq: 42, time: 5, pending: 0}, true},
		{"$JS.ACK.KV_b.c1.1.42.7.5", delivery{}, false},     // 8 tokens
		{"$JS.ACK.x.KV_b.c1.1.42.7.5.0", delivery{}, false}, // 10 tokens
		{"$JS.ACK.KV_b.c1.1.42.x7.5.0", delivery{}, false},  // not a number
		{"$JS.ACK.KV_b.c1.1.42..5.0", delivery{}, false},    // empty token
		{"$JS.NAK.KV_b.c1.1.42.7.5.0", delivery{}, false},   // not an ack subject
		{"", delivery{}, false},
	} {
		got, ok := parseAck(tc.reply)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseAck(%q) = %+v, %v; want %+v, %v", tc.reply, got, ok, tc.want, tc.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseAck("$JS.ACK._.H.KV_b.c1.1.42.7.1700000000000000001.3.tok") }); n != 0 {
		t.Errorf("parseAck allocates %v times", n)
	}
}

// TestWatchEventsCarryPendingAndOps: every update says how many messages
// the server still held after it (fold.Event.Behind), and deletes and
// purges arrive as such.
func TestWatchEventsCarryPendingAndOps(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "pending"})
	for i := range 4 {
		put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	if err := b.KV().Delete(t.Context(), "k1"); err != nil {
		t.Fatal(err)
	}
	if err := b.KV().Purge(t.Context(), "k2"); err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for {
		ev, ok := next(t, w)
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		if ev.Synced {
			break
		}
		got = append(got, fmt.Sprintf("%s@%d:%s:%d", ev.Key, ev.Rev, ev.Op, ev.Behind))
	}
	// The last message of each key, in stream order: k0@1, k3@4, the
	// delete of k1 (5), the purge of k2 (6).
	want := []string{"k0@1:put:3", "k3@4:put:2", "k1@5:delete:1", "k2@6:purge:0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state-sync delivered %v, want %v", got, want)
	}
	put(t, b, "k4", "live")
	if ev, _ := next(t, w); ev.Key != "k4" || ev.Rev != 7 || ev.Behind != 0 || ev.Time == 0 {
		t.Fatalf("live event %+v", ev)
	}
}

// TestWatchRecoversFromDroppedDeliveries: deliveries the subscription
// drops (an inbox made tiny, a reader that does not read: fault
// injection) show as a consumer sequence gap, and the watcher re-creates
// its consumer from the last revision it took, as the ordered consumer
// does: every revision arrives, once, in order, and the Synced marker
// follows the last.
func TestWatchRecoversFromDroppedDeliveries(t *testing.T) {
	defer func(c int, h time.Duration) { inboxCapacity, consumerHeartbeat = c, h }(inboxCapacity, consumerHeartbeat)
	inboxCapacity = 8
	// A gap at the end of what the server sent shows at the next
	// heartbeat.
	consumerHeartbeat = 200 * time.Millisecond
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "drops"})
	const n = 200
	for i := range n {
		put(t, b, fmt.Sprintf("k%03d", i), "v")
	}
	in := nc.Stats().InMsgs
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{}, WatchOptions{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The server sends the whole state-sync at once (well within its
	// first flow control window); the inbox holds 8 of it.
	deadline := time.Now().Add(30 * time.Second)
	for nc.Stats().InMsgs-in < n {
		if time.Now().After(deadline) {
			t.Fatalf("the client received %d messages in 30s, want %d", nc.Stats().InMsgs-in, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var revs []protocol.Revision
	for {
		ev, ok := next(t, w)
		if !ok {
			t.Fatalf("watch ended after %d updates: %v", len(revs), w.Err())
		}
		if ev.Synced {
			break
		}
		revs = append(revs, ev.Rev)
	}
	if len(revs) != n {
		t.Fatalf("%d updates before Synced, want %d", len(revs), n)
	}
	for i, r := range revs {
		if r != protocol.Revision(i+1) {
			t.Fatalf("update %d is revision %d, want %d (%v)", i, r, i+1, revs)
		}
	}
	put(t, b, "live", "v")
	if ev, _ := next(t, w); ev.Rev != n+1 {
		t.Fatalf("live event %+v, want revision %d", ev, n+1)
	}
}

// TestWatchRecreatesASilentConsumer: a consumer that goes silent (deleted
// on the server: no deliveries, no heartbeats) is re-created after two
// heartbeat periods, from the last revision the watch took, on the same
// connection. Heartbeats made short for the test.
func TestWatchRecreatesASilentConsumer(t *testing.T) {
	defer func(h time.Duration) { consumerHeartbeat = h }(consumerHeartbeat)
	consumerHeartbeat = 200 * time.Millisecond
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "silent", History: 5})
	put(t, b, "a", "1")
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got := collect(t, w, 1); got[0] != 1 {
		t.Fatalf("got %v", got)
	}
	if ev, _ := next(t, w); !ev.Synced {
		t.Fatalf("want the Synced marker, got %+v", ev)
	}
	st, err := b.js.Stream(t.Context(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range st.ListConsumers(t.Context()).Info() {
		names = append(names, name.Name)
	}
	if len(names) != 1 {
		t.Fatalf("consumers %v, want one", names)
	}
	if err := b.js.DeleteConsumer(t.Context(), b.stream, names[0]); err != nil {
		t.Fatal(err)
	}
	put(t, b, "a", "2")
	put(t, b, "b", "3")
	var evs []fold.Event
	timeout := time.After(30 * time.Second)
	for len(evs) < 2 {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("no delivery within 30s of the consumer's deletion (got %+v)", evs)
		}
	}
	if evs[0].Rev != 2 || evs[1].Rev != 3 || string(evs[0].Value) != "2" {
		t.Fatalf("after the re-creation got %+v, want revisions 2 and 3", evs)
	}
}
