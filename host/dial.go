package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/natskv"
)

// dialBackoffMax bounds the wait between two attempts to reach NATS at the
// start; dialLogEvery how often the wait is logged again.
const (
	dialBackoffMax = 5 * time.Second
	dialLogEvery   = 30 * time.Second
)

// dial connects to NATS, waiting for it while no server can be reached: a
// fleet restarting with its NATS cluster, or a node started before it,
// needs no supervisor to try again. The wait is logged at WARN (then every
// dialLogEvery) and ends with ctx (SIGTERM). What no retry can fix (bad
// credentials, a refused TLS handshake, a malformed URL) fails at once.
func (h *Host) dial(ctx context.Context, conn natskv.ConnOptions) (*nats.Conn, error) {
	start := time.Now()
	var logged time.Time
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		nc, err := natskv.Connect(conn)
		if err == nil {
			if attempt > 1 {
				h.log.Info("NATS reached", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return nc, nil
		}
		if !unreachable(err) {
			return nil, err
		}
		if logged.IsZero() || time.Since(logged) >= dialLogEvery {
			logged = time.Now()
			h.log.Warn("NATS cannot be reached; retrying until it can (SIGTERM stops the wait)",
				"url", natskv.Redact(conn.URL), "attempts", attempt, "waited", time.Since(start).Round(time.Second).String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("NATS at %s could not be reached in %v (%d attempts) before the start was stopped (%w): %w",
				natskv.Redact(conn.URL), time.Since(start).Round(time.Second), attempt, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

// unreachable reports whether err says no NATS server answered (refused,
// timed out, a name not resolved yet), which time may fix.
func unreachable(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.As(err, &dns)
}
