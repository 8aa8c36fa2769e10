package natskv

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Demux reads a bucket's stream once for all the partitions of it that a
// node folds, and hands each update to the watch of its key's partition
// (RATIONALE.md, "Partitions"). Without it, each partition's watch reads
// the whole stream and drops the other partitions' updates: N partitions
// on one node cost the server N deliveries, and the node N decodes, of
// every message.
//
// A shared reader is one whole-bucket Watcher. Each partition's watch (a
// demuxWatch) remembers the last revision handed to it (its floor), so the
// shared Watcher can be started again from the least floor whenever a
// watch joins behind it: the others skip what they already had. A watch
// joins a shared reader only when the reader can give it what its own
// Watcher would: a state-sync joins a state-sync that has not yet reached
// its Synced marker, a resume joins a resume (or a state-sync since
// synced); any other watch reads on its own Watcher, as without a Demux.
// Each watch gets the events its own partitioned Watcher would have
// given: its partition's updates, settle marks for the others' (at the
// head and every settleEvery skipped), Synced once.
type Demux struct {
	stall   time.Duration // stallLimit (tests set less)
	mu      sync.Mutex
	readers map[string]*sharedReader // by bucket name
	closed  bool
	wg      sync.WaitGroup
}

// NewDemux returns an empty Demux; Close ends its readers.
func NewDemux() *Demux { return &Demux{readers: map[string]*sharedReader{}, stall: stallLimit} }

// Feed returns watches of scope on b: a partition's share the bucket's
// reader; any other scope's (and every watch of a nil Demux) are b's own
// (Bucket.Feed).
func (d *Demux) Feed(b *Bucket, scope Scope, o WatchOptions) fold.Feed {
	if d == nil || scope.Partition.Whole() || !scope.WholeBucket() {
		return b.Feed(scope, o)
	}
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	return demuxFeed{d: d, b: b, scope: scope, o: o}
}

// Close ends every shared reader and the watches on them (their Err is
// ErrWatchClosed), and waits for the readers to stop. A watch reading on
// its own Watcher at that moment goes on until stopped; later watches
// read on their own.
func (d *Demux) Close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		for _, r := range d.readers {
			close(r.quit)
		}
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// reader is the shared reader of b's bucket (nil once closed).
func (d *Demux) reader(b *Bucket) *sharedReader {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	r := d.readers[b.name]
	if r == nil {
		r = &sharedReader{b: b, ctl: make(chan func()), quit: make(chan struct{}), stall: d.stall}
		d.readers[b.name] = r
		d.wg.Go(r.run)
	}
	return r
}

type demuxFeed struct {
	d     *Demux
	b     *Bucket
	scope Scope
	o     WatchOptions
}

func (f demuxFeed) Watch(ctx context.Context, from protocol.Cursor) (fold.Source, error) {
	r := f.d.reader(f.b)
	if r == nil {
		return f.b.Watch(ctx, f.scope, from, f.o)
	}
	w := &demuxWatch{r: r, p: f.scope.Partition, o: f.o, events: make(chan fold.Event, f.o.Buffer),
		stopping: make(chan struct{}), done: make(chan struct{}), floor: from.Rev, floorTime: from.MsgUnixNano, fresh: from.Rev == 0, first: true}
	shared, err := r.attach(ctx, w, from)
	switch {
	case shared && err != nil:
		return nil, err
	case shared:
		return w, nil
	}
	// The shared read cannot serve this watch yet (a state-sync while it
	// is live, or the other way round): it reads on its own Watcher until
	// it has caught up, then joins (follow).
	pw, err := f.b.Watch(ctx, f.scope, from, f.o)
	if err != nil {
		return nil, err
	}
	w.head, w.first = pw.HeadAtStart(), false
	go w.follow(pw)
	return w, nil
}

// sharedReader is one bucket's shared Watcher and the watches on it. All
// its state belongs to its goroutine (run); attach and Stop hand it
// closures through ctl.
type sharedReader struct {
	b    *Bucket
	ctl  chan func()
	quit chan struct{}

	w       *Watcher      // nil: idle
	syncing bool          // w is a state-sync that has not handed on its Synced marker
	o       WatchOptions  // w's
	gen     int           // counts the Watchers started: a dispatch of an event of an older one is abandoned
	watches []*demuxWatch // in the order they joined
	stall   time.Duration // stallLimit (tests set less)
}

// demuxWatch is one partition's watch: a fold.Source. It is handed its
// events by the shared reader, or, until it can join it, by its own
// Watcher (follow).
type demuxWatch struct {
	r        *sharedReader
	p        protocol.Partition
	o        WatchOptions
	events   chan fold.Event
	head     protocol.Revision
	once     sync.Once
	stopping chan struct{} // Stop was called
	done     chan struct{}
	err      error // set before done closes

	// Owned by whoever hands on the events (the reader's goroutine once
	// joined, follow before):
	floor     protocol.Revision // the last revision handed on (an update or a settle mark)
	floorTime int64
	synced    bool
	skipped   int // updates of other partitions since the last settle mark
	ended     bool
	fresh     bool // a state-sync (started from no cursor)
	first     bool // not yet started: the first join sets head
}

var _ fold.Source = (*demuxWatch)(nil)

func (w *demuxWatch) Events() <-chan fold.Event { return w.events }

// HeadAtStart is the head when the watch started: of the Watcher it
// joined, or of its own.
func (w *demuxWatch) HeadAtStart() protocol.Revision { return w.head }

func (w *demuxWatch) Err() error {
	<-w.done
	return w.err
}

// Stop ends the watch and closes Events; the shared reader stops its
// Watcher when no watch is left on it.
func (w *demuxWatch) Stop() {
	w.once.Do(func() {
		close(w.stopping)
		select {
		case w.r.ctl <- func() { w.r.leave(w) }:
		case <-w.done:
		case <-w.r.quit:
		}
	})
	<-w.done
}

// end closes the watch's Events with err (by whoever hands them on).
func (w *demuxWatch) end(err error) {
	if w.ended {
		return
	}
	select {
	case <-w.stopping:
		err = nil // stopped: as a Watcher's, no reason
	default:
	}
	w.ended, w.err = true, err
	close(w.events)
	close(w.done)
}

// cursor is the position to resume the watch from: its floor.
func (w *demuxWatch) cursor() protocol.Cursor {
	return protocol.Cursor{Rev: w.floor, MsgUnixNano: w.floorTime}
}

// joinEvery is how many events a watch on its own Watcher hands on
// between two attempts to join the shared read.
const joinEvery = 4096

// follow hands on the events of w's own Watcher pw, and joins the shared
// read once pw has synced and caught up with the head (the shared read
// then resumes from what w was handed: a resume joins a live read). It
// ends w when pw ends, or when w stops.
func (w *demuxWatch) follow(pw *Watcher) {
	next := 0 // events until the next attempt to join
	for {
		var ev fold.Event
		var ok bool
		select {
		case ev, ok = <-pw.Events():
		case <-w.stopping:
			pw.Stop()
			w.end(nil)
			return
		}
		if !ok {
			w.end(pw.Err())
			return
		}
		if w.had(ev) {
			continue // handed before, by the shared read it left
		}
		select {
		case w.events <- ev:
		case <-w.stopping:
			pw.Stop()
			w.end(nil)
			return
		}
		w.handed(ev)
		if next--; !w.synced || ev.Behind != 0 || w.floor == 0 || next > 0 {
			continue
		}
		next = joinEvery
		if shared, err := w.r.attach(context.Background(), w, w.cursor()); shared && err == nil {
			pw.Stop() // what it read past w's floor, the shared read hands on
			return
		}
	}
}

// attach joins w, from cursor from, to the reader; shared false: the
// reader cannot serve it now, and it should read on its own.
func (r *sharedReader) attach(ctx context.Context, w *demuxWatch, from protocol.Cursor) (shared bool, err error) {
	done := make(chan struct{})
	fn := func() {
		defer close(done)
		shared, err = r.join(ctx, w, from)
	}
	select {
	case r.ctl <- fn:
	case <-r.quit:
		return false, nil
	case <-ctx.Done():
		return true, ctx.Err() // fn was never handed over (ctl is unbuffered)
	}
	<-done
	return shared, err
}

// join runs attach on the reader's goroutine.
func (r *sharedReader) join(ctx context.Context, w *demuxWatch, from protocol.Cursor) (bool, error) {
	select {
	case <-w.stopping:
		return false, nil // its own Watcher's follow ends it
	default:
	}
	o := w.o
	fresh := from.Rev == 0
	if from.Unsettled || (r.w != nil && (fresh != r.syncing || o.Buffer != r.o.Buffer || !o.Stream.Equal(r.o.Stream))) {
		return false, nil
	}
	start := from
	for _, x := range r.watches {
		if fresh {
			break // a state-sync starts over from nothing
		}
		if x.floor < start.Rev {
			start = x.cursor()
		}
	}
	if !fresh && start.Rev == 0 {
		// A watch that has been handed nothing since it synced an empty
		// bucket: no cursor to resume it from.
		return false, nil
	}
	nw, err := r.b.Watch(ctx, Scope{}, start, o)
	if err != nil {
		if start != from {
			return false, nil // another watch's position: let this one find its own
		}
		return true, err
	}
	if r.w != nil {
		r.w.Stop()
	}
	r.w, r.o, r.syncing = nw, o, fresh
	r.gen++
	if w.first {
		w.head, w.first = nw.HeadAtStart(), false // set before Watch returns it: never written after
	}
	r.watches = append(r.watches, w)
	return true, nil
}

// leave ends w, if it joined, and stops the shared Watcher when no watch
// is left.
func (r *sharedReader) leave(w *demuxWatch) {
	if !slices.Contains(r.watches, w) {
		return // on its own Watcher: follow ends it
	}
	w.end(nil)
	r.drop(w)
}

// drop takes w off the shared read, and stops the shared Watcher when no
// watch is left.
func (r *sharedReader) drop(w *demuxWatch) {
	// A new slice: a dispatch a closure interrupted still ranges over the
	// old one.
	r.watches = slices.DeleteFunc(slices.Clone(r.watches), func(x *demuxWatch) bool { return x == w })
	if len(r.watches) == 0 && r.w != nil {
		r.w.Stop()
		r.w = nil
		r.gen++
	}
}

// fail ends every watch with the shared Watcher's err.
func (r *sharedReader) fail(err error) {
	if err == nil {
		err = ErrWatchClosed
	}
	for _, w := range r.watches {
		w.end(err)
	}
	r.watches, r.w = nil, nil
	r.gen++
}

func (r *sharedReader) run() {
	defer func() {
		if r.w != nil {
			r.w.Stop()
		}
		r.fail(ErrWatchClosed)
	}()
	for {
		var events <-chan fold.Event
		if r.w != nil {
			events = r.w.Events()
		}
		select {
		case <-r.quit:
			return
		case fn := <-r.ctl:
			fn()
		case ev, ok := <-events:
			// Take what the Watcher buffered with single-channel
			// receives, up to watchDrain events, as the Watcher does
			// with its inbox.
			for n := 1; ; n++ {
				if !ok {
					if r.w != nil {
						r.fail(r.w.Err())
					}
					break
				}
				if !r.dispatch(ev) || n == watchDrain {
					break
				}
				select {
				case ev, ok = <-events:
					continue
				default:
				}
				break
			}
		}
	}
}

// dispatch hands ev to the watches it concerns; false: a closure run
// meanwhile replaced or stopped the Watcher, whose events are abandoned
// (the next one starts from every watch's floor).
func (r *sharedReader) dispatch(ev fold.Event) bool {
	gen := r.gen
	if ev.Synced {
		r.syncing = false // handed on to some: no state-sync joins any more
	}
	part := -1 // the partition of ev's key, by count
	count := 0
	for _, w := range r.watches {
		out, ok := w.eventOf(ev, r.b.name, &part, &count)
		if !ok {
			continue
		}
		sent, more := r.send(w, out, gen)
		if sent {
			w.handed(out)
		}
		if !more {
			return false
		}
	}
	if ev.Synced {
		r.syncing = false
	}
	return true
}

// eventOf is what w is to be handed for the shared Watcher's ev, if
// anything (ok false: nothing). part caches the partition of ev's key for
// count. It does not move w's floor: handed does, once w has it (an event
// abandoned on the way is handed on again by the next Watcher).
func (w *demuxWatch) eventOf(ev fold.Event, bucket string, part, count *int) (fold.Event, bool) {
	switch {
	case w.ended || w.had(ev):
		return fold.Event{}, false
	case ev.Synced:
		return fold.Event{Synced: true}, true
	case ev.Key == "":
		return fold.Event{Settle: ev.Settle, SettleTime: ev.SettleTime, Behind: ev.Behind}, true
	}
	if *count != w.p.Count {
		*count, *part = w.p.Count, protocol.PartitionOf(bucket, ev.Key, w.p.Count)
	}
	if *part == w.p.Index {
		w.skipped = 0
		return fold.Event{Update: ev.Update, Behind: ev.Behind}, true
	}
	// Another partition's: as the partitioned Watcher does, a settle
	// mark at the head and every settleEvery skipped updates.
	if w.skipped++; ev.Behind != 0 && w.skipped < settleEvery {
		return fold.Event{}, false
	}
	w.skipped = 0
	return fold.Event{Settle: ev.Rev, SettleTime: ev.Time, Behind: ev.Behind}, true
}

// had reports whether w was handed ev (or what vouches for it) before:
// its Synced marker, a revision at or below its floor, or a bare settle
// mark of none.
func (w *demuxWatch) had(ev fold.Event) bool {
	switch {
	case ev.Synced:
		return w.synced
	case ev.Key != "":
		return ev.Rev <= w.floor
	default:
		return ev.Settle == protocol.NoRevision || ev.Settle <= w.floor
	}
}

// handed records that w was handed ev.
func (w *demuxWatch) handed(ev fold.Event) {
	switch {
	case ev.Synced:
		w.synced = true
	case ev.Key != "":
		w.floor, w.floorTime = ev.Rev, ev.Time
	default:
		w.floor, w.floorTime = ev.Settle, ev.SettleTime
	}
}

// send hands ev to w, serving closures while w's buffer is full. sent:
// w has it; more false: a closure replaced or stopped the Watcher of
// generation gen, or the reader is quitting.
func (r *sharedReader) send(w *demuxWatch, ev fold.Event, gen int) (sent, more bool) {
	select {
	case w.events <- ev:
		return true, true
	default:
	}
	stalled := time.NewTimer(r.stall)
	defer stalled.Stop()
	for {
		select {
		case w.events <- ev:
			return true, true
		case fn := <-r.ctl:
			fn()
			if r.gen != gen {
				return false, false
			}
			if w.ended {
				return false, true
			}
		case <-stalled.C:
			if w.synced && w.floor == 0 {
				// Synced an empty bucket and handed nothing since: no
				// cursor to resume it from on its own. It waits.
				stalled.Reset(r.stall)
				continue
			}
			r.evict(w)
			return false, r.gen == gen
		case <-r.quit:
			return false, false
		}
	}
}

// stallLimit is how long the shared read waits on one watch's full
// buffer before that watch leaves it for a Watcher of its own: a stalled
// fold (a slow plugin call, a commit retried) holds its siblings up that
// long at most.
const stallLimit = 2 * time.Second

// evict moves w, whose reader stalled the shared read, to a Watcher of
// its own from its floor; it joins again once caught up (follow).
func (r *sharedReader) evict(w *demuxWatch) {
	r.drop(w)
	from := w.cursor()
	if w.fresh && !w.synced {
		// A state-sync starts over; follow skips what w had.
		from = protocol.Cursor{}
	}
	go func() {
		pw, err := r.b.Watch(context.Background(), Scope{Partition: w.p}, from, w.o)
		if err != nil {
			w.end(err)
			return
		}
		w.follow(pw)
	}()
}
