package forward

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Client forwards requests over one NATS connection. Every request's
// answer comes to one wildcard inbox subscription of the client, routed
// to its request by the inbox's last token: a subscription made and
// dropped per request cost the server two interest changes a read, and
// a forwarded read's p99 was 6x a local read's with it, 2x without
// (RATIONALE.md, "The fleet").
type Client struct {
	nc     *nats.Conn
	prefix string // "_INBOX.<unique>."
	sub    *nats.Subscription

	mu      sync.Mutex
	next    uint64
	waiting map[string]*answer
}

// answer is one request's chunks as they arrive.
type answer struct {
	mu     sync.Mutex
	msgs   []*nats.Msg
	signal chan struct{} // cap 1: a chunk arrived
}

// errNoResponders: the server's status message for a request no one
// listens to.
var errNoResponders = errors.New("no responders")

// NewClient subscribes the client's inbox on nc; Close drops it.
func NewClient(nc *nats.Conn) (*Client, error) {
	c := &Client{nc: nc, prefix: nc.NewInbox() + ".", waiting: map[string]*answer{}}
	sub, err := nc.Subscribe(c.prefix+"*", c.route)
	if err != nil {
		return nil, fmt.Errorf("forward: the answers' subscription: %w", err)
	}
	c.sub = sub
	return c, nil
}

// Close drops the client's subscription; requests under way end with
// their waits.
func (c *Client) Close() { _ = c.sub.Unsubscribe() }

// route hands a chunk to its request (none: a late chunk of a request
// given up). One subscription delivers in order, so a request's chunks
// queue in order.
func (c *Client) route(m *nats.Msg) {
	c.mu.Lock()
	a := c.waiting[m.Subject[len(c.prefix):]]
	c.mu.Unlock()
	if a == nil {
		return
	}
	a.mu.Lock()
	a.msgs = append(a.msgs, m)
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

func (c *Client) open() (string, *answer) {
	a := &answer{signal: make(chan struct{}, 1)}
	c.mu.Lock()
	c.next++
	token := strconv.FormatUint(c.next, 36)
	c.waiting[token] = a
	c.mu.Unlock()
	return c.prefix + token, a
}

func (c *Client) close(inbox string) {
	c.mu.Lock()
	delete(c.waiting, inbox[len(c.prefix):])
	c.mu.Unlock()
}

// next is the request's next chunk, waited for at most wait.
func (a *answer) next(ctx context.Context, wait time.Duration) (*nats.Msg, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		a.mu.Lock()
		if len(a.msgs) > 0 {
			m := a.msgs[0]
			a.msgs = a.msgs[1:]
			a.mu.Unlock()
			if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
				return nil, errNoResponders
			}
			return m, nil
		}
		a.mu.Unlock()
		select {
		case <-a.signal:
		case <-t.C:
			return nil, context.DeadlineExceeded
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
