package fold

import "time"

// Clock is the time a Loop and Follow use. RealClock in production; a
// deterministic simulation passes its own, so it can decide when a batch
// window or a backoff ends.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer.
	NewTimer() Timer
}

// Timer is a Clock's timer: C delivers once per expiry after Reset.
type Timer interface {
	C() <-chan time.Time
	// Reset (re)arms the timer to fire after d.
	Reset(d time.Duration)
	// Stop disarms it; a value not yet received is dropped.
	Stop()
}

// RealClock is the system's clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
