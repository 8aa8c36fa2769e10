package natskv

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// seen is what a watch handed on: its updates' revisions, the state they
// make, and the highest revision it vouched for. A tap's goroutine fills
// it while the test reads it, under mu.
type seen struct {
	mu      sync.Mutex
	part    protocol.Partition
	revs    []protocol.Revision
	state   map[string]string
	reached protocol.Revision
	synced  bool
	markers int    // Synced markers handed on
	bad     string // the first event a watch must not hand on
	// hold, held by the test, pauses the tap.
	hold sync.Mutex
	last []string // the last few events, for a failure's message
}

func newSeen(p protocol.Partition, from protocol.Revision) *seen {
	return &seen{part: p, state: map[string]string{}, reached: from}
}

// tap reads src into s on a goroutine, until src ends; the returned
// func stops src and joins the goroutine.
func (s *seen) tap(src fold.Source) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s.hold.Lock()
			s.hold.Unlock() //nolint:staticcheck // a gate: held by the test to pause the tap
			ev, ok := <-src.Events()
			if !ok {
				return
			}
			s.mu.Lock()
			s.add(ev)
			s.mu.Unlock()
		}
	}()
	return func() { src.Stop(); <-done }
}

// pause pauses s's tap until the returned func (or the test's end)
// resumes it.
func (s *seen) pause(t *testing.T) (resume func()) {
	s.hold.Lock()
	var once sync.Once
	resume = func() { once.Do(s.hold.Unlock) }
	t.Cleanup(resume)
	return resume
}

// wait waits until s vouched for head and handed on its Synced marker,
// failing on a bad event.
func (s *seen) wait(t *testing.T, head protocol.Revision) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s.mu.Lock()
		bad, reached, synced := s.bad, s.reached, s.synced
		s.mu.Unlock()
		switch {
		case bad != "":
			t.Fatalf("partition %v: %s", s.part, bad)
		case reached >= head && synced:
			return
		case time.Now().After(deadline):
			t.Fatalf("partition %v: the watch reached %d in 2m, want %d (synced %v)", s.part, reached, head, synced)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *seen) add(ev fold.Event) {
	if s.bad != "" {
		return
	}
	s.last = append(s.last, fmt.Sprintf("%d/%d/%v/%v/%d", ev.Rev, ev.Settle, ev.Synced, ev.Key, ev.Behind))
	if len(s.last) > 8 {
		s.last = s.last[1:]
	}
	defer func() {
		if s.bad != "" {
			s.bad += fmt.Sprint(s.last)
		}
	}()
	s.synced = s.synced || ev.Synced
	if ev.Synced {
		s.markers++
	}
	if ev.Settle != protocol.NoRevision {
		if ev.Settle < s.reached {
			s.bad = fmt.Sprintf("a settle mark at %d after %d", ev.Settle, s.reached)
		}
		s.reached = ev.Settle
	}
	if ev.Key == "" {
		return
	}
	if !s.part.Holds("parts", ev.Key) {
		s.bad = fmt.Sprintf("handed key %q of partition %d", ev.Key, protocol.PartitionOf("parts", ev.Key, s.part.Count))
	}
	if ev.Rev <= s.reached {
		s.bad = fmt.Sprintf("revision %d handed on after %d", ev.Rev, s.reached)
	}
	s.reached = ev.Rev
	s.revs = append(s.revs, ev.Rev)
	if ev.Op == fold.OpPut {
		s.state[ev.Key] = string(ev.Value)
	} else {
		delete(s.state, ev.Key)
	}
}

// own is what partition p's own Watcher from from hands on up to head.
func own(t *testing.T, b *Bucket, p protocol.Partition, from protocol.Revision, head protocol.Revision) *seen {
	t.Helper()
	w, err := b.Watch(t.Context(), Scope{Partition: p}, protocol.Cursor{Rev: from}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := newSeen(p, from)
	stop := s.tap(w)
	defer stop()
	s.wait(t, head)
	return s
}

// consumers is how many consumers the bucket's stream has.
func consumers(t *testing.T, b *Bucket) int {
	t.Helper()
	info, err := b.streamInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// setStall sets the stall limit of d's readers.
func (d *Demux) setStall(limit time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.readers {
		r.ctl <- func() { r.stall = limit }
	}
}

// oneConsumer waits until the bucket's stream has one consumer: the
// shared read (a watch that reads on its own Watcher has another, until
// it catches up and joins).
func oneConsumer(t *testing.T, b *Bucket, how string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c := consumers(t, b)
		if c == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the stream has %d consumers after 1m, want 1", how, c)
		}
	}
}

// TestDemuxGivesEachPartitionWhatItsOwnWatchWould: 4 partitions' watches
// on one Demux read the bucket's stream on one consumer, and each hands
// on what the partition's own Watcher would: after state-syncs joined one
// by one while the stream grows, the partition's state; after a watch
// stops and resumes behind the others, exactly the updates a Watcher
// resumed from the same cursor gives (and the others, none twice); the
// same when a watch resumes ahead of one whose reader lags, and when a
// watch's reader stalls past the stall limit (the others go on without
// it). A state-sync asked for while the shared read is live reads on its
// own Watcher, then joins; Close ends the watches. Seeded history of puts
// and deletes. Mutations caught: Feed without the Demux (4 consumers); a
// restart that does not skip what a watch had (a revision twice); the
// other watches' floors ignored for a restart (updates missing); no
// eviction of a stalled watch (the others wait for it); a watch on its
// own Watcher that never joins (2 consumers).
func TestDemuxGivesEachPartitionWhatItsOwnWatchWould(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	s := startServer(t, t.TempDir(), -1)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 64, Replicas: 1})
	var head protocol.Revision
	write := func(n int) {
		for range n {
			k := "k." + strconv.Itoa(rng.IntN(300))
			if rng.IntN(8) == 0 {
				if err := b.KV().Delete(t.Context(), k); err != nil {
					t.Fatal(err)
				}
				ret, _, err := b.Retention(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				head = ret.Last
				continue
			}
			head = put(t, b, k, strconv.Itoa(rng.IntN(1000)))
		}
	}
	write(1500)
	const n = 4
	d := NewDemux()
	t.Cleanup(d.Close)
	watches := make([]fold.Source, n)
	stops := make([]func(), n)
	got := make([]*seen, n)
	// Cleanups, not defers: they run after a paused tap's resume.
	t.Cleanup(func() {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
	})
	watch := func(p int, from protocol.Revision) {
		part := protocol.Partition{Index: p, Count: n}
		w, err := d.Feed(b, Scope{Partition: part}, WatchOptions{Buffer: 16}).Watch(t.Context(), protocol.Cursor{Rev: from})
		if err != nil {
			t.Fatal(err)
		}
		watches[p], got[p] = w, newSeen(part, from)
		stops[p] = got[p].tap(w)
	}
	for p := range n {
		watch(p, 0)
		// Let this watch take some events, so that the next join
		// restarts the read behind what this one had.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			got[p].mu.Lock()
			r := got[p].reached
			got[p].mu.Unlock()
			if r > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d: no event in 1m", p)
			}
		}
		write(200)
	}
	oneConsumer(t, b, "4 partitions' watches on a Demux")
	for p := range n {
		got[p].wait(t, head)
		want := own(t, b, got[p].part, 0, head)
		got[p].mu.Lock()
		if !maps.Equal(got[p].state, want.state) {
			t.Errorf("partition %d: after the shared state-sync the watch holds %d keys, its own watch %d: %v", p, len(got[p].state), len(want.state), diff(got[p].state, want.state))
		}
		got[p].mu.Unlock()
	}

	// compare checks that each partition's watch handed on, since cursors,
	// what its own Watcher resumed from there hands on.
	compare := func(how string, cursors []protocol.Revision) {
		t.Helper()
		for p := range n {
			got[p].mu.Lock()
			got[p].synced = true // a resume's marker is not what is compared
			got[p].mu.Unlock()
			got[p].wait(t, head)
			want := own(t, b, got[p].part, cursors[p], head)
			got[p].mu.Lock()
			if !slices.Equal(got[p].revs, want.revs) {
				t.Errorf("%s: partition %d, from %d, handed on %d updates, its own watch %d (first difference at %v)",
					how, p, cursors[p], len(got[p].revs), len(want.revs), firstDiff(got[p].revs, want.revs))
			}
			got[p].mu.Unlock()
		}
		oneConsumer(t, b, how)
	}
	// mark waits until the watches (but skip) reached head and returns
	// their positions, from which their updates are recorded again.
	mark := func(skip int) []protocol.Revision {
		cursors := make([]protocol.Revision, n)
		for p := range n {
			if p == skip {
				continue
			}
			got[p].wait(t, head)
			got[p].mu.Lock()
			cursors[p] = got[p].reached
			got[p].revs = nil
			got[p].mu.Unlock()
		}
		return cursors
	}

	// Partition 2 stops, the others go on; it resumes behind them.
	stops[2]()
	stops[2] = nil
	from := got[2].reached
	write(300)
	cursors := mark(2)
	cursors[2] = from
	watch(2, from)
	write(300)
	compare("a watch resumed behind the others", cursors)

	// Partition 1's reader pauses (its buffer fills, it falls behind);
	// partition 2 stops and resumes from the head, ahead of it: the
	// shared read starts again from partition 1's floor.
	cursors = mark(-1)
	unhold := got[1].pause(t)
	stops[2]()
	stops[2] = nil
	write(300)
	cursors[2] = head
	watch(2, head)
	unhold()
	write(300)
	compare("a watch resumed ahead of another", cursors)

	// Partition 1's reader stalls past the stall limit: the shared read
	// moves it to a Watcher of its own and goes on with the others;
	// caught up, it joins again.
	d.setStall(100 * time.Millisecond)
	cursors = mark(-1)
	got[1].mu.Lock()
	markers := got[1].markers
	got[1].mu.Unlock()
	unhold = got[1].pause(t)
	write(300)
	for _, p := range []int{0, 2, 3} {
		got[p].wait(t, head)
	}
	unhold()
	write(100)
	compare("a stalled watch moved to its own Watcher and back", cursors)
	if got[1].markers != markers {
		t.Errorf("a synced watch moved to its own Watcher and back: handed %d more Synced markers, want none", got[1].markers-markers)
	}
	d.setStall(stallLimit)

	// A state-sync while the shared read is live reads on its own Watcher,
	// then joins the shared read once caught up.
	part := protocol.Partition{Index: 0, Count: n}
	w, err := d.Feed(b, Scope{Partition: part}, WatchOptions{Buffer: 16}).Watch(t.Context(), protocol.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	late := newSeen(part, 0)
	stop := late.tap(w)
	t.Cleanup(stop)
	late.wait(t, head)
	if !maps.Equal(late.state, got[0].state) {
		t.Errorf("partition 0: a state-sync on its own holds %d keys, the shared watch %d", len(late.state), len(got[0].state))
	}
	oneConsumer(t, b, "a late state-sync, caught up (joined the shared read)")
	late.mu.Lock()
	late.revs = nil
	late.mu.Unlock()
	got[0].mu.Lock()
	got[0].revs = nil
	got[0].mu.Unlock()
	write(300)
	late.wait(t, head)
	got[0].wait(t, head)
	if !slices.Equal(late.revs, got[0].revs) || !maps.Equal(late.state, got[0].state) {
		t.Errorf("partition 0: after the late state-sync joined, it handed on %d updates, the other watch of the partition %d (%s)", len(late.revs), len(got[0].revs), firstDiff(late.revs, got[0].revs))
	}
	stop()

	d.Close()
	for p, w := range watches {
		stops[p]()
		stops[p] = nil
		if err := w.Err(); err != ErrWatchClosed {
			t.Errorf("partition %d: after Close the watch ended with %v, want %v", p, err, ErrWatchClosed)
		}
	}
}

// firstDiff is where a and b differ: the index and a few revisions of
// each from there.
func firstDiff(a, b []protocol.Revision) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return fmt.Sprintf("%d: %v, want %v", i, a[i:min(len(a), i+5)], b[i:min(len(b), i+5)])
}

// diff names a few keys whose values differ between a and b.
func diff(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, fmt.Sprintf("%s=%q/%q", k, v, w))
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s=<none>/%q", k, w))
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 5)]
}

// pausedWatches starts the watches of n partitions on d from revision
// from, each tapped and paused (resume[p] resumes partition p's).
func pausedWatches(t *testing.T, d *Demux, b *Bucket, n, buffer int, from protocol.Revision) (got []*seen, resume []func()) {
	t.Helper()
	got, resume = make([]*seen, n), make([]func(), n)
	for p := range n {
		part := protocol.Partition{Index: p, Count: n}
		w, err := d.Feed(b, Scope{Partition: part}, WatchOptions{Buffer: buffer}).Watch(t.Context(), protocol.Cursor{Rev: from})
		if err != nil {
			t.Fatal(err)
		}
		got[p] = newSeen(part, from)
		resume[p] = got[p].pause(t)
		t.Cleanup(got[p].tap(w))
	}
	return got, resume
}

// TestDemuxStalledStateSyncStartsOver: a watch whose reader stalls in the
// middle of a shared state-sync leaves it for a state-sync of its own,
// which hands on only what the watch did not have: it ends with its
// partition's state, no revision twice, and one Synced marker, while the
// other watch finished without it. Mutation caught: the state-sync
// started over without skipping what the watch had (a revision twice).
func TestDemuxStalledStateSyncStartsOver(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 1, Replicas: 1})
	var head protocol.Revision
	for i := range 2000 {
		head = put(t, b, "k."+strconv.Itoa(i), "v")
	}
	for i := range 500 { // superseded: a resume from mid-sync would miss keys or be refused
		head = put(t, b, "k."+strconv.Itoa(i*3), "again")
	}
	d := NewDemux()
	d.stall = 100 * time.Millisecond
	t.Cleanup(d.Close)
	const n = 2
	got, resume := pausedWatches(t, d, b, n, 16, 0)
	resume[0]()
	got[0].wait(t, head)
	resume[1]()
	got[1].wait(t, head)
	for p := range n {
		want := own(t, b, got[p].part, 0, head)
		got[p].mu.Lock()
		if !maps.Equal(got[p].state, want.state) {
			t.Errorf("partition %d: the watch holds %d keys, its own watch %d: %v", p, len(got[p].state), len(want.state), diff(got[p].state, want.state))
		}
		if got[p].markers != 1 {
			t.Errorf("partition %d: %d Synced markers, want 1", p, got[p].markers)
		}
		got[p].mu.Unlock()
	}
}

// TestDemuxEvictsItsLastWatch: the only watch on a shared read stalls
// past the stall limit; it moves to a Watcher of its own, the shared read
// goes idle, and the watch hands on everything. Mutation caught: the
// dispatch going on with the stopped Watcher's events, together with the
// nil check in run that also guards it (the reader panicked, taking the
// process down).
func TestDemuxEvictsItsLastWatch(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 64, Replicas: 1})
	var head protocol.Revision
	for i := range 400 {
		head = put(t, b, "k."+strconv.Itoa(i%50), "v")
	}
	d := NewDemux()
	d.stall = 100 * time.Millisecond
	t.Cleanup(d.Close)
	part := protocol.Partition{Index: 0, Count: 2}
	w, err := d.Feed(b, Scope{Partition: part}, WatchOptions{Buffer: 4}).Watch(t.Context(), protocol.Cursor{Rev: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := newSeen(part, 1)
	resume := got.pause(t)
	stop := got.tap(w)
	t.Cleanup(stop)
	time.Sleep(500 * time.Millisecond) // stalled 5 times the limit
	resume()
	got.wait(t, head)
}

// TestDemuxEvictedResumeStaysAResume: a resumed watch stalled in its
// backlog (before its Synced marker) moves to a Watcher of its own
// resumed from its floor, and hands on every update its own Watcher
// would. Mutation caught: a watch not yet synced restarted as a
// state-sync (superseded updates lost: 36 of 999).
func TestDemuxEvictedResumeStaysAResume(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 64, Replicas: 1})
	var head protocol.Revision
	for i := range 2000 {
		head = put(t, b, "k."+strconv.Itoa(i%40), strconv.Itoa(i))
	}
	d := NewDemux()
	d.stall = 100 * time.Millisecond
	t.Cleanup(d.Close)
	got, resume := pausedWatches(t, d, b, 2, 16, 1)
	resume[0]()
	got[0].wait(t, head)
	resume[1]()
	got[1].wait(t, head)
	want := own(t, b, got[1].part, 1, head)
	got[1].mu.Lock()
	defer got[1].mu.Unlock()
	if !slices.Equal(got[1].revs, want.revs) {
		t.Errorf("evicted resume: %d updates, its own watch %d (%s)", len(got[1].revs), len(want.revs), firstDiff(got[1].revs, want.revs))
	}
}

// TestDemuxNoStateSyncJoinsOnceSynced: the shared state-sync hands its
// Synced marker to A, then blocks on B's full buffer; a new state-sync C
// asks to join meanwhile. It must read on its own: a state-sync started
// again under A, already live, would skip A's overwritten updates.
// Mutation caught: the read counted as syncing until every watch had the
// marker (A missed a revision). The reader's block on B is waited for by
// a pause, not observed: under heavy load the join may come before it,
// and the test then passes without reaching the case.
func TestDemuxNoStateSyncJoinsOnceSynced(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 64, Replicas: 1})
	var keys [2][]string
	for i := 0; len(keys[0]) < 10 || len(keys[1]) < 4; i++ {
		k := "k." + strconv.Itoa(i)
		p := protocol.PartitionOf("parts", k, 2)
		if len(keys[p]) < map[int]int{0: 10, 1: 4}[p] {
			keys[p] = append(keys[p], k)
		}
	}
	var head protocol.Revision
	for _, k := range keys[0] {
		head = put(t, b, k, "v")
	}
	for _, k := range keys[1] {
		head = put(t, b, k, "v")
	}
	d := NewDemux()
	d.stall = 20 * time.Second
	t.Cleanup(d.Close)
	got, resume := pausedWatches(t, d, b, 2, 4, 0)
	resume[0]()
	got[0].wait(t, head)
	time.Sleep(100 * time.Millisecond)
	put(t, b, keys[0][0], "x")
	head = put(t, b, keys[0][0], "y")
	part := protocol.Partition{Index: 0, Count: 2}
	w, err := d.Feed(b, Scope{Partition: part}, WatchOptions{Buffer: 4}).Watch(t.Context(), protocol.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	late := newSeen(part, 0)
	t.Cleanup(late.tap(w))
	got[0].wait(t, head)
	resume[1]()
	got[0].mu.Lock()
	defer got[0].mu.Unlock()
	if !slices.Contains(got[0].revs, head-1) {
		t.Errorf("live watch A missed revision %d: last events %v", head-1, got[0].last)
	}
}
