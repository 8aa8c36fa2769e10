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

// discardOld gives the bucket's stream a discard-old limit of maxMsgs
// messages: unrelated writes then evict the oldest messages, current
// values included.
func discardOld(t *testing.T, b *Bucket, maxMsgs int64) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Discard = jetstream.DiscardOld
	cfg.MaxMsgs = maxMsgs
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	return js
}

func openSettling(t *testing.T, nc interface{ ConnectedUrl() string }, b *Bucket) *Bucket {
	t.Helper()
	fast, err := OpenBucket(t.Context(), b.nc, BucketConfig{Name: b.name}, Options{RequestTimeout: 5 * time.Second, SettleInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return fast
}

// TestPrefixWatchClampIsCaught: a prefix watch whose reader stalls while a
// burst of in-scope and unrelated writes overruns a discard-old limit has
// its consumer clamped past updates of its scope that are gone. It must
// end with a mid-watch fold.ErrCursorExpired, and no settle mark may ever
// claim a revision below which an update of the scope was not delivered.
// Without the settle probe the watch goes on delivering past the gap with
// no error, and the fold diverges silently (the 343 missing keys).
func TestPrefixWatchClampIsCaught(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "clamp"})
	js := discardOld(t, b, 100)
	put(t, b, "k.first", "1") // revision 1
	b = openSettling(t, nc, b)
	w, err := b.Watch(t.Context(), Scope{Prefixes: []string{"k."}}, protocol.Cursor{Rev: 1}, WatchOptions{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The burst, while nobody reads: revision i+2 is k.i for even i (in
	// scope) and o.i for odd i, 20 MB in all.
	val := []byte(strings.Repeat("x", 2048))
	const n = 10000
	inScope := func(rev protocol.Revision) bool { return rev == 1 || (rev >= 2 && (rev-2)%2 == 0) }
	natsload.Publish(t, js, n, func(i int) *nats.Msg {
		key := fmt.Sprintf("o.%d", i)
		if i%2 == 0 {
			key = fmt.Sprintf("k.%d", i)
		}
		return &nats.Msg{Subject: "$KV.clamp." + key, Data: val}
	})

	delivered := map[protocol.Revision]bool{1: true}
	var high protocol.Revision = 1
	settles := 0
	timeout := time.After(2 * time.Minute)
	for {
		var ev fold.Event
		var ok bool
		select {
		case ev, ok = <-w.Events():
		case <-timeout:
			t.Fatalf("the watch did not end within 2m (delivered up to %d, %d settle marks): a clamp of its consumer went unnoticed", high, settles)
		}
		if !ok {
			break
		}
		if ev.Synced {
			if ev.Settle != 0 {
				t.Fatalf("a resume's Synced marker settled up to %d: it vouches for nothing", ev.Settle)
			}
			continue
		}
		if ev.SettleOnly() {
			settles++
			for r := protocol.Revision(1); r <= ev.Settle; r++ {
				if inScope(r) && !delivered[r] {
					t.Fatalf("settled up to %d, but revision %d of the scope was never delivered: the settle probe vouched for a clamped consumer", ev.Settle, r)
				}
			}
			continue
		}
		if !ev.Unsettled {
			t.Fatalf("revision %d of a resumed prefix watch handed on settled", ev.Rev)
		}
		if !inScope(ev.Rev) {
			t.Fatalf("revision %d is outside the scope", ev.Rev)
		}
		delivered[ev.Rev], high = true, ev.Rev
	}
	err = w.Err()
	var ce *CursorError
	if !errors.Is(err, fold.ErrCursorExpired) || !errors.As(err, &ce) || !ce.MidWatch {
		t.Fatalf("watch ended with %v after revision %d, want a mid-watch fold.ErrCursorExpired", err, high)
	}
	missed := 0
	for r := protocol.Revision(1); r <= high; r++ {
		if inScope(r) && !delivered[r] {
			missed++
		}
	}
	t.Logf("delivered up to %d (%d revisions of the scope below it never delivered), %d settle marks, then: %v", high, missed, settles, err)
}

// TestPrefixWatchSettlesQuietStretches: unrelated writes that evict old
// messages while the scope is quiet are no clamp. The settle probe carries
// the settled point over them (the scope's next message is looked up), so
// the watch neither ends nor settles below the head for long. Without the
// quiet settle, the first eviction past the scope's last delivery would end
// the watch as expired: a needless repair every time unrelated traffic
// turns the stream over.
func TestPrefixWatchSettlesQuietStretches(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "quiet"})
	discardOld(t, b, 100)
	first := put(t, b, "k.a", "1")
	b = openSettling(t, nc, b)
	w, err := b.Watch(t.Context(), Scope{Prefixes: []string{"k."}}, protocol.Cursor{Rev: first}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var head protocol.Revision
	for round := range 10 {
		// 50 unrelated writes, fewer than the limit, then wait until the
		// watch settled them: ten rounds turn the stream over five times.
		for i := range 50 {
			head = put(t, b, fmt.Sprintf("o.%d.%d", round, i), "x")
		}
		deadline := time.After(time.Minute)
		for settled := protocol.Revision(0); settled < head; {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("round %d: the watch ended: %v", round, w.Err())
				}
				if ev.Synced {
					continue // the resume's marker
				}
				if !ev.SettleOnly() {
					t.Fatalf("round %d: unexpected event %+v", round, ev)
				}
				settled = ev.Settle
			case <-deadline:
				t.Fatalf("round %d: not settled up to the head %d within a minute", round, head)
			}
		}
	}
	// The scope's next write is delivered, unsettled, then settled.
	rev := put(t, b, "k.b", "2")
	for {
		ev, ok := next(t, w)
		if !ok {
			t.Fatalf("the watch ended: %v", w.Err())
		}
		if ev.SettleOnly() {
			if ev.Settle >= rev {
				return
			}
			continue
		}
		if ev.Rev != rev || !ev.Unsettled {
			t.Fatalf("got %+v, want revision %d unsettled", ev, rev)
		}
	}
}
