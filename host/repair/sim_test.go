package repair_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// The deterministic simulation of the real loop (fold.Follow, fold.Loop, the
// store) and the key-listing repair, driven by a simulated NATS KV log
// (history 1: a write removes the key's previous message; delete markers
// that get purged; eviction of the oldest messages, current values
// included) and a fault-injecting store (a transient commit failure, or a
// crash at commit N: every later commit fails and the process dies). Time
// never moves (the loop's clock never fires), so batches close at MaxBatch,
// at the Synced marker and at the source's end: a seed fixes the whole run.
//
// It asserts, after every run that ends without a crash: the fold equals
// every write minus every real delete up to its cursor; the views are the
// plugin over the fold; the cursor never moved back; the plugin never saw a
// key move back nor a synthetic delete of a key the listing had live. On an
// evicting bucket the key listing is not the truth: the repair must refuse
// and leave the fold as it was.
//
// -repair.sim.schedules N runs more schedules (CI runs simSchedules).

var simN = flag.Int("repair.sim.schedules", 0, "run this many simulation schedules (default: the CI count)")

const simSchedules = 300

// simMsg is one message of the simulated stream.
type simMsg struct {
	seq   protocol.Revision
	key   string
	op    fold.Op
	value string
}

// simKV is the simulated bucket: its retained messages, and every write in
// order (the truth the fold must converge to).
type simKV struct {
	mu       sync.Mutex
	retained []simMsg // in seq order
	writes   []simMsg
	last     protocol.Revision
	evicting bool // retention can evict current values (and did, once evict ran)
	evicted  bool
}

func (k *simKV) write(key string, op fold.Op, value string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last++
	m := simMsg{k.last, key, op, value}
	k.retained = slices.DeleteFunc(k.retained, func(o simMsg) bool { return o.key == key }) // history 1
	k.retained = append(k.retained, m)
	k.writes = append(k.writes, m)
}

// purgeMarkers drops delete markers (KV PurgeDeletes) under the key-listing
// repair's axiom: a purge never removes a marker the fold has not read yet
// while its cursor can still resume (NATS keeps markers younger than 30
// minutes by default; a marker purged from the middle of the log, with the
// first revision unmoved, is invisible to every check: RATIONALE.md). So
// every marker goes when the purge leaves the cursor expired (the repair's
// job), otherwise only those at or below the cursor.
func (k *simKV) purgeMarkers(cursor protocol.Revision) {
	k.mu.Lock()
	defer k.mu.Unlock()
	all := slices.DeleteFunc(slices.Clone(k.retained), func(o simMsg) bool { return o.op != fold.OpPut })
	first := k.last + 1
	if len(all) > 0 {
		first = all[0].seq
	}
	if first > cursor+1 {
		k.retained = all
		return
	}
	k.retained = slices.DeleteFunc(k.retained, func(o simMsg) bool { return o.op != fold.OpPut && o.seq <= cursor })
}

// evict drops the n oldest retained messages, current values included.
func (k *simKV) evict(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n = min(n, len(k.retained))
	if n > 0 {
		k.retained = slices.Delete(k.retained, 0, n)
		k.evicted = true
	}
}

func (k *simKV) retention() protocol.Retention {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := protocol.Window{First: k.last + 1, Last: k.last}
	if len(k.retained) > 0 {
		w.First = k.retained[0].seq
	}
	if k.last == 0 {
		w.First = 1
	}
	r := protocol.Retention{Window: w}
	if k.evicting {
		r.MaxAge = time.Hour
	}
	return r
}

// truthAt is every write minus every real delete up to rev.
func (k *simKV) truthAt(rev protocol.Revision) map[string]entry {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := map[string]entry{}
	for _, w := range k.writes {
		if w.seq > rev {
			break
		}
		if w.op == fold.OpPut {
			m[w.key] = entry{w.seq, w.value}
		} else {
			delete(m, w.key)
		}
	}
	return m
}

// after returns the first retained message after rev, if any.
func (k *simKV) after(rev protocol.Revision) (simMsg, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range k.retained {
		if m.seq > rev {
			return m, true
		}
	}
	return simMsg{}, false
}

// simFeed starts watches of the simulated bucket. A watch delivers what is
// retained when it reads it (the log may change under it: hooks run at
// delivery points), ends when it has nothing more (a run of the simulation
// is everything up to the log's end), and applies the floor guard like the
// natskv watcher. Faults: cut ends a state-sync before its marker.
type simFeed struct {
	kv *simKV
	// hook, if set, runs before the nth delivery of the run (counted over
	// all its watches), on the source's goroutine.
	hook func(n int)
	// cutAt, if > 0, ends a state-sync with an error after that many
	// deliveries (a disconnect mid-listing).
	cutAt int
	n     int

	mu       sync.Mutex
	listings []map[string]bool // the live keys of each state-sync, when it started
}

var errSimCut = errors.New("sim: connection lost")

type simExpired struct{ cursor protocol.Revision }

func (e simExpired) Error() string        { return fmt.Sprintf("sim: cursor %d expired", e.cursor) }
func (e simExpired) Is(target error) bool { return target == fold.ErrCursorExpired }
func (f *simFeed) live() map[string]bool  { return f.listings[len(f.listings)-1] }
func (f *simFeed) lastListing() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.listings) == 0 {
		return nil
	}
	return f.live()
}

func (f *simFeed) Watch(_ context.Context, from protocol.Cursor) (fold.Source, error) {
	s := &simSource{f: f, events: make(chan fold.Event, 4), stop: make(chan struct{}), done: make(chan struct{})}
	ret := f.kv.retention()
	if from.Rev != protocol.NoRevision {
		if v := protocol.CheckResume(from.Rev, ret.Window); v != protocol.ResumeOK {
			if v == protocol.ResumeExpired {
				return nil, simExpired{from.Rev}
			}
			return nil, fmt.Errorf("sim: resume from %d: %v", from.Rev, v)
		}
		go s.resume(from.Rev)
		return s, nil
	}
	s.head = ret.Last
	f.kv.mu.Lock()
	var snap []simMsg
	live := map[string]bool{}
	for _, m := range f.kv.retained {
		snap = append(snap, m)
		if m.op == fold.OpPut {
			live[m.key] = true
		}
	}
	f.kv.mu.Unlock()
	f.mu.Lock()
	f.listings = append(f.listings, live)
	f.mu.Unlock()
	go s.sync(snap)
	return s, nil
}

type simSource struct {
	f      *simFeed
	events chan fold.Event
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
	err    error
	head   protocol.Revision
}

func (s *simSource) Events() <-chan fold.Event { return s.events }
func (s *simSource) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}
func (s *simSource) Err() error { <-s.done; return s.err }

// HeadAtStart is what natskv's watcher reports: the repair's cursor floor.
func (s *simSource) HeadAtStart() protocol.Revision { return s.head }

func (s *simSource) send(m simMsg) bool {
	s.f.n++
	if s.f.hook != nil {
		s.f.hook(s.f.n)
	}
	select {
	case s.events <- fold.Event{Update: fold.Update{Key: m.key, Value: []byte(m.value), Rev: m.seq, Op: m.op}}:
		return true
	case <-s.stop:
		return false
	}
}

func (s *simSource) sync(snap []simMsg) {
	defer close(s.done)
	defer close(s.events)
	for i, m := range snap {
		if s.f.cutAt > 0 && i == s.f.cutAt {
			s.f.cutAt = 0 // one cut per run
			s.err = errSimCut
			return
		}
		if !s.send(m) {
			return
		}
	}
	select {
	case s.events <- fold.Event{Synced: true}:
	case <-s.stop:
		return
	}
	s.follow(max(s.head, lastSeq(snap)))
}

func (s *simSource) resume(from protocol.Revision) {
	defer close(s.done)
	defer close(s.events)
	s.follow(from)
}

// follow delivers live messages after frontier until the log has no more,
// with the floor guard: a delivery that skips revisions retention evicted
// ends the watch as expired.
func (s *simSource) follow(frontier protocol.Revision) {
	for {
		m, ok := s.f.kv.after(frontier)
		if !ok {
			return
		}
		if m.seq > frontier+1 && !protocol.ResumeWindowOK(frontier, s.f.kv.retention().First) {
			s.err = simExpired{frontier}
			return
		}
		if !s.send(m) {
			return
		}
		frontier = m.seq
	}
}

func lastSeq(ms []simMsg) protocol.Revision {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].seq
}

// simClock never fires a timer of an hour or more (the batch window: the
// loop runs with a one-hour window, so batches close by size, marker and
// end only) and fires every shorter one at once (backoffs: the loop's
// commit retry, Follow's re-arm).
type simClock struct{}

type simTimer struct{ ch chan time.Time }

const simWindow = time.Hour

func (simClock) Now() time.Time        { return time.Unix(1_700_000_000, 0) }
func (simClock) NewTimer() fold.Timer  { return simTimer{make(chan time.Time, 1)} }
func (t simTimer) C() <-chan time.Time { return t.ch }
func (t simTimer) Reset(d time.Duration) {
	if d < simWindow {
		select {
		case t.ch <- time.Time{}:
		default:
		}
	}
}
func (t simTimer) Stop() {
	select {
	case <-t.ch:
	default:
	}
}

// simStore is the fault-injecting store: a transient failure at commit
// failAt, a crash (this and every later commit fail, the process dies) at
// commit crashAt.
type simStore struct {
	*fold.Store
	calls, failAt, crashAt int
	crash                  func()
	crashed                bool
}

var errSimCrash = errors.New("sim: the process died")

func (s *simStore) Commit(c fold.Commit) error {
	s.calls++
	if s.crashed || (s.crashAt > 0 && s.calls == s.crashAt) {
		if !s.crashed {
			s.crashed = true
			s.crash()
		}
		return errSimCrash
	}
	if s.calls == s.failAt {
		return errors.New("sim: transient commit failure")
	}
	return s.Store.Commit(c)
}

// checker is the plugin of the simulation: the mirror view, plus the
// checks on what it is handed.
type checker struct {
	mirror
	feed    *simFeed
	applied map[string]protocol.Revision
	errs    []string
}

func (c *checker) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	for _, u := range batch {
		switch {
		case u.Op == fold.OpPut && u.Rev < c.applied[u.Key]:
			c.errs = append(c.errs, fmt.Sprintf("key %s moved back: put at %d after %d", u.Key, u.Rev, c.applied[u.Key]))
		case u.Op != fold.OpPut && !u.Rev.Known() && c.feed.lastListing()[u.Key]:
			c.errs = append(c.errs, fmt.Sprintf("phantom delete of %s: the listing has it live", u.Key))
		}
		if u.Rev.Known() {
			c.applied[u.Key] = max(c.applied[u.Key], u.Rev)
		}
	}
	return c.mirror.Apply(ctx, batch, r)
}

// mutation alters one step of the repair from the outside; the simulation
// must catch each.
type mutation struct {
	name string
	// target and plugin wrap the store and plugin the repair uses.
	target func(fold.Target) fold.Target
	plugin func(fold.Plugin) fold.Plugin
	// source wraps the listing's source.
	source func(fold.Source) fold.Source
	// trustListing runs the key-listing diff whatever the retention.
	trustListing bool
}

type simRun struct {
	seed     uint64
	maxBatch int
	evicting bool
	log      []string
}

func (r *simRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

// simulate runs one seeded schedule and returns the first violation ("" if
// none) and a trace.
func simulate(t *testing.T, seed uint64, mut *mutation) (violation string, run *simRun) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	run = &simRun{seed: seed, maxBatch: []int{1, 2, 3, 7, 100}[rng.IntN(5)], evicting: rng.IntN(4) == 0}
	kv := &simKV{evicting: run.evicting}
	feed := &simFeed{kv: kv}
	dir, err := os.MkdirTemp(t.TempDir(), "sim")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir) // thousands of schedules: one store at a time on disk
	st, _, err := fold.Open(filepath.Join(dir, "fold"), fold.Options{Logger: quiet, MemTableSize: 1 << 20, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	plugin := &checker{feed: feed, applied: map[string]protocol.Revision{}}
	keys := 2 + rng.IntN(6)
	key := func() string { return fmt.Sprintf("k%d", rng.IntN(keys)) }
	prev := protocol.Cursor{}
	rounds := 3 + rng.IntN(6)
	for round := range rounds + 1 {
		// The extra last round is a clean run: no writes, no fault; the
		// fold must then have converged.
		final := round == rounds
		// Writes while the fold is down.
		for range rng.IntN(12) * b2i(!final) {
			switch p := rng.IntN(10); {
			case p < 6:
				kv.write(key(), fold.OpPut, fmt.Sprintf("v%d", rng.IntN(1000)))
			case p < 8:
				kv.write(key(), fold.OpDelete, "")
			case p < 9:
				kv.purgeMarkers(st.Cursor().Rev)
			default:
				// Not before the fold has a cursor: a value that ages out before
				// any fold saw it is in no fold (nor artifact).
				if run.evicting && st.Cursor().Rev > 0 {
					kv.evict(1 + rng.IntN(3))
				}
			}
		}
		// The run, with at most one fault.
		ctx, cancel := context.WithCancel(context.Background())
		target := &simStore{Store: st, crash: cancel}
		fault := rng.IntN(7)
		if final {
			fault = -1
		}
		switch fault {
		case 0, 1:
			target.crashAt = 1 + rng.IntN(8)
		case 2:
			target.failAt = 1 + rng.IntN(8)
		case 3:
			feed.cutAt = 1 + rng.IntN(4)
		case 4: // writes land mid-watch, superseding what was not read yet
			at := 1 + rng.IntN(6)
			feed.hook = func(n int) {
				if n == at {
					for range 1 + rng.IntN(6) {
						kv.write(key(), fold.OpPut, "mid")
					}
				}
			}
		}
		feed.n = 0
		var rt fold.Target = target
		var rp fold.Plugin = plugin
		if mut != nil && mut.target != nil {
			rt = mut.target(target)
		}
		if mut != nil && mut.plugin != nil {
			rp = mut.plugin(plugin)
		}
		refused := false
		var atRefusal map[string]entry
		var curAtRefusal protocol.Cursor
		hook := func(ctx context.Context, cause error) (fold.Source, error) {
			if cause == nil {
				return nil, nil
			}
			ret := kv.retention()
			cur := st.Cursor()
			if ret.HasEvicted() && !cur.EvictionSeen {
				cur.EvictionSeen = true
				if err := target.Commit(fold.Commit{Cursor: cur}); err != nil {
					return nil, err
				}
			}
			truth := protocol.ListingTruth(&ret, st.Cursor().EvictionSeen)
			if mut != nil && mut.trustListing {
				truth = protocol.TruthYes
			}
			if protocol.PlanRepair(protocol.RepairRelist, truth) == protocol.PlanRefuse {
				refused, atRefusal, curAtRefusal = true, rawOf(t, st), st.Cursor()
				return nil, fmt.Errorf("%w: sim: the listing is not the truth", fold.ErrRepairRefused)
			}
			src, err := feed.Watch(ctx, protocol.Cursor{})
			if err != nil {
				return nil, err
			}
			if mut != nil && mut.source != nil {
				src = mut.source(src)
			}
			_, err = repair.Relist(ctx, src, rt, rp, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "scratch"), MaxBatch: run.maxBatch, Logger: quiet})
			if err != nil {
				src.Stop()
				return nil, err
			}
			return src, nil
		}
		before := st.Cursor()
		_, ferr := fold.Follow(ctx, feed, target, plugin, fold.FollowConfig{
			Loop:   fold.LoopConfig{MaxBatch: run.maxBatch, Window: simWindow, Clock: simClock{}, Logger: quiet},
			Repair: hook,
		})
		cancel()
		feed.hook, feed.cutAt = nil, 0
		run.logf("round %d: fault %d, log %d retained %v, cursor %v -> %v, err %v", round, fault, kv.last, kv.retention().Window, before, st.Cursor(), ferr)
		if *simVerbose {
			run.logf("  writes %v\n  retained %v", kv.writes, kv.retained)
		}
		if c := st.Cursor(); c.Rev < prev.Rev || (prev.EvictionSeen && !c.EvictionSeen) {
			return fmt.Sprintf("cursor moved back: %v -> %v", prev, c), run
		}
		prev = st.Cursor()
		if len(plugin.errs) > 0 {
			return plugin.errs[0], run
		}
		if refused {
			if got := rawOf(t, st); !maps.Equal(got, atRefusal) || st.Cursor() != curAtRefusal {
				return "a refused repair changed the fold", run
			}
			return "", run // the fold stops here; an operator takes over
		}
		if target.crashed {
			continue
		}
		if ferr != nil && !errors.Is(ferr, errSimCut) && !errors.Is(ferr, repair.ErrIncompleteListing) {
			return fmt.Sprintf("the fold stopped: %v", ferr), run
		}
		if v := checkSim(t, st, kv, final); v != "" {
			return v, run
		}
	}
	return "", run
}

// checkSim: once the fold consumed everything the log retains, it equals
// every write minus every real delete (fold + tail = truth, with an empty
// tail), and the views are the plugin over the fold. A run can end before
// that (a cut listing, a batch whose commit failed at the end: the next
// run re-delivers it); then there is nothing to check yet, and final says
// whether that is allowed.
func checkSim(t *testing.T, st *fold.Store, kv *simKV, final bool) string {
	cur := st.Cursor()
	if m, more := kv.after(cur.Rev); more {
		if final {
			return fmt.Sprintf("the last run ended at cursor %v with %+v still to deliver", cur, m)
		}
		return ""
	}
	got := rawOf(t, st)
	want := kv.truthAt(kv.last)
	if !maps.Equal(got, want) {
		return fmt.Sprintf("fold at cursor %v (log at %d):\n  got  %v\n  want %v", cur, kv.last, got, want)
	}
	views := map[string]entry{}
	_ = st.ViewRange(nil, func(k, v []byte) error {
		views[string(k[2:])] = entry{value: string(v)}
		return nil
	})
	for k, e := range got {
		if views[k].value != e.value {
			return fmt.Sprintf("view of %s = %q, the fold has %q", k, views[k].value, e.value)
		}
	}
	if len(views) != len(got) {
		return fmt.Sprintf("%d views for %d keys", len(views), len(got))
	}
	return ""
}

func rawOf(t *testing.T, st fold.Reader) map[string]entry {
	m := map[string]entry{}
	if err := st.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		m[string(k)] = entry{rev, string(v)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

func schedules() int {
	if *simN > 0 {
		return *simN
	}
	return simSchedules
}

// TestSimulation runs the seeded schedules; a failure prints its seed
// number and trace, and -repair.sim.seed=N replays from that number.
func TestSimulation(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	if s := *simSeed; s != 0 {
		base = s
	}
	n := schedules()
	t.Logf("%d schedules from base seed %d (-repair.sim.seed to replay)", n, base)
	for i := range n {
		seed := base + uint64(i)
		if v, run := simulate(t, seed, nil); v != "" {
			t.Fatalf("seed %d (maxbatch %d, evicting %t): %s\ntrace:\n  %s", seed, run.maxBatch, run.evicting, v, joinLines(run.log))
		}
	}
}

var simVerbose = flag.Bool("repair.sim.v", false, "trace every write of a failing schedule")

var simSeed = flag.Uint64("repair.sim.seed", 0, "base seed of the simulation (default: the time)")

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// TestSimulationCatchesEachMutation: each repair step, removed from the
// outside, makes some schedule fail.
func TestSimulationCatchesEachMutation(t *testing.T) {
	muts := []mutation{
		{name: "noSyntheticDeletes", plugin: func(p fold.Plugin) fold.Plugin { return dropSynthetic{p} },
			target: func(t fold.Target) fold.Target { return dropSyntheticTarget{t} }},
		{name: "cursorMovesWithTheFirstBatch", target: func(t fold.Target) fold.Target { return &eagerCursor{Target: t} }},
		{name: "incompleteListingTrusted", source: func(s fold.Source) fold.Source { return &trustingSource{Source: s, stop: make(chan struct{})} }},
		{name: "listingTrustedOnAnEvictingBucket", trustListing: true},
	}
	base := *simSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	t.Logf("base seed %d", base)
	for _, m := range muts {
		t.Run(m.name, func(t *testing.T) {
			for i := range 2000 {
				if v, _ := simulate(t, base+uint64(i), &m); v != "" {
					t.Logf("caught after %d schedules: %s", i+1, firstLine(v))
					return
				}
			}
			t.Fatal("no schedule caught the mutation")
		})
	}
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// dropSynthetic hides synthetic deletes from the plugin;
// dropSyntheticTarget drops them from the commit.
type dropSynthetic struct{ fold.Plugin }

func (d dropSynthetic) Apply(ctx context.Context, b []fold.Update, r fold.Reader) (fold.Output, error) {
	return d.Plugin.Apply(ctx, slices.DeleteFunc(slices.Clone(b), synthetic), r)
}

type dropSyntheticTarget struct{ fold.Target }

func (d dropSyntheticTarget) Commit(c fold.Commit) error {
	c.Raw = slices.DeleteFunc(slices.Clone(c.Raw), synthetic)
	return d.Target.Commit(c)
}

func synthetic(u fold.Update) bool { return u.Op != fold.OpPut && !u.Rev.Known() }

// eagerCursor moves the cursor with each repair batch (a batch committed
// under the unchanged cursor) to its highest revision.
type eagerCursor struct{ fold.Target }

func (e *eagerCursor) Commit(c fold.Commit) error {
	if len(c.Raw) > 0 && c.Cursor == e.Target.Cursor() {
		revs := make([]protocol.Revision, 0, len(c.Raw))
		for _, u := range c.Raw {
			revs = append(revs, u.Rev)
		}
		c.Cursor = protocol.CursorAfterBatch(c.Cursor, revs, 0)
	}
	return e.Target.Commit(c)
}

// trustingSource turns a listing cut short into a complete one.
type trustingSource struct {
	fold.Source
	out     chan fold.Event
	started sync.Once
	stopped sync.Once
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (s *trustingSource) Events() <-chan fold.Event {
	s.started.Do(func() {
		s.out = make(chan fold.Event)
		in := s.Source.Events()
		s.wg.Go(func() {
			defer close(s.out)
			for ev := range in {
				select {
				case s.out <- ev:
				case <-s.stop:
					return
				}
			}
			select {
			case s.out <- fold.Event{Synced: true}:
			case <-s.stop:
			}
		})
	})
	return s.out
}

func (s *trustingSource) Stop() {
	s.stopped.Do(func() { close(s.stop) })
	s.Source.Stop()
	s.wg.Wait()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
