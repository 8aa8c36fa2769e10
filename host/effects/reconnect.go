package effects

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// errReconnected: the connection to NATS was re-established while a
// request waited for its answer. The answer of a request sent on the old
// connection never comes (the server's reply went to a subscription the
// drop ended), so waiting for it would wait out the whole request timeout
// after NATS is back. The request may have landed or not: the caller
// reads the fence again and goes on from what it says.
var errReconnected = errors.New("the connection to NATS was re-established while the request waited for its answer")

// reconnectPoll is how often a waiting request looks at the connection's
// reconnect count: a reconnect costs a retry at most this long after it.
const reconnectPoll = 50 * time.Millisecond

// untilReconnect returns a context ended, with cause errReconnected, once
// nc has reconnected since the call (and is connected). stop ends the
// watch and waits for its goroutine.
func untilReconnect(ctx context.Context, nc *nats.Conn) (_ context.Context, stop func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	before := nc.Stats().Reconnects
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(reconnectPoll)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-rctx.Done():
				return
			case <-tick.C:
				if nc.Stats().Reconnects != before && nc.IsConnected() {
					cancel(errReconnected)
					return
				}
			}
		}
	}()
	return rctx, func() {
		close(quit)
		<-done
		cancel(nil)
	}
}

// bounded is ctx bounded by t.timeout and by a reconnect of t.nc (its
// cause then errReconnected): every request of the target's is.
func (t *Target) bounded(ctx context.Context) (context.Context, func()) {
	rctx, stop := untilReconnect(ctx, t.nc)
	pctx, cancel := context.WithTimeout(rctx, t.timeout)
	return pctx, func() { cancel(); stop() }
}

// request sends m and waits for its answer, at most t.timeout, and not
// past a reconnect (errReconnected).
func (t *Target) request(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	pctx, done := t.bounded(ctx)
	defer done()
	reply, err := t.nc.RequestMsgWithContext(pctx, m)
	if err != nil && context.Cause(pctx) == errReconnected && ctx.Err() == nil {
		return nil, errReconnected
	}
	return reply, err
}
