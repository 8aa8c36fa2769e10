// Package tcpproxy is a TCP proxy on loopback in front of a real server,
// for injecting network faults: the server's replies held back, every
// connection cut (the client reconnects), or the proxy closed for good
// (as a killed process's sockets close). The tests' fault fakes and the
// fleet bench's kills use it. It imports nothing of foldhost.
package tcpproxy

import (
	"net"
	"strings"
	"sync"
)

// Proxy forwards each connection it accepts to its target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	held   bool // the server's bytes are dropped
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// New listens on a free loopback port and forwards to target (host:port,
// or a nats:// URL's).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
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
		if p.closed {
			p.mu.Unlock()
			_, _ = c.Close(), s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(s, c, false)
		go p.pipe(c, s, true)
	}
}

// pipe copies from src to dst; fromServer's bytes are dropped while held.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
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
			return
		}
	}
}

// HoldReplies drops everything the server sends from now on, until Cut.
func (p *Proxy) HoldReplies() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Cut closes every connection through the proxy and forwards normally
// again (new connections, replies included).
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns, p.held = nil, false
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Close closes the proxy for good (no new connection, every one cut)
// and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}
