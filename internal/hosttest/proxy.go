package hosttest

import (
	"testing"

	"github.com/foldhost/foldhost/internal/tcpproxy"
)

// CutProxyFake is a fault-injecting TCP proxy in front of a real server
// (tcpproxy): HoldReplies stops forwarding what the server sends (its
// answers are lost on the way), Cut closes every connection through it (a
// network drop the client reconnects after) and forwards normally again.
type CutProxyFake struct{ *tcpproxy.Proxy }

// NewCutProxyFake listens on a free loopback port and forwards to target
// (host:port, or a nats:// URL); closed at the test's end.
func NewCutProxyFake(t testing.TB, target string) *CutProxyFake {
	t.Helper()
	p, err := tcpproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &CutProxyFake{p}
}

// URL is the proxy's address as a nats:// URL.
func (p *CutProxyFake) URL() string { return "nats://" + p.Addr() }
