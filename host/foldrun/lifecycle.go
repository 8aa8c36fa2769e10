package foldrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// stateCell is a fold's place in its life (httpapi.State). Every change is
// logged once, at the change, with the state it left.
type stateCell struct {
	mu    sync.Mutex
	s     httpapi.State
	since time.Time
	log   *slog.Logger
}

func newStateCell(log *slog.Logger) *stateCell {
	return &stateCell{s: httpapi.StateStarting, since: time.Now(), log: log}
}

// Load is the current state.
func (c *stateCell) Load() httpapi.State {
	s, _ := c.get()
	return s
}

// get is the current state and when the fold entered it.
func (c *stateCell) get() (httpapi.State, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s, c.since
}

// Store moves the fold to state to (nothing when it is there already).
func (c *stateCell) Store(to httpapi.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(to)
}

// CompareAndSwap moves the fold to state to if it is in state from.
func (c *stateCell) CompareAndSwap(from, to httpapi.State) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s != from {
		return false
	}
	c.setLocked(to)
	return true
}

func (c *stateCell) setLocked(to httpapi.State) {
	if c.s == to {
		return
	}
	from := c.s
	c.s, c.since = to, time.Now()
	// Logged under the lock: two transitions never log out of order.
	c.log.Info("fold state", "from", string(from), "to", string(to))
}

// diskPoll is how often a fold failed on a full disk checks whether the
// space it needs is free again.
const diskPoll = 10 * time.Second

// supervisor is what a fold's run loop takes orders from: an operator's
// pause and resume, and the retry of a failed fold that a fixed plugin or
// an explicit reload asks for.
type supervisor struct {
	mu      sync.Mutex
	running bool               // supervise runs: the fold takes orders
	paused  bool               // an operator paused the fold
	retry   bool               // run the fold again, though it failed
	cancel  context.CancelFunc // ends the running attempt; nil between attempts
	wake    chan struct{}      // cap 1: one of the above changed

	// The view rebuild before following (host/rebuild.go) runs through
	// the live plugin, so a reload meanwhile is held in pending, swapped in
	// when the next attempt starts, and restart ends the running attempt
	// for it without calling that a failure.
	rebuilding bool
	pending    *wasm.Module
	restart    bool
}

func (s *supervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Errors of Pause and Resume (the HTTP API answers them 409).
var (
	// ErrNotRunning: the fold's host is not running it (not started yet,
	// or shutting down).
	ErrNotRunning = httpapi.ErrNotRunning
	// ErrNothingToResume: the fold is neither paused nor failed.
	ErrNothingToResume = httpapi.ErrNothingToResume
)

// Pause ends the fold's watch at a batch boundary (the pending batch is
// applied and committed) and keeps it stopped, its store served at its
// cursor and its head polled, until Resume. A paused fold is not ready.
// Pausing a failed fold keeps it from retrying on a plugin reload.
func (f *Fold) Pause() error {
	s := &f.sup
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return fmt.Errorf("fold %s: %w (%s)", f.o.Name, ErrNotRunning, f.state.Load())
	}
	s.paused = true
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.poke()
	return nil
}

// Resume restarts a paused or failed fold from its cursor.
func (f *Fold) Resume() error {
	st := f.state.Load()
	s := &f.sup
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return fmt.Errorf("fold %s: %w (%s)", f.o.Name, ErrNotRunning, st)
	}
	was := s.paused
	s.paused = false
	if was || st == httpapi.StateFailed {
		s.retry = true
	}
	s.mu.Unlock()
	if !was && st != httpapi.StateFailed {
		return fmt.Errorf("fold %s is %s: %w", f.o.Name, st, ErrNothingToResume)
	}
	s.poke()
	return nil
}

// retryIfFailed restarts a failed (not paused) fold from its cursor; why
// is logged. It does nothing to a fold in any other state.
func (f *Fold) retryIfFailed(why string) {
	if f.state.Load() != httpapi.StateFailed {
		return
	}
	s := &f.sup
	s.mu.Lock()
	retry := !s.paused
	s.retry = s.retry || retry
	s.mu.Unlock()
	if retry {
		f.log.Info("retrying the failed fold from its cursor", "why", why)
		s.poke()
	}
}

// supervise runs attempt (one watch of the fold, from its cursor, until
// its context ends or it fails) until ctx ends: a failed attempt leaves
// the fold failed, served at its cursor, until a retry; a paused fold waits
// for Resume. It returns the failure the fold was in when ctx ended, nil if
// none. The background work of the fold (head polling, export rounds) is
// the caller's and goes on in every state.
//
// Whether the views need a rebuild before the attempt follows is decided
// under f.sup.mu, where a reload's module changes hands (offerModule), and
// passed to attempt as the reason ("" for none).
func (f *Fold) supervise(ctx context.Context, attempt func(ctx context.Context, rebuild string) (protocol.Cursor, error)) error {
	var failure error
	stopDrain := context.AfterFunc(ctx, func() {
		for _, from := range []httpapi.State{httpapi.StateHydrating, httpapi.StateFollowing, httpapi.StateRepairing} {
			if f.state.CompareAndSwap(from, httpapi.StateDraining) {
				return
			}
		}
	})
	defer stopDrain()
	s := &f.sup
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.pending.Close(context.Background()) // a reload that never ran
		s.pending = nil
		s.mu.Unlock()
	}()
	for ctx.Err() == nil {
		s.mu.Lock()
		paused := s.paused
		run := !paused && (failure == nil || s.retry)
		s.retry = false
		var actx context.Context
		var rebuild string
		if run {
			actx, s.cancel = context.WithCancel(ctx)
			if s.pending != nil {
				f.plug().Swap(s.pending)
				s.pending = nil
			}
			rebuild = f.needsRebuild()
			s.rebuilding = rebuild != ""
		}
		s.mu.Unlock()
		if !run {
			if paused {
				f.state.Store(httpapi.StatePaused)
			} else {
				f.state.Store(httpapi.StateFailed)
			}
			// A fold failed on a full disk also retries by itself once the
			// space it needs is free again (checked every diskPoll).
			if !paused && errors.Is(failure, fold.ErrDiskFull) { // a store broken by a full disk too
				t := time.NewTimer(testhook.Or(testhook.DiskPoll, diskPoll))
				select {
				case <-ctx.Done():
				case <-s.wake:
				case <-t.C:
					if err := f.store.SpaceFree(); err == nil {
						f.log.Info("retrying the fold failed on a full disk: its space is free again")
						s.mu.Lock()
						s.retry = true
						s.mu.Unlock()
					}
				}
				t.Stop()
				continue
			}
			select {
			case <-ctx.Done():
			case <-s.wake:
			}
			continue
		}
		if failure != nil {
			f.log.Warn("fold resuming from its cursor", "cursor", uint64(f.store.Cursor().Rev), "after", failure)
			failure = nil
		}
		f.state.Store(httpapi.StateHydrating)
		cur, err := attempt(actx, rebuild)
		s.mu.Lock()
		s.cancel()
		s.cancel = nil
		s.rebuilding = false
		paused = s.paused
		restart := s.restart
		s.restart = false
		s.mu.Unlock()
		if restart && errors.Is(err, context.Canceled) && ctx.Err() == nil {
			f.log.Info("restarting the fold's attempt for a reloaded module", "cursor", uint64(cur.Rev))
			f.loop.Store(nil)
			f.ready.Store(false)
			continue
		}
		f.loop.Store(nil)
		f.ready.Store(false)
		if err == nil && !paused && ctx.Err() == nil {
			err = errors.New("the watch ended on its own") // Follow returns nil only when its context ends
		}
		if err != nil && !(errors.Is(err, context.Canceled) && (paused || ctx.Err() != nil)) {
			failure = err
			f.setErr(err)
			f.state.Store(httpapi.StateFailed)
			f.log.Error("fold stopped on an error; its store is still served at its cursor, and it retries on a fixed plugin, a reload (SIGHUP) or an admin resume",
				"cursor", uint64(cur.Rev), "err", err, "hint", hint(err))
		} else if paused {
			f.log.Info("fold paused", "cursor", uint64(cur.Rev))
		}
	}
	if failure != nil {
		f.state.Store(httpapi.StateFailed)
		return failure
	}
	f.state.Store(httpapi.StateStopped)
	f.log.Info("fold stopped", "cursor", uint64(f.store.Cursor().Rev), "delivered_since_start", f.delivered.Load())
	return nil
}
