package fold

import (
	"sync/atomic"
	"time"
)

// gate lets operations run until close, and lets close wait for the ones in
// flight. Pebble panics on use after Close; the gate turns that into
// ErrClosed. enter is two atomic ops, so reads never contend on a lock.
//
// An operation that enters again from inside a callback (a Get inside a
// RawRange callback) is fine: after close it fails with ErrClosed while the
// outer operation finishes. Calling Close from inside a callback deadlocks.
type gate struct {
	closed atomic.Bool
	active atomic.Int64
}

// enter reports whether the store is open; if so the caller must exit.
func (g *gate) enter() bool {
	g.active.Add(1)
	if g.closed.Load() {
		g.active.Add(-1)
		return false
	}
	return true
}

func (g *gate) exit() { g.active.Add(-1) }

// open lets operations in again after close (a Store's Reopen, which
// replaced what they use while none ran).
func (g *gate) open() { g.closed.Store(false) }

// close marks the gate closed and waits until no operation is in flight. It
// reports false if the gate was already closed. An operation that enter
// admitted incremented active before close set closed, so close sees it.
func (g *gate) close() bool {
	if !g.closed.CompareAndSwap(false, true) {
		return false
	}
	for g.active.Load() != 0 {
		time.Sleep(100 * time.Microsecond)
	}
	return true
}
