// Package forward carries HTTP reads between the nodes of a fleet over
// NATS: a node that does not fold a unit forwards a read of it to the
// unit's owner, which answers through its own HTTP handler. The NATS
// connection every node has already carries TLS, credentials and
// accounts, so a forwarded read is authenticated (and encrypted) as the
// operator's NATS is, with no second PKI (RATIONALE.md, "The fleet").
//
// A request is one message: the method and the request URI in headers,
// the body as its data. The answer is a sequence of chunks to the
// request's reply subject, numbered from 1, the first with the status and
// the response's headers, the last marked: a range page of any size
// crosses a server whose max_payload is 1 MiB.
package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers of the request and chunk messages.
const (
	hdrMethod = "Foldhost-Method"
	hdrPath   = "Foldhost-Path"
	hdrFrom   = "Foldhost-From" // the forwarding node
	hdrStatus = "Foldhost-Status"
	hdrSeq    = "Foldhost-Seq"
	hdrLast   = "Foldhost-Last"
	hdrError  = "Foldhost-Error" // the answer failed midway (last chunk)
)

// requestHeaders are the client's headers a forwarded request carries.
var requestHeaders = []string{"Accept", "Content-Type"}

// ErrNoResponder: no node listens on the subject (the owner is gone).
var ErrNoResponder = errors.New("no node answers on the subject")

// ErrTruncated: the answer broke off after its status was written; the
// caller must abort the client's response (http.ErrAbortHandler).
var ErrTruncated = errors.New("the forwarded answer broke off")

// maxChunk bounds a chunk's data (a server's max_payload is at least
// 1 MiB by default; headers take a little of it).
const maxChunk = 256 << 10

// Options of a forwarded request.
type Options struct {
	// From names the forwarding node (logged by the answering node).
	From string
	// FirstWait bounds the wait for the answer's first chunk: the
	// request's own waits (?wait, a query) come before it. ChunkWait
	// bounds each later chunk's.
	FirstWait, ChunkWait time.Duration
}

// Do sends r to the node listening on subject and writes its answer to w
// as it arrives. Before anything is written it returns ErrNoResponder (no
// node listens) or the error (a timeout: nothing was written); once the
// status is written, a failure is ErrTruncated.
func (c *Client) Do(ctx context.Context, subject string, w http.ResponseWriter, r *http.Request, o Options) error {
	nc := c.nc
	body, err := readBody(r, nc.MaxPayload()-64<<10)
	if err != nil {
		return err
	}
	inbox, sub := c.open()
	defer c.close(inbox)
	m := nats.NewMsg(subject)
	m.Reply = inbox
	m.Data = body
	m.Header.Set(hdrMethod, r.Method)
	m.Header.Set(hdrPath, r.URL.RequestURI())
	m.Header.Set(hdrFrom, o.From)
	for _, h := range requestHeaders {
		if v := r.Header.Get(h); v != "" {
			m.Header.Set(h, v)
		}
	}
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	wrote := false
	for seq := 1; ; seq++ {
		wait := o.ChunkWait
		if seq == 1 {
			wait = o.FirstWait
		}
		c, err := sub.next(ctx, wait)
		switch {
		case errors.Is(err, errNoResponders) && seq == 1:
			return ErrNoResponder
		case err != nil && !wrote:
			return fmt.Errorf("waiting %v for the answer on %s: %w", wait, subject, err)
		case err != nil:
			return fmt.Errorf("%w: chunk %d: %v", ErrTruncated, seq, err)
		case c.Header.Get(hdrSeq) != strconv.Itoa(seq):
			if !wrote {
				return fmt.Errorf("the answer's chunk %q came where %d was due", c.Header.Get(hdrSeq), seq)
			}
			return fmt.Errorf("%w: chunk %q came where %d was due", ErrTruncated, c.Header.Get(hdrSeq), seq)
		}
		if seq == 1 {
			status, err := strconv.Atoi(c.Header.Get(hdrStatus))
			if err != nil || status < 100 || status > 999 {
				return fmt.Errorf("the answer's status %q", c.Header.Get(hdrStatus))
			}
			for k, vs := range c.Header {
				if strings.HasPrefix(k, "Foldhost-") {
					continue
				}
				w.Header()[k] = vs
			}
			w.WriteHeader(status)
			wrote = true
		}
		if len(c.Data) > 0 {
			if _, err := w.Write(c.Data); err != nil {
				return fmt.Errorf("%w: %v", ErrTruncated, err) // the client went away
			}
		}
		if e := c.Header.Get(hdrError); e != "" {
			return fmt.Errorf("%w: the answering node: %s", ErrTruncated, e)
		}
		if c.Header.Get(hdrLast) != "" {
			return nil
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// readBody reads r's body, at most limit bytes (a larger one is refused:
// it would not fit a message).
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("reading the request's body (%d bytes read, at most %d forwarded): %w", n, limit, err)
	}
	return buf.Bytes(), nil
}

// Server answers forwarded requests on a subject through a handler.
type Server struct {
	sub    *nats.Subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Serve answers the requests sent to subject with h, each in its own
// goroutine, at most maxInFlight at once (more are answered 503). ctx
// ends every request being answered; Stop stops serving.
func Serve(ctx context.Context, nc *nats.Conn, subject string, h http.Handler, maxInFlight int) (*Server, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cancel: cancel}
	slots := make(chan struct{}, maxInFlight)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			busy := &chunkWriter{nc: nc, reply: m.Reply, hdr: http.Header{}}
			http.Error(busy, "this node answers as many forwarded reads as it can: retry", http.StatusServiceUnavailable)
			busy.finish("")
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-slots }()
			serveOne(ctx, nc, h, m)
		}()
	})
	if err != nil {
		cancel()
		return nil, err
	}
	// The server has the subscription once Serve returns, so a request
	// sent right after (from another connection) finds it; best effort:
	// disconnected, the subscription is made again on reconnecting.
	_ = nc.FlushTimeout(time.Second)
	s.sub = sub
	return s, nil
}

// Stop stops serving and waits for the requests being answered (their
// context ended).
func (s *Server) Stop() {
	_ = s.sub.Unsubscribe()
	s.cancel()
	s.wg.Wait()
}

// serveOne answers one forwarded request.
func serveOne(ctx context.Context, nc *nats.Conn, h http.Handler, m *nats.Msg) {
	cw := &chunkWriter{nc: nc, reply: m.Reply, hdr: http.Header{}}
	r, err := http.NewRequestWithContext(ctx, m.Header.Get(hdrMethod), m.Header.Get(hdrPath), bytes.NewReader(m.Data))
	if err != nil {
		http.Error(cw, "a forwarded request this node cannot read: "+err.Error(), http.StatusBadRequest)
		cw.finish("")
		return
	}
	for _, k := range requestHeaders {
		if v := m.Header.Get(k); v != "" {
			r.Header.Set(k, v)
		}
	}
	r.RemoteAddr = "nats:" + m.Header.Get(hdrFrom)
	r.RequestURI = m.Header.Get(hdrPath)
	failure := ""
	func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					failure = fmt.Sprint(v)
					return
				}
				failure = "the handler aborted the answer"
			}
		}()
		h.ServeHTTP(cw, r)
	}()
	cw.finish(failure)
}

// chunkWriter is the answering node's http.ResponseWriter: it sends what
// the handler writes as chunks to the reply subject.
type chunkWriter struct {
	nc     *nats.Conn
	reply  string
	hdr    http.Header
	status int
	buf    []byte
	seq    int
	err    error
}

func (c *chunkWriter) Header() http.Header { return c.hdr }

func (c *chunkWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.WriteHeader(http.StatusOK)
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), maxChunk-len(c.buf))
		c.buf = append(c.buf, p[:take]...)
		p = p[take:]
		if len(c.buf) == maxChunk {
			c.send(false, "")
		}
	}
	return n, c.err
}

// Flush sends what is buffered (a range's lines as they are read).
func (c *chunkWriter) Flush() {
	if len(c.buf) > 0 || c.seq == 0 {
		c.WriteHeader(http.StatusOK)
		c.send(false, "")
	}
}

// finish sends the last chunk; failure, when set, says why the answer
// broke off.
func (c *chunkWriter) finish(failure string) {
	c.WriteHeader(http.StatusOK)
	c.send(true, failure)
}

func (c *chunkWriter) send(last bool, failure string) {
	if c.err != nil {
		return
	}
	c.seq++
	m := nats.NewMsg(c.reply)
	if c.seq == 1 {
		for k, vs := range c.hdr {
			m.Header[k] = vs
		}
		m.Header.Set(hdrStatus, strconv.Itoa(c.status))
	}
	m.Header.Set(hdrSeq, strconv.Itoa(c.seq))
	if last {
		m.Header.Set(hdrLast, "1")
	}
	if failure != "" {
		m.Header.Set(hdrError, failure)
	}
	m.Data = c.buf
	c.err = c.nc.PublishMsg(m)
	c.buf = nil
}
