package fold

import (
	"context"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// TestLoopSettlesThroughSettleMarks: a prefix watch's unsettled deliveries
// commit an unsettled cursor (settled where the source last vouched), and
// its settle marks settle it: alone when nothing is pending (moving the
// position over revisions outside the scope), with the pending batch
// otherwise. A loop that took unsettled deliveries as settled would commit
// a cursor whose resume check passes over a clamp (model_settle_test.go,
// "commits drop the unsettled flag").
func TestLoopSettlesThroughSettleMarks(t *testing.T) {
	src := newChanSource()
	l, st, stop := runLoop(t, src)
	send := func(ev Event) {
		t.Helper()
		select {
		case src.events <- ev:
		case <-time.After(2 * time.Minute):
			t.Fatal("the loop did not take an event within 2m")
		}
	}
	update := func(rev protocol.Revision, unsettled bool) Event {
		return Event{Update: put("k", rev, "v"), Unsettled: unsettled}
	}
	want := func(step string, c protocol.Cursor) {
		t.Helper()
		var got protocol.Cursor
		if err := l.Do(context.Background(), func(_ context.Context, tg Target) error { got = tg.Cursor(); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != c {
			t.Fatalf("%s: cursor %v, want %v", step, got, c)
		}
	}
	send(update(1, false))
	want("a settled delivery", protocol.Cursor{Rev: 1})
	send(update(3, true))
	send(update(5, true))
	want("unsettled deliveries", protocol.Cursor{Rev: 5, Unsettled: true, Settled: 1})
	send(Event{Settle: 5})
	want("a settle mark at the position", protocol.Cursor{Rev: 5})
	send(Event{Settle: 9})
	want("a settle mark past the position, nothing pending", protocol.Cursor{Rev: 9})
	send(update(11, true))
	send(Event{Settle: 20})
	want("a settle mark past a pending delivery", protocol.Cursor{Rev: 20})
	send(update(22, true))
	send(update(23, true))
	send(Event{Settle: 22})
	want("a settle mark below the last delivery", protocol.Cursor{Rev: 23, Unsettled: true, Settled: 22})
	send(Event{Settle: 21})
	want("an older settle mark", protocol.Cursor{Rev: 23, Unsettled: true, Settled: 22})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A new loop on the store starts from the stored settled point.
	src2 := newChanSource()
	l2 := NewLoop(st, NopPlugin, LoopConfig{Window: time.Hour, MaxBatch: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = l2.Run(ctx, src2)
	}()

	select {
	case src2.events <- update(25, true):
	case <-time.After(2 * time.Minute):
		cancel()
		<-done
		t.Fatal("the loop did not take an event within 2m")
	}
	var got protocol.Cursor
	if err := l2.Do(context.Background(), func(_ context.Context, tg Target) error { got = tg.Cursor(); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := (protocol.Cursor{Rev: 25, Unsettled: true, Settled: 22}); got != want {
		t.Fatalf("after a restart: cursor %v, want %v", got, want)
	}
	cancel()
	<-done
	// The stored cursor reads back as it was committed.
	dir := st.Dir()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if c != got {
		t.Fatalf("reopened: cursor %v, want %v", c, got)
	}
}
