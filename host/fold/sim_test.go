package fold

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// manualClock is a Clock the test advances by hand: a timer fires only when
// Advance passes its deadline, and every arming is reported on armed, so
// the test knows what the loop is waiting for.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
	armed  chan time.Duration
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(1_700_000_000, 0), armed: make(chan time.Duration, 16)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer() Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock and fires every armed timer that is due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.armed && !t.at.After(c.now) {
			t.armed = false
			t.ch <- c.now
		}
	}
}

type manualTimer struct {
	c     *manualClock
	ch    chan time.Time
	at    time.Time
	armed bool
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	t.at, t.armed = t.c.now.Add(d), true
	t.c.mu.Unlock()
	t.c.armed <- d
}

func (t *manualTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.armed = false
	select {
	case <-t.ch:
	default:
	}
}

// failingTarget fails the commits its fail func names.
type failingTarget struct {
	*Store
	calls int
	fail  func(int) bool
}

func (f *failingTarget) Commit(c Commit) error {
	f.calls++
	if f.fail(f.calls) {
		return errors.New("injected commit failure")
	}
	return f.Store.Commit(c)
}

// TestLoopStepByStep drives the loop with a manual clock and a source that
// hands over one event at a time: the deterministic harness the repair
// simulation builds on. It checks the ordering contract of the package doc:
// nothing commits before the window ends; a failed commit keeps its batch
// and is retried exactly when its backoff ends; hooks and OnApplied run in
// order.
func TestLoopStepByStep(t *testing.T) {
	clock := newManualClock()
	st, _ := openTemp(t, Options{})
	target := &failingTarget{Store: st, fail: func(n int) bool { return n == 2 }}
	applied := make(chan Applied, 8)
	var commitErrs []error
	l := NewLoop(target, NopPlugin, LoopConfig{
		Window: 10 * time.Millisecond, MaxBatch: 100, Clock: clock,
		OnApplied:     func(a Applied) { applied <- a },
		OnCommitError: func(err error) { commitErrs = append(commitErrs, err) },
		Logger:        quiet,
	})
	src := newChanSource()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, src)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wantArmed := func(want time.Duration) {
		t.Helper()
		select {
		case d := <-clock.armed:
			if d != want {
				t.Fatalf("the loop armed %v, want %v", d, want)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("the loop never armed its %v timer", want)
		}
	}
	wantApplied := func(updates int, rev protocol.Revision) {
		t.Helper()
		select {
		case a := <-applied:
			if a.Updates != updates || a.Cursor.Rev != rev {
				t.Fatalf("applied %+v, want %d updates at cursor %d", a, updates, rev)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("no batch applied")
		}
	}

	// Batch 1: three updates; the first arms the window.
	src.send(t, 3) // when a send returns the loop has taken the event, so
	// the window's expiry below can only be handled after all three
	wantArmed(10 * time.Millisecond)
	if st.Cursor().Rev != 0 {
		t.Fatal("committed before the window ended")
	}
	clock.Advance(9 * time.Millisecond)
	if st.Cursor().Rev != 0 {
		t.Fatal("committed before the window ended")
	}
	clock.Advance(time.Millisecond)
	wantApplied(3, 3)

	// Batch 2: its commit fails; the batch is kept and retried after the
	// backoff (the window doubled), not before.
	src.events <- Event{Update: Update{Key: "k4", Rev: 4, Op: OpPut, Value: []byte("v")}}
	wantArmed(10 * time.Millisecond) // the window
	clock.Advance(10 * time.Millisecond)
	wantArmed(20 * time.Millisecond) // the backoff after the failure
	if len(commitErrs) != 1 || st.Cursor().Rev != 3 {
		t.Fatalf("after the failed commit: %d errors reported, cursor %v", len(commitErrs), st.Cursor())
	}
	clock.Advance(19 * time.Millisecond)
	if st.Cursor().Rev != 3 {
		t.Fatal("retried before the backoff ended")
	}
	clock.Advance(time.Millisecond)
	wantApplied(1, 4)
}
