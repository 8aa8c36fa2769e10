package hosttest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// CutProxyFake is a fault-injecting TCP proxy in front of a real server:
// HoldReplies stops forwarding what the server sends (its answers are
// lost on the way), Cut closes every connection through it (a network
// drop the client reconnects after) and forwards normally again.
type CutProxyFake struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewCutProxyFake listens on a free loopback port and forwards to target
// (host:port, or a nats:// URL); closed at the test's end.
func NewCutProxyFake(t testing.TB, target string) *CutProxyFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxyFake{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's address as a nats:// URL.
func (p *CutProxyFake) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *CutProxyFake) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, false)
		go p.pipe(c, s, true)
	}
}

// pipe copies from src to dst; fromServer's bytes are dropped while held.
func (p *CutProxyFake) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := fromServer && p.held
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// HoldReplies drops everything the server sends from now on, until Cut.
func (p *CutProxyFake) HoldReplies() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Cut closes every connection through the proxy and forwards normally
// again (new connections, replies included).
func (p *CutProxyFake) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns, p.held = nil, false
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
