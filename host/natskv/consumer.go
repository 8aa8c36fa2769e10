package natskv

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The watch's consumer is an ephemeral push consumer configured as nats.go's
// ordered consumer configures its own (no acks, one delivery, flow control,
// idle heartbeats, memory storage, one replica), delivering to an inbox that
// the watcher reads itself through a core subscription: no KeyValueEntry,
// no callback goroutine between the connection's reader and the watcher
// (RATIONALE.md, "A leaner consumer"). What the ordered consumer did for the
// KV watch the watcher does here: it answers flow control, checks every
// delivery's consumer sequence and every heartbeat's, and re-creates the
// consumer from the last stream sequence it took on a gap or when the
// heartbeats stop.
// The consumer's timing and inbox; variables only so that tests can make a
// silence short or an inbox overflow (fault injection), never changed
// while a watch runs.
var (
	// consumerHeartbeat is the consumer's idle heartbeat (the ordered
	// consumer's); two periods without a message re-create it.
	consumerHeartbeat = 5 * time.Second
	// inboxCapacity bounds the deliveries waiting for the watcher. The
	// subscription drops a delivery that finds it full (the gap check
	// then re-creates the consumer, slowly: a gap at the end of a burst
	// shows only at the next heartbeat), so it holds the server's flow
	// control window: at most 32 MiB of deliveries are unanswered, and
	// none is smaller than its subject and reply subject (over 64 bytes).
	// It costs 4 MiB of pointers per watch.
	inboxCapacity = 1 << 19
)

// consumerInactive: the server deletes a consumer whose inbox has had no
// subscriber for this long (its default for ephemerals), which reaps one
// left behind by a dead connection or a failed deletion.
const consumerInactive = 5 * time.Second

// Header names of JetStream's deliveries and control messages.
const (
	hdrStatus        = "Status"
	hdrDescription   = "Description"
	hdrLastConsumer  = "Nats-Last-Consumer"
	hdrStalled       = "Nats-Consumer-Stalled"
	hdrKVOperation   = "KV-Operation"
	statusControl    = "100"
	kvPrefixTemplate = "$KV.%s."
)

// consumer is one armed watch: the server-side consumer of the moment, and
// the delivery state that carries over when a gap or a silence re-creates
// it.
type consumer struct {
	b      *Bucket
	scope  Scope
	start  protocol.Revision // the arm's start: 0 for a state-sync
	prefix string            // the bucket's subject prefix, cut off keys

	sub  *nats.Subscription
	msgs chan *nats.Msg
	name string // the server-side consumer's

	dseq uint64 // the last consumer sequence taken from this consumer
	sseq uint64 // the last stream sequence taken in this arm (0: none)
	// The Synced marker: due once the consumer's pending count at creation
	// was taken, or a delivery says nothing more is pending.
	initPending, received uint64
	initDone              bool
	markerDue             bool
	// active: a message arrived since the last heartbeat check.
	active bool
	// reconnects is the connection's reconnect count at creation.
	reconnects uint64
}

// openWatch creates the consumer: a state-sync (the last message of each
// subject in scope) when start is 0, else every message from start.
func (b *Bucket) openWatch(ctx context.Context, scope Scope, start protocol.Revision) (*consumer, error) {
	c := &consumer{b: b, scope: scope, start: start, prefix: fmt.Sprintf(kvPrefixTemplate, b.name)}
	if err := c.create(ctx, uint64(start)); err != nil {
		return nil, fmt.Errorf("natskv: watch %s (%s): %w", b.name, scope, err)
	}
	return c, nil
}

// create subscribes to a fresh inbox, then creates a consumer delivering
// to it from stream sequence from (0: the last message of each subject).
// The subscription exists before the consumer, so nothing it delivers is
// missed.
func (c *consumer) create(ctx context.Context, from uint64) error {
	inbox := c.b.nc.NewInbox()
	msgs := make(chan *nats.Msg, inboxCapacity)
	sub, err := c.b.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return err
	}
	cfg := jetstream.ConsumerConfig{
		DeliverSubject:    inbox,
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MaxDeliver:        1,
		FlowControl:       true,
		IdleHeartbeat:     consumerHeartbeat,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: consumerInactive,
	}
	if from != 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	filters := c.scope.filters()
	for i, f := range filters {
		filters[i] = c.prefix + f
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	rctx, cancel := c.b.reqCtx(ctx)
	defer cancel()
	pc, err := c.b.js.CreatePushConsumer(rctx, c.b.stream, cfg)
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	info := pc.CachedInfo()
	c.sub, c.msgs, c.name = sub, msgs, info.Name
	c.dseq, c.active, c.reconnects = 0, true, c.b.nc.Stats().Reconnects
	if !c.initDone {
		c.initPending, c.received = info.NumPending, 0
		c.markerDue = info.NumPending == 0
	}
	return nil
}

// reconnected reports whether the connection came back from an outage
// since the consumer was created: a gap or a silence is then the outage's,
// and the watcher's re-arm (through the resume check, which a blind
// re-creation would skip) is the one to replace the consumer.
func (c *consumer) reconnected() bool {
	return c.b.nc.Stats().Reconnects != c.reconnects
}

// recreate replaces the consumer after a gap or a silence, as nats.go's
// ordered consumer does: from the stream sequence after the last one taken
// (from the arm's start when none was), checking first that the bucket's
// stream is still stream (when not zero).
func (c *consumer) recreate(ctx context.Context, stream time.Time) error {
	c.close()
	if !stream.IsZero() {
		// The consumer of a deleted stream went with it: a bucket
		// made again must not pass for the one the cursor belongs to.
		if err := c.b.checkStream(ctx, stream); err != nil {
			return err
		}
	}
	from := uint64(c.start)
	if c.sseq != 0 {
		from = c.sseq + 1
	}
	if err := c.create(ctx, from); err != nil {
		return fmt.Errorf("natskv: watch %s (%s): re-creating its consumer from %d: %w", c.b.name, c.scope, from, err)
	}
	return nil
}

// consumerDeleteTimeout bounds the deletion of a consumer being closed: it
// is tidiness (the server reaps it after consumerInactive anyway), and a
// Stop must not wait long on a server that does not answer.
const consumerDeleteTimeout = time.Second

// close unsubscribes and deletes the server-side consumer. What its inbox
// still holds is dropped with it.
func (c *consumer) close() {
	if c == nil || c.sub == nil {
		return
	}
	_ = c.sub.Unsubscribe()
	c.sub = nil
	if c.name != "" && c.b.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), min(consumerDeleteTimeout, c.b.opts.RequestTimeout))
		_ = c.b.js.DeleteConsumer(ctx, c.b.stream, c.name)
		cancel()
	}
}

// delivery is a data message's metadata, decoded from its reply subject
// and its subject.
type delivery struct {
	dseq, sseq uint64
	time       int64
	pending    uint64
}

// parseAck decodes a delivery's reply subject, as jetstream's message
// metadata does, without allocating:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<time>.<pending>[.<token>...]
func parseAck(reply string) (d delivery, ok bool) {
	const pre = "$JS.ACK."
	if !strings.HasPrefix(reply, pre) {
		return d, false
	}
	// The ends of the tokens after the prefix, up to the eleventh.
	var ends [10]int
	n, rest := 0, reply[len(pre):]
	for i := 0; i < len(rest) && n < len(ends); i++ {
		if rest[i] == '.' {
			ends[n] = i
			n++
		}
	}
	tokens := n + 1 // after the prefix
	if n == len(ends) {
		tokens = len(ends) + 1 // and more
	}
	var first int // the index of <delivered>'s token after the prefix
	switch {
	case tokens == 7:
		first = 2
	case tokens >= 9:
		first = 4
	default:
		return d, false
	}
	tok := func(i int) string {
		s := 0
		if i > 0 {
			s = ends[i-1] + 1
		}
		e := len(rest)
		if i < n {
			e = ends[i]
		}
		return rest[s:e]
	}
	var ok1, ok2, ok3, ok4 bool
	d.sseq, ok1 = parseUint(tok(first + 1))
	d.dseq, ok2 = parseUint(tok(first + 2))
	t, ok3 := parseUint(tok(first + 3))
	d.pending, ok4 = parseUint(tok(first + 4))
	d.time = int64(t)
	return d, ok1 && ok2 && ok3 && ok4
}

// parseUint parses a decimal number of up to 19 digits.
func parseUint(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// kvOp is a KV message's operation, read from its headers as the KV watch
// reads it: the KV-Operation header, else a limit marker's reason (NATS
// 2.11+: an age expiry or a purge is a purge, a removal a delete).
func kvOp(h nats.Header) jetstream.KeyValueOp {
	if len(h) == 0 {
		return jetstream.KeyValuePut
	}
	if op := h.Get(hdrKVOperation); op != "" {
		switch op {
		case "DEL":
			return jetstream.KeyValueDelete
		case "PURGE":
			return jetstream.KeyValuePurge
		}
		return jetstream.KeyValuePut
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// decode turns a data message into an update. ok is false for a message
// that is no KV entry (no metadata, or a subject outside the bucket's).
func (c *consumer) decode(m *nats.Msg, d delivery) (u fold.Update, ok bool) {
	if len(m.Subject) <= len(c.prefix) || !strings.HasPrefix(m.Subject, c.prefix) {
		return u, false
	}
	return fold.Update{
		Key:   m.Subject[len(c.prefix):],
		Value: m.Data,
		Rev:   protocol.Revision(d.sseq),
		Op:    OpOf(kvOp(m.Header)),
		Time:  d.time,
	}, true
}

// isControl reports whether m is a JetStream control message (a heartbeat
// or a flow control request): a status 100 with no payload.
func isControl(m *nats.Msg) bool {
	return len(m.Data) == 0 && len(m.Header) > 0 && m.Header.Get(hdrStatus) == statusControl
}
