package natskv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchClosed: the server side of the watch ended (connection closed,
// subscription dropped).
var ErrWatchClosed = errors.New("natskv: watch closed")

// CursorError explains a refused or ended watch. It matches
// fold.ErrCursorExpired or fold.ErrCursorBeyondHead (errors.Is), which is
// all the fold needs; errors.As gives the details.
type CursorError struct {
	Verdict   protocol.ResumeVerdict
	Cursor    protocol.Revision // the resume cursor, or the frontier mid-watch
	Retention protocol.Retention
	MidWatch  bool // detected by the floor guard during a live watch
	Settling  bool // detected by a prefix watch's settle probe (MidWatch too)
}

func (e *CursorError) Error() string {
	where := "resume"
	switch {
	case e.Settling:
		where = "live prefix watch (settle probe: its consumer may have been clamped past updates of its scope)"
	case e.MidWatch:
		where = "live watch (floor guard)"
	}
	w := e.Retention.Window
	return fmt.Sprintf("natskv: %s from revision %d refused: %s (stream retains %d..%d)", where, e.Cursor, e.Verdict, w.First, w.Last)
}

// Is maps the verdict to fold.ErrCursorExpired or fold.ErrCursorBeyondHead.
func (e *CursorError) Is(target error) bool {
	switch e.Verdict {
	case protocol.ResumeExpired:
		return target == fold.ErrCursorExpired
	case protocol.ResumeBeyondHead, protocol.ResumeAtMax:
		return target == fold.ErrCursorBeyondHead
	}
	return false
}

// Watcher streams a bucket's updates. Events is closed when the watch ends;
// Err then says why (nil after Stop).
type Watcher struct {
	b      *Bucket
	scope  Scope
	events chan fold.Event
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
	err    error
	// ctx bounds the watcher's own calls to the server (re-arming, the
	// floor guard's retention reads); Stop cancels it, so Stop never waits
	// for one to time out.
	ctx    context.Context
	cancel context.CancelFunc

	headAtStart protocol.Revision
	headTime    int64     // the server time of the head at start (Unix nanoseconds)
	stream      time.Time // WatchOptions.Stream: checked again on every re-arm
	// from is the cursor the watch resumed from (zero for a state-sync).
	from protocol.Cursor
}

var _ fold.Source = (*Watcher)(nil)

// Events delivers updates in revision order. The channel is closed when the
// watch ends.
func (w *Watcher) Events() <-chan fold.Event { return w.events }

// Err returns why the watch ended; it waits until it has.
func (w *Watcher) Err() error {
	<-w.done
	return w.err
}

// HeadAtStart is the stream's last revision when the watch started: a fold
// that has applied it has caught up with what existed at start.
func (w *Watcher) HeadAtStart() protocol.Revision { return w.headAtStart }

// Stop ends the watch and releases its server-side consumer. Safe to call
// more than once and concurrently with a reader of Events.
func (w *Watcher) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.cancel()
	})
	<-w.done
}

// WatchOptions tunes one watch.
type WatchOptions struct {
	// Buffer is the capacity of the Events channel; default 256. A full
	// channel backpressures the watcher by design; while hydrating a large
	// bucket it becomes the effective batch boundary, so tune it together
	// with the loop's MaxBatch.
	Buffer int
	// Stream, when not zero, is the creation time of the stream the
	// cursor belongs to (fold.Origin.StreamCreated): every watch, re-arms
	// included, first checks that the bucket's stream is still that one
	// and fails with a *StreamError (fold.ErrStreamReplaced) otherwise.
	Stream time.Time
}

// StreamError: the bucket's stream is another than the watch expected.
type StreamError struct {
	Bucket    string
	Want, Got time.Time
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("natskv: bucket %s: its stream was created at %s, the fold's at %s: the bucket was deleted and made again, and its revisions number another history",
		e.Bucket, e.Got.UTC().Format(time.RFC3339Nano), e.Want.UTC().Format(time.RFC3339Nano))
}

// Is matches fold.ErrStreamReplaced.
func (e *StreamError) Is(target error) bool { return target == fold.ErrStreamReplaced }

// Feed adapts the bucket to fold.Feed: watches of scope with o.
func (b *Bucket) Feed(scope Scope, o WatchOptions) fold.Feed { return feed{b, scope, o} }

type feed struct {
	b     *Bucket
	scope Scope
	o     WatchOptions
}

func (f feed) Watch(ctx context.Context, from protocol.Cursor) (fold.Source, error) {
	w, err := f.b.Watch(ctx, f.scope, from, f.o)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Watch starts a watch over scope. With from.Rev == 0 it is a state-sync:
// the current value of every key in scope, then a Synced event, then live
// updates. Otherwise it resumes at from.Rev+1, only after protocol.CheckResume
// accepts the cursor against the stream's live retention; a refusal is a
// *CursorError matching ErrCursorExpired or ErrCursorBeyondHead. On an
// age-only bucket, a cursor that looks expired but whose message is young
// enough (protocol.GapHoldsNoEviction) resumes from the first retained
// revision instead: every missing message was superseded, not evicted.
//
// When the connection comes back after an outage (a server restart, a
// network cut), the watch re-arms itself from the last revision it delivered,
// through the same resume check (a consumer merely re-created from there
// would resume silently clamped). Within a connection, a consumer sequence
// gap or two heartbeat periods of silence re-create the consumer from the
// last revision delivered, as nats.go's ordered consumer does, after
// checking that the bucket's stream is still WatchOptions.Stream.
//
// A whole-bucket watch runs the floor guard: it ends with a *CursorError
// (MidWatch) when a delivery skips revisions that retention evicted, or when
// an idle probe finds retention past the frontier. A prefix watch delivers
// sparse revisions by nature, so a gap proves nothing: it hands its
// deliveries on unsettled (fold.Event.Unsettled) and settles them every
// Options.SettleInterval (Watcher.settle), ending with a *CursorError
// (MidWatch) when retention may have evicted an update of its scope before
// its consumer reached it.
func (b *Bucket) Watch(ctx context.Context, scope Scope, from protocol.Cursor, o WatchOptions) (*Watcher, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	ret, start, info, err := b.resumePoint(ctx, from, o.Stream)
	if err != nil {
		return nil, err
	}
	// Listen before the consumer exists, so no outage goes unnoticed.
	status := b.nc.StatusChanged(nats.CONNECTED)
	c, err := b.openWatch(ctx, scope, start)
	if err != nil {
		b.nc.RemoveStatusListener(status)
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &Watcher{
		ctx:         wctx,
		cancel:      cancel,
		b:           b,
		scope:       scope,
		events:      make(chan fold.Event, o.Buffer),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		headAtStart: ret.Last,
		headTime:    info.State.LastTime.UnixNano(),
		stream:      o.Stream,
		from:        from,
	}
	g := &floorGuard{ctx: wctx, b: b, on: scope.WholeBucket(), lazy: !scope.WholeBucket(), frontier: from.Rev, frontierTime: from.MsgUnixNano}
	if start != 0 {
		g.frontier = start - 1 // a gap-holds resume starts below the cursor
		// The resume check passed at the settled point: nothing above it
		// was evicted (or, on a gap-holds resume, nothing that was not
		// superseded), so every update of the scope up to the cursor that
		// was not delivered before reached the fold's consumer, or is
		// still retained: none was missed.
		g.settled, g.settledTime = g.frontier, g.frontierTime
	}
	go w.run(c, g, start != 0, status)
	return w, nil
}

// resumePoint decides where a watch from cursor starts: 0 for a state-sync,
// else the first revision to read. A stream other than stream (when not
// zero) is a *StreamError. An unsettled cursor (a prefix watch's, committed
// before its settle probe confirmed it) is checked at its settled point.
func (b *Bucket) resumePoint(ctx context.Context, from protocol.Cursor, stream time.Time) (protocol.Retention, protocol.Revision, *jetstream.StreamInfo, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return protocol.Retention{}, 0, nil, err
	}
	if !stream.IsZero() && !info.Created.Equal(stream) {
		return protocol.Retention{}, 0, nil, &StreamError{Bucket: b.name, Want: stream, Got: info.Created}
	}
	ret, now := retentionOf(info), info.TimeStamp
	if from.Rev == 0 {
		return ret, 0, info, nil
	}
	switch v := protocol.CheckCursorResume(from, ret.Window); v {
	case protocol.ResumeOK:
		return ret, from.Rev + 1, info, nil
	case protocol.ResumeExpired:
		// The message time is the position's: it says nothing of an
		// unsettled cursor's settled point.
		if !from.Unsettled && protocol.GapHoldsNoEviction(ret, from.MsgUnixNano, now.UnixNano()) {
			return ret, ret.First, info, nil
		}
		return ret, 0, nil, &CursorError{Verdict: v, Cursor: from.SettledRev(), Retention: ret}
	default:
		return ret, 0, nil, &CursorError{Verdict: v, Cursor: from.Rev, Retention: ret}
	}
}

// settleEvery is how many updates of other partitions a partitioned watch
// skips at most between two settle marks.
const settleEvery = 1024

// watchDrain bounds how many messages the watcher takes from its inbox
// between two looks at stop, status and the probe.
const watchDrain = 256

func (w *Watcher) run(c *consumer, g *floorGuard, resuming bool, status chan nats.Status) {
	defer close(w.done)
	defer w.cancel()
	defer func() {
		select {
		case <-w.stop:
			w.err = nil // stopped: a call cut short by Stop is no reason
		default:
		}
	}()
	defer close(w.events)
	defer w.b.nc.RemoveStatusListener(status)
	defer func() { c.close() }()

	// In resume mode deliveries are contiguous from the start; in a
	// state-sync they are sparse until the Synced marker. A prefix watch
	// settles instead (settling): its deliveries are sparse by nature.
	guarding := g.on && resuming
	settling := g.lazy && resuming
	synced := false
	var probe, settleTick <-chan time.Time
	if g.on {
		t := time.NewTicker(w.b.opts.ProbeInterval)
		defer t.Stop()
		probe = t.C
	}
	if g.lazy {
		t := time.NewTicker(w.b.opts.SettleInterval)
		defer t.Stop()
		settleTick = t.C
	}
	heartbeats := time.NewTicker(2 * consumerHeartbeat)
	defer heartbeats.Stop()
	delivered := false
	var keep func(key string) bool // nil: every update of the consumer
	if !w.scope.Partition.Whole() {
		keep = func(key string) bool { return w.scope.Partition.Holds(w.b.name, key) }
	}
	skipped := 0 // updates of other partitions since the last settle mark
	send := func(ev fold.Event) bool {
		select {
		case w.events <- ev: // room in the buffer: one channel, no select
			return true
		default:
		}
		select {
		case w.events <- ev:
			return true
		case <-w.stop:
			return false
		}
	}
	// marker hands on the end of the state-sync (false ends the watch).
	marker := func() bool {
		// The marker repeats after a re-armed consumer; only the
		// first means anything.
		if synced {
			return true
		}
		synced = true
		// Everything current up to the head at start was just
		// delivered; what follows is live. The frontier is that
		// head, not the highest delivered revision: the last
		// messages before it may be gone (purged, superseded),
		// and a frontier below them would trip the guard on the
		// first live delivery, forever.
		if w.headAtStart > g.frontier {
			g.frontier = w.headAtStart
		}
		guarding = g.on
		if !g.lazy || resuming {
			// A resume's marker vouches for nothing: its
			// backlog is settled by the probe like the rest.
			return send(fold.Event{Synced: true})
		}
		// A state-sync delivered the value of every key of the
		// scope as of the head at start (its own guarantee, as for
		// the whole bucket); what follows is settled by the probe.
		settling = true
		if w.headAtStart > g.settled {
			g.settled, g.settledTime = w.headAtStart, w.headTime
		}
		return send(fold.Event{Synced: true, Settle: g.settled, SettleTime: g.settledTime})
	}
	// created hands on the marker of a consumer created with nothing
	// pending.
	created := func() bool {
		if c.markerDue {
			c.markerDue, c.initDone = false, true
			return marker()
		}
		return true
	}
	// recreate replaces the consumer after a gap or a silence (false
	// ends the watch, w.err says why). After an outage it leaves that to
	// the re-arm the status listener is about to deliver; meanwhile the
	// old consumer's deliveries keep failing the sequence check.
	recreate := func() bool {
		if c.reconnected() {
			return true
		}
		if err := c.recreate(w.ctx, w.stream); err != nil {
			w.err = err
			return false
		}
		return created()
	}
	// deliver hands on one update (false ends the watch).
	deliver := func(u fold.Update, behind uint64) bool {
		rev := u.Rev
		if rev <= g.frontier && !synced && !resuming {
			return true // a restarted state-sync repeating itself
		}
		if guarding && rev > g.frontier+1 {
			if err := g.check(true); err != nil {
				w.err = err
				return false
			}
		}
		if rev > g.frontier {
			g.frontier, g.frontierTime = rev, u.Time
		}
		delivered = true
		if keep != nil && !keep(u.Key) {
			// Another partition's: the fold's cursor passes it with a
			// settle mark, sent at the head (so that a caught-up fold's
			// cursor reaches it) and every settleEvery skipped updates
			// (so that a resume does not read them all again); a kept
			// update in between carries it anyway.
			if skipped++; behind == 0 || skipped >= settleEvery {
				skipped = 0
				return send(fold.Event{Settle: rev, SettleTime: u.Time, Behind: behind})
			}
			return true
		}
		skipped = 0
		return send(fold.Event{Update: u, Unsettled: settling, Behind: behind})
	}
	// take handles one message of the inbox (false ends the watch).
	take := func(m *nats.Msg) bool {
		c.active = true
		if isControl(m) {
			switch d := m.Header.Get(hdrDescription); {
			case strings.HasPrefix(d, "Flow"):
				// Every delivery before the request was taken.
				if m.Reply != "" {
					_ = w.b.nc.Publish(m.Reply, nil)
				}
			case strings.HasPrefix(d, "Idle"):
				// A heartbeat of a consumer stalled on a flow
				// control reply (lost?) names it.
				if fc := m.Header.Get(hdrStalled); fc != "" {
					_ = w.b.nc.Publish(fc, nil)
				}
				if last, ok := parseUint(m.Header.Get(hdrLastConsumer)); ok && last != c.dseq {
					return recreate() // the heartbeat says deliveries were missed
				}
			}
			return true
		}
		d, ok := parseAck(m.Reply)
		if !ok {
			return true // not a delivery
		}
		if d.dseq != c.dseq+1 {
			return recreate() // a delivery was missed
		}
		c.dseq, c.sseq = d.dseq, d.sseq
		u, ok := c.decode(m, d)
		if !ok {
			return true
		}
		if !deliver(u, d.pending) {
			return false
		}
		if !c.initDone {
			c.received++
			if c.received >= c.initPending || d.pending == 0 {
				c.initDone = true
				return marker()
			}
		}
		return true
	}
	// A resume of an unsettled cursor was settled by its resume check.
	if settling && w.from.Unsettled {
		if !send(fold.Event{Settle: g.settled, SettleTime: g.settledTime}) {
			return
		}
	}
	if !created() {
		return
	}
	for {
		select {
		case <-w.stop:
			return
		case <-status:
			// Connected again after an outage: re-arm from what we
			// delivered, through the resume check. Before the Synced
			// marker, a state-sync starts over; revisions already
			// delivered are skipped below (the re-sync repeats them in
			// the same order).
			c.close()
			var err error
			var start protocol.Revision
			var from protocol.Cursor // a state-sync starts over, on the same stream
			if resuming || synced {
				from = protocol.Cursor{Rev: g.frontier, MsgUnixNano: g.frontierTime}
				if settling && g.settled < g.frontier {
					from = protocol.Cursor{Rev: g.frontier, Unsettled: true, Settled: g.settled}
				}
			}
			if _, start, _, err = w.b.resumePoint(w.ctx, from, w.stream); err == nil {
				c, err = w.b.openWatch(w.ctx, w.scope, start)
			}
			if err != nil {
				c = nil
				w.err = err
				return
			}
			resuming = resuming || synced
			if settling && g.settled < g.frontier {
				// The re-arm's resume check settled the frontier.
				g.settled, g.settledTime = g.frontier, g.frontierTime
				if !send(fold.Event{Settle: g.settled, SettleTime: g.settledTime}) {
					return
				}
			}
			if !created() {
				return
			}
		case m := <-c.msgs:
			// Take what the inbox holds with single-channel receives,
			// up to watchDrain messages, rather than this
			// many-channel select per message: stop, status and the
			// probe are still polled at least once per watchDrain
			// messages. A re-created consumer has a new inbox: c.msgs
			// is read afresh each time.
			for n := 1; ; n++ {
				if !take(m) {
					return
				}
				if n == watchDrain {
					break
				}
				var more bool
				select {
				case m = <-c.msgs:
					more = true
				default:
				}
				if !more {
					break
				}
			}
		case <-heartbeats.C:
			// Two heartbeat periods without a message: the consumer is
			// gone (a server restart, a deleted stream). Re-create it
			// while connected; after an outage the status listener
			// re-arms instead.
			if c.active || len(c.msgs) > 0 || !w.b.nc.IsConnected() {
				c.active = false
				continue
			}
			if !recreate() {
				return
			}
		case <-probe:
			if guarding && !delivered {
				if err := g.check(false); err != nil {
					w.err = err
					return
				}
			}
			delivered = false
		case <-settleTick:
			if !settling {
				continue
			}
			ev, err := w.settle(g)
			if err != nil {
				w.err = err
				return
			}
			if ev != nil && !send(*ev) {
				return
			}
		}
	}
}

// checkStream fails with a *StreamError when the bucket's stream is not
// stream (not zero); a failed read is an error too.
func (b *Bucket) checkStream(ctx context.Context, stream time.Time) error {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return err
	}
	if !info.Created.Equal(stream) {
		return &StreamError{Bucket: b.name, Want: stream, Got: info.Created}
	}
	return nil
}

// OpOf is the one conversion of a NATS KV operation into the fold's.
func OpOf(op jetstream.KeyValueOp) fold.Op {
	switch op {
	case jetstream.KeyValueDelete:
		return fold.OpDelete
	case jetstream.KeyValuePurge:
		return fold.OpPurge
	}
	return fold.OpPut
}

// floorGuard is the live check that retention has not overrun a
// whole-bucket watch (protocol.ResumeWindowOK against the frontier), and a
// prefix watch's settle state (Watcher.settle).
type floorGuard struct {
	ctx          context.Context // the watcher's
	b            *Bucket
	on           bool // a whole-bucket watch: guarded in band
	frontier     protocol.Revision
	frontierTime int64
	// A prefix watch (lazy) settles its deliveries after the fact:
	// every update of the scope at or below settled was delivered;
	// settledTime is the server time of a message at or below it.
	lazy        bool
	settled     protocol.Revision
	settledTime int64
}

// check reads retention and returns a *CursorError if it overran the
// frontier. In band (a delivery skipped revisions) the skipped revisions are
// evidence that must be examined before the delivery is handed on, so a
// failed read ends the watch too; the caller re-watches from its applied
// cursor, which re-runs the resume check. A failed backstop probe is no
// evidence of anything and is retried at the next tick.
func (g *floorGuard) check(inBand bool) error {
	ret, now, err := g.b.Retention(g.ctx)
	if err != nil {
		if inBand {
			return fmt.Errorf("natskv: floor guard: delivery skipped from %d, and retention could not be read: %w", g.frontier, err)
		}
		return nil
	}
	if protocol.ResumeWindowOK(g.frontier, ret.First) {
		return nil
	}
	if protocol.GapHoldsNoEviction(ret, g.frontierTime, now.UnixNano()) {
		return nil
	}
	return &CursorError{Verdict: protocol.ResumeExpired, Cursor: g.frontier, Retention: ret, MidWatch: true}
}
