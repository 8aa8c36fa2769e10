package natskv

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnState is a NATS connection's state as a host reports it.
type ConnState string

const (
	// ConnConnected: connected to a server.
	ConnConnected ConnState = "connected"
	// ConnReconnecting: the connection dropped; the client is redialling
	// (it does so forever). Watches resume from their cursors once back.
	ConnReconnecting ConnState = "reconnecting"
	// ConnClosed: closed for good (the host is shutting down).
	ConnClosed ConnState = "closed"
)

// ConnStatus is a snapshot of a connection's health.
type ConnStatus struct {
	State ConnState `json:"state"`
	// Since is when State began.
	Since time.Time `json:"since"`
	// Disconnects counts the connection drops since the host started.
	Disconnects uint64 `json:"disconnects"`
	// LastError is the error of the last drop ("" when none).
	LastError string `json:"last_error,omitempty"`
	// URL is the server the connection is on (credentials redacted; the
	// last one when reconnecting).
	URL string `json:"url"`
}

// Health tracks one connection's state from the client's callbacks: a drop
// is logged as a warning, a reconnect as info with the outage's length. Pass
// it in ConnOptions.Health; a zero Health is ready to use.
type Health struct {
	// Logger receives the drop and reconnect lines; nil: slog.Default().
	Logger *slog.Logger
	// Now reads the clock; nil: time.Now.
	Now func() time.Time

	mu sync.Mutex
	st ConnStatus
}

func (h *Health) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Health) log() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// Status returns the current state.
func (h *Health) Status() ConnStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

// DownFor is how long the connection has been down at now (0 when up).
func (st ConnStatus) DownFor(now time.Time) time.Duration {
	if st.State != ConnReconnecting {
		return 0
	}
	return now.Sub(st.Since)
}

func (h *Health) set(state ConnState, url string, err error) (prev ConnStatus, now ConnStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev = h.st
	h.st.State, h.st.Since = state, h.now()
	if url != "" {
		h.st.URL = Redact(url)
	}
	if state == ConnReconnecting {
		h.st.Disconnects++
		if err != nil {
			h.st.LastError = err.Error()
		}
	}
	return prev, h.st
}

// connected records the first connection, unless a callback already
// reported a later state.
func (h *Health) connected(nc *nats.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st.State == "" {
		h.st.State, h.st.Since, h.st.URL = ConnConnected, h.now(), Redact(nc.ConnectedUrl())
	}
}

func (h *Health) options() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // a close reports its own state
			}
			_, st := h.set(ConnReconnecting, "", err)
			h.log().Warn("NATS connection lost; reconnecting (folds resume from their cursors once it is back)",
				"url", st.URL, "err", err, "disconnects", st.Disconnects)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			prev, st := h.set(ConnConnected, nc.ConnectedUrl(), nil)
			h.log().Info("NATS connection restored", "url", st.URL, "outage", st.Since.Sub(prev.Since).Round(time.Millisecond).String())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) { h.set(ConnClosed, "", nil) }),
	}
}
