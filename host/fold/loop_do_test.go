package fold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// chanSource is a Source fed by the test over an unbuffered channel: when a
// send returns, the loop has taken the event.
type chanSource struct {
	events chan Event
	stop   chan struct{}
}

func newChanSource() *chanSource {
	return &chanSource{events: make(chan Event), stop: make(chan struct{})}
}

func (s *chanSource) Events() <-chan Event { return s.events }
func (s *chanSource) Stop()                {}
func (s *chanSource) Err() error           { return nil }

func (s *chanSource) send(t *testing.T, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		u := Update{Key: fmt.Sprintf("k%d", i), Rev: protocol.Revision(i), Op: OpPut, Value: []byte("v")}
		select {
		case s.events <- Event{Update: u}:
		case <-time.After(2 * time.Minute):
			t.Fatal("the loop did not take an event within 2m")
		}
	}
}

// runLoop runs a loop whose batches close only at 1000 updates or after an
// hour, so updates stay pending until a request flushes them.
// The returned func stops the loop and returns Run's error.
func runLoop(t *testing.T, src Source) (*Loop, *Store, func() error) {
	t.Helper()
	st, _ := openTemp(t, Options{})
	l := NewLoop(st, NopPlugin, LoopConfig{Window: time.Hour, MaxBatch: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = l.Run(ctx, src)
	}()
	stop := func() error {
		cancel()
		<-done
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return l, st, stop
}

// TestDoFlushesThePendingBatchFirst: a request sees every update the loop
// took, committed (an export's cursor is the applied cursor).
func TestDoFlushesThePendingBatchFirst(t *testing.T) {
	src := newChanSource()
	l, st, _ := runLoop(t, src)
	src.send(t, 5)
	if c := st.Cursor(); c.Rev != 0 {
		t.Fatalf("cursor %d before the request: the batch was not pending", c.Rev)
	}
	var seen protocol.Revision
	err := l.Do(context.Background(), func(_ context.Context, tg Target) error {
		seen = tg.Cursor().Rev
		return nil
	})
	if err != nil || seen != 5 {
		t.Fatalf("Do: %v, fn saw cursor %d, want 5", err, seen)
	}
}

// TestDoOnAStoppedLoop: Do on a loop whose Run returned fails at once
// instead of waiting for its context (a round on a fold whose watch was
// re-armed used to hang until shutdown, holding the lease).
func TestDoOnAStoppedLoop(t *testing.T) {
	l, _, stop := runLoop(t, newChanSource())
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	called := false
	err := l.Do(ctx, func(context.Context, Target) error { called = true; return nil })
	if !errors.Is(err, ErrLoopStopped) || called {
		t.Fatalf("Do on a stopped loop: %v (fn called: %v), want ErrLoopStopped", err, called)
	}
}

// TestDoWaitsForATakenRequest: once the loop took a request, Do returns
// only after fn did, even if its context ends first, so fn's effects never
// outlive Do (round.Run removes the artifact it staged after Do returns).
func TestDoWaitsForATakenRequest(t *testing.T) {
	l, _, _ := runLoop(t, newChanSource())
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseFn := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseFn) // before the loop's cleanup stops it: fn must return
	var finished atomic.Bool
	returned := make(chan error, 1)
	go func() {
		returned <- l.Do(ctx, func(context.Context, Target) error {
			close(started)
			<-release
			finished.Store(true)
			return nil
		})
	}()
	<-started
	cancel()
	select {
	case err := <-returned: // the bug: Do returned while fn still ran
		t.Fatalf("Do returned (%v) before fn finished", err)
	case <-time.After(200 * time.Millisecond):
	}
	releaseFn()
	if err := <-returned; err != nil || !finished.Load() {
		t.Fatalf("Do: %v, fn finished: %v", err, finished.Load())
	}
}
