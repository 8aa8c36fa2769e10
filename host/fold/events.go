package fold

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// stallTracker counts pebble write stalls: the moments pebble blocks commits
// because flushes or compactions fell behind (memtables queued, L0 too
// deep). They are the fold's first sign of an undersized configuration, so
// they are logged and exposed in [Stats].
type stallTracker struct {
	log   *slog.Logger
	count atomic.Uint64
	nanos atomic.Int64 // total stalled time, ended stalls only
	start atomic.Int64 // unix nanos of the stall in progress, 0 if none
}

func (t *stallTracker) listener() *pebble.EventListener {
	return &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			t.count.Add(1)
			t.start.Store(time.Now().UnixNano())
			t.log.Warn("fold: pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			if s := t.start.Swap(0); s != 0 {
				d := time.Duration(time.Now().UnixNano() - s)
				t.nanos.Add(int64(d))
				t.log.Warn("fold: pebble write stall ended", "duration", d.Round(time.Millisecond).String())
			}
		},
		BackgroundError: func(err error) {
			t.log.Error("fold: pebble background error", "err", err)
		},
	}
}

// stalled returns the number of stalls and their total duration so far
// (including one in progress).
func (t *stallTracker) stalled() (uint64, time.Duration) {
	d := time.Duration(t.nanos.Load())
	if s := t.start.Load(); s != 0 {
		d += time.Duration(time.Now().UnixNano() - s)
	}
	return t.count.Load(), d
}
