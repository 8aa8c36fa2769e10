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
// store) and both cursor-expiry repairs (the key-listing diff, repair.Relist,
// and the artifact restore, repair.Restore), driven by a simulated NATS KV
// log (history 1: a write removes the key's previous message; delete markers
// that get purged; eviction of the oldest messages, current values
// included) and a fault-injecting store (a transient commit failure, or a
// crash at commit N: every later commit fails and the process dies). Time
// never moves (the loop's clock never fires), so batches close at MaxBatch,
// at the Synced marker and at the source's end: a seed fixes the whole run.
//
// The artifacts are real stores: a second fold of the same simulated bucket
// (another node, simPeer) follows it through fold.Follow, and now and then
// publishes a Checkpoint of its store, opened as a store. When the fold's
// cursor expired, the repair mirrors the host's plan: on an evicting bucket
// (where the key listing is not the truth) a restore from an artifact that
// protocol.RestoreAllowed accepts, or a refusal when there is none; where
// the listing is the truth, the key-listing diff, or in some schedules a
// restore. A new fold on an evicting bucket starts from an artifact too
// (protocol.CursorlessStartNeedsRepair). The restore runs with the store's
// faults, a Listed that fails, and writes (and evictions) landing while it
// runs, before its Verify.
//
// It asserts, after every run that ends without a crash: the fold equals
// every write minus every real delete up to its cursor, with no repair mark
// left; the views are the plugin over the fold; the cursor never moved back;
// the plugin never saw a key move back nor a synthetic delete of a key the
// listing had live (a relist's state-sync, or the restore's Listed answer
// for that key). A refused repair must leave the fold as it was.
//
// One known gap is counted, not failed (checker.Apply; -repair.sim.strict
// fails it): a restore after a key-listing repair that died midway, from an
// artifact older than that repair's listing, puts back the artifact's value
// of a key the dead repair had deleted at a newer revision.
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
// repair's axiom: a purge never removes a marker a fold has not read yet
// while its cursor can still resume (NATS keeps markers younger than 30
// minutes by default; a marker purged from the middle of the log, with the
// first revision unmoved, is invisible to every check: RATIONALE.md). So
// every marker goes when the purge leaves every cursor expired (the
// repair's job), otherwise only those at or below the lowest cursor that
// stays resumable. The cursors are the fold's and those of the published
// artifacts: a restore resumes from an artifact's cursor and needs the
// markers after it as much as a fold needs those after its own (an artifact
// is another node's fold, as old as when it was published).
func (k *simKV) purgeMarkers(cursors ...protocol.Revision) {
	k.mu.Lock()
	defer k.mu.Unlock()
	all := slices.DeleteFunc(slices.Clone(k.retained), func(o simMsg) bool { return o.op != fold.OpPut })
	first := k.last + 1
	if len(all) > 0 {
		first = all[0].seq
	}
	bound, kept := protocol.Revision(0), false
	for _, c := range cursors {
		if first <= c+1 && (!kept || c < bound) {
			bound, kept = c, true
		}
	}
	if !kept {
		k.retained = all
		return
	}
	k.retained = slices.DeleteFunc(k.retained, func(o simMsg) bool { return o.op != fold.OpPut && o.seq <= bound })
}

// live reports whether the bucket lists key live now (natskv's
// Bucket.Listed: a Get that finds a value).
func (k *simKV) live(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range k.retained {
		if m.key == key {
			return m.op == fold.OpPut
		}
	}
	return false
}

// takesFirst reports whether a write of key would remove the first
// retained message (history 1), which is what moves the window's start.
func (k *simKV) takesFirst(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.retained) > 0 && k.retained[0].key == key
}

func (k *simKV) head() protocol.Revision {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
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
// commit crashAt, or at the crashAtRepair-th commit of a repair (one that
// sets or clears the repair mark).
type simStore struct {
	*fold.Store
	calls, failAt, crashAt     int
	repairCalls, crashAtRepair int
	crash                      func()
	crashed                    bool
	// committed, if set, runs after every commit of updates.
	committed func()
}

var errSimCrash = errors.New("sim: the process died")

func (s *simStore) Commit(c fold.Commit) error {
	s.calls++
	if c.Repair != fold.RepairKeep {
		s.repairCalls++
	}
	if s.crashed || (s.crashAt > 0 && s.calls == s.crashAt) || (s.crashAtRepair > 0 && s.repairCalls == s.crashAtRepair) {
		if !s.crashed {
			s.crashed = true
			s.crash()
		}
		return errSimCrash
	}
	if s.calls == s.failAt {
		return errors.New("sim: transient commit failure")
	}
	if err := s.Store.Commit(c); err != nil {
		return err
	}
	if s.committed != nil && len(c.Raw) > 0 {
		s.committed()
	}
	return nil
}

// simPeer is another node's fold of the same simulated bucket: a real
// store that follows it through fold.Follow, without faults, and publishes
// artifacts (a Checkpoint of its store, which a restore opens as a store,
// as the host opens an imported artifact). It never expires: it catches up
// before every change to the log that could pass its cursor (an eviction,
// a purge, a write that removes the first retained message), so it is
// exact at every cursor it publishes. It keeps the last simArtifacts
// artifacts.
type simPeer struct {
	kv       *simKV
	feed     *simFeed
	store    *fold.Store
	dir      string
	maxBatch int
	arts     []simArtifact
	err      error // the first failure (a bug of the simulation)
}

// simArtifact is a published artifact: a checkpoint of the peer's store
// and its cursor.
type simArtifact struct {
	dir    string
	cursor protocol.Cursor
}

const simArtifacts = 3

var simStoreOpts = fold.Options{Logger: quiet, MemTableSize: 1 << 20, CacheSize: 1 << 20}

func newSimPeer(kv *simKV, dir string, maxBatch int) (*simPeer, error) {
	st, _, err := fold.Open(filepath.Join(dir, "peer"), simStoreOpts)
	if err != nil {
		return nil, err
	}
	return &simPeer{kv: kv, feed: &simFeed{kv: kv}, store: st, dir: dir, maxBatch: maxBatch}, nil
}

// catchUp folds the log up to its head into the peer.
func (p *simPeer) catchUp() {
	if p == nil || p.err != nil {
		return
	}
	head := p.kv.head()
	if p.store.Cursor().Rev >= head {
		return
	}
	_, err := fold.Follow(context.Background(), p.feed, p.store, simViews{}, fold.FollowConfig{
		Loop: fold.LoopConfig{MaxBatch: p.maxBatch, Window: simWindow, Clock: simClock{}, Logger: quiet},
	})
	switch {
	case err != nil:
		p.err = fmt.Errorf("the peer fold stopped: %w", err)
	case p.store.Cursor().Rev < head:
		p.err = fmt.Errorf("the peer fold stopped at %v, the log is at %d", p.store.Cursor(), head)
	}
}

// publish makes an artifact of the peer as it is now, unless it would be
// of no use to a fold at cursor behind (not ahead of it: a restore only
// moves forward) or the last one is already at this cursor: checkpoints
// and opens are most of a schedule's cost.
func (p *simPeer) publish(behind protocol.Revision) {
	cur := p.store.Cursor()
	if p.err != nil || cur.Rev <= behind || (len(p.arts) > 0 && p.arts[len(p.arts)-1].cursor.Rev == cur.Rev) {
		return
	}
	dir := filepath.Join(p.dir, fmt.Sprintf("artifact%d", cur.Rev))
	if err := p.store.Checkpoint(dir); err != nil {
		p.err = err
		return
	}
	p.arts = append(p.arts, simArtifact{dir, cur})
	if len(p.arts) > simArtifacts {
		p.err = os.RemoveAll(p.arts[0].dir)
		p.arts = p.arts[1:]
	}
}

// cursors are the revisions marker purges must spare (simKV.purgeMarkers).
func (p *simPeer) cursors() []protocol.Revision {
	if p == nil {
		return nil
	}
	c := []protocol.Revision{p.store.Cursor().Rev}
	for _, a := range p.arts {
		c = append(c, a.cursor.Rev)
	}
	return c
}

// simViews is the peer's plugin: the mirror's views, nothing recorded.
type simViews struct{}

func (simViews) Apply(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
	var out fold.Output
	for _, u := range batch {
		k := []byte("v/" + u.Key)
		if u.Op == fold.OpPut {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewPut, Value: u.Value})
		} else {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewDelete})
		}
	}
	return out, nil
}

// checker is the plugin of the simulation: the mirror view, plus the
// checks on what it is handed.
type checker struct {
	mirror
	feed *simFeed
	// applied is the newest revision of each key in a committed batch.
	applied map[string]protocol.Revision
	// deleted: the newest revision applied for the key was a delete.
	deleted map[string]bool
	// asked, during a restore, is the bucket's answer to each Listed
	// question the restore asked (the truth, whatever the restore made of
	// it); outside one, a synthetic delete is checked against the last
	// state-sync's listing.
	asked map[string]bool
	// resurrected counts the restores' puts older than a delete the plugin
	// applied, of a key the fold no longer held (see Apply).
	resurrected int
	staged      []fold.Update // the last batch applied, until committed
	errs        []string
}

var simStrict = flag.Bool("repair.sim.strict", false, "fail a restore's put older than a delete the plugin applied (a key a key-listing repair that died midway deleted)")

func (c *checker) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	for _, u := range batch {
		switch {
		case u.Op == fold.OpPut && u.Rev < c.applied[u.Key] && c.asked != nil && c.deleted[u.Key] && !*simStrict && !holds(r, u.Key):
			// A known gap, not a violation the simulation stops at: a
			// key-listing repair died after folding a listed delete marker
			// newer than the artifact a restore then takes (its cursor is
			// below the listing's head); the fold keeps no tombstone, so the
			// restore cannot tell the key was deleted after the artifact, and
			// takes the artifact's older value (consistent with the cursor it
			// moves to; the resume re-delivers the delete). ABI.md promises a
			// repair's put is never older than what the plugin applied.
			c.resurrected++
		case u.Op == fold.OpPut && u.Rev < c.applied[u.Key]:
			c.errs = append(c.errs, fmt.Sprintf("key %s moved back: put at %d after %d", u.Key, u.Rev, c.applied[u.Key]))
		case u.Op != fold.OpPut && !u.Rev.Known() && c.asked != nil && c.asked[u.Key]:
			c.errs = append(c.errs, fmt.Sprintf("phantom delete of %s by a restore: the bucket lists it live", u.Key))
		case u.Op != fold.OpPut && !u.Rev.Known() && c.asked == nil && c.feed.lastListing()[u.Key]:
			c.errs = append(c.errs, fmt.Sprintf("phantom delete of %s: the listing has it live", u.Key))
		}
	}
	c.staged = slices.Clone(batch)
	return c.mirror.Apply(ctx, batch, r)
}

// commit records the last batch applied as committed: what the plugin
// applied before is what its views hold, which a crash does not undo (a
// batch whose commit died is lost with the process).
func (c *checker) commit() {
	for _, u := range c.staged {
		if u.Rev.Known() && u.Rev >= c.applied[u.Key] {
			c.applied[u.Key] = u.Rev
			c.deleted[u.Key] = u.Op != fold.OpPut
		}
	}
	c.staged = nil
}

func holds(r fold.Reader, key string) bool {
	_, ok, err := r.Get(key)
	return ok || err != nil
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
	// restoreTarget wraps the store a restore from an artifact at cursor
	// art uses (after target).
	restoreTarget func(t fold.Target, art protocol.Cursor) fold.Target
	// listed wraps the restore's Listed.
	listed func(listedFunc) listedFunc
}

type listedFunc = func(context.Context, string) (bool, error)

type simRun struct {
	seed     uint64
	maxBatch int
	evicting bool
	peer     bool // artifacts are published: restores can run
	restores int  // restores that ran to their end
	// resurrected: see checker.resurrected.
	resurrected int
	log         []string
}

func (r *simRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

// simMaxRepairs bounds the repairs of one run: each fault strikes once
// per run, so a run that keeps repairing is stuck.
const simMaxRepairs = 20

// errNoArtifact: no published artifact can restore the fold now.
var errNoArtifact = errors.New("sim: no artifact can restore the fold")

// simulate runs one seeded schedule and returns the first violation ("" if
// none) and a trace.
func simulate(t *testing.T, seed uint64, mut *mutation) (violation string, run *simRun) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	run = &simRun{seed: seed, maxBatch: []int{1, 2, 3, 7, 100}[rng.IntN(5)], evicting: rng.IntN(3) == 0}
	run.peer = run.evicting || rng.IntN(2) == 0
	kv := &simKV{evicting: run.evicting}
	feed := &simFeed{kv: kv}
	dir, err := os.MkdirTemp(t.TempDir(), "sim")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir) // thousands of schedules: one store at a time on disk
	st, _, err := fold.Open(filepath.Join(dir, "fold"), simStoreOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var peer *simPeer
	if run.peer {
		if peer, err = newSimPeer(kv, dir, []int{1, 3, 100}[rng.IntN(3)]); err != nil {
			t.Fatal(err)
		}
		defer peer.store.Close()
	}
	plugin := &checker{feed: feed, applied: map[string]protocol.Revision{}, deleted: map[string]bool{}}
	defer func() { run.resurrected = plugin.resurrected }()
	keys := 2 + rng.IntN(6)
	key := func() string { return fmt.Sprintf("k%d", rng.IntN(keys)) }
	// write, purge and evict change the log; the peer catches up first
	// when the change could pass its cursor.
	write := func(k string, op fold.Op, v string) {
		if kv.takesFirst(k) {
			peer.catchUp()
		}
		kv.write(k, op, v)
	}
	purge := func() {
		peer.catchUp()
		kv.purgeMarkers(append(peer.cursors(), st.Cursor().Rev)...)
	}
	evict := func(n int) {
		// Not before the fold has a cursor: a value that ages out before
		// any fold saw it is in no fold (nor artifact).
		if run.evicting && st.Cursor().Rev > 0 {
			peer.catchUp()
			kv.evict(n)
		}
	}
	prev := protocol.Cursor{}
	restart := false // the last run crashed
	rounds := 3 + rng.IntN(6)
	for round := range rounds + 1 {
		// The extra last round is a clean run: no writes, no fault; the
		// fold must then have converged.
		final := round == rounds
		// Writes while the fold is down; now and then the peer publishes an
		// artifact (mostly after catching up).
		ops := rng.IntN(12) * b2i(!final)
		if restart && rng.IntN(2) == 0 {
			ops = 0 // the process restarts right after its crash
		}
		restart = false
		for range ops {
			if peer != nil && rng.IntN(5) == 0 {
				if rng.IntN(3) != 0 {
					peer.catchUp()
				}
				peer.publish(st.Cursor().Rev)
			}
			switch p := rng.IntN(10); {
			case p < 6:
				write(key(), fold.OpPut, fmt.Sprintf("v%d", rng.IntN(1000)))
			case p < 8:
				write(key(), fold.OpDelete, "")
			case p < 9:
				purge()
			default:
				evict(1 + rng.IntN(3))
			}
		}
		if peer != nil && peer.err != nil {
			return peer.err.Error(), run
		}
		// The run, with at most one fault.
		ctx, cancel := context.WithCancel(context.Background())
		target := &simStore{Store: st, crash: cancel, committed: plugin.commit}
		fault := rng.IntN(8)
		if ret := kv.retention(); protocol.CheckResume(st.Cursor().Rev, ret.Window) == protocol.ResumeExpired {
			// A repair will run: kill it midway more often, the more so
			// when the next one can take an older artifact.
			allowed := 0
			if peer != nil {
				for _, a := range peer.arts {
					allowed += b2i(protocol.RestoreAllowed(a.cursor.Rev, st.Cursor().Rev, ret.Window))
				}
			}
			if rng.IntN(6) < 2+b2i(allowed > 1) {
				fault = 1
			}
		}
		if final {
			fault = -1
		}
		// midRestore, if set, lands writes (and evictions) while a restore
		// runs: at its listedAt-th Listed question, or in its Verify.
		var midRestore func()
		listedAt, listedFailAt := 0, 0
		switch fault {
		case 0:
			target.crashAt = 1 + rng.IntN(8)
		case 1:
			target.crashAtRepair = 2 + rng.IntN(3) // after its first batch
		case 2: // transient failures: a commit, and the bucket a restore asks
			target.failAt = 1 + rng.IntN(8)
			listedFailAt = 1
		case 3:
			feed.cutAt = 1 + rng.IntN(4)
		case 4: // writes land mid-watch, superseding what was not read yet
			at := 1 + rng.IntN(6)
			feed.hook = func(n int) {
				if n == at {
					for range 1 + rng.IntN(6) {
						write(key(), fold.OpPut, "mid")
					}
				}
			}
		case 5:
			listedAt = rng.IntN(3) // 0: in Verify
			midRestore = func() {
				midRestore = nil
				for range 1 + rng.IntN(6) {
					write(key(), fold.OpPut, "mid")
				}
				if rng.IntN(2) == 0 {
					evict(1 + rng.IntN(3))
				}
			}
		case 6:
			listedFailAt = 1 + rng.IntN(2)
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
		refuse := func(why string) error {
			refused, atRefusal, curAtRefusal = true, rawOf(t, st), st.Cursor()
			return fmt.Errorf("%w: sim: %s", fold.ErrRepairRefused, why)
		}
		// restore mirrors the host's (host/repairrun.go): an artifact
		// protocol.RestoreAllowed accepts, opened as a store, Listed asking
		// the bucket, Verify re-reading retention, then the watch from the
		// new cursor.
		restore := func(ctx context.Context, ret protocol.Retention) (fold.Source, error) {
			var arts []simArtifact
			if peer != nil {
				for _, a := range peer.arts {
					if protocol.RestoreAllowed(a.cursor.Rev, st.Cursor().Rev, ret.Window) {
						arts = append(arts, a)
					}
				}
			}
			if len(arts) == 0 {
				return nil, errNoArtifact
			}
			// The newest, as the host takes; after a repair that died
			// midway, the oldest: the fold may hold entries newer than it
			// (a dead key-listing repair's), which must not move back.
			pick := arts[len(arts)-1]
			if pending, _ := st.RepairPending(); pending {
				pick = arts[0]
			}
			art, _, err := fold.Open(pick.dir, simStoreOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer art.Close()
			if art.Cursor() != pick.cursor {
				t.Fatalf("the artifact at %v opens at %v", pick.cursor, art.Cursor())
			}
			asked, calls := map[string]bool{}, 0
			plugin.asked = asked
			defer func() { plugin.asked = nil }()
			var listed listedFunc = func(_ context.Context, key string) (bool, error) {
				if calls++; calls == listedFailAt {
					listedFailAt = 0 // one failure per run
					return false, errors.New("sim: the bucket did not answer")
				}
				if calls == listedAt && midRestore != nil {
					midRestore()
				}
				live := kv.live(key)
				asked[key] = live
				return live, nil
			}
			if mut != nil && mut.listed != nil {
				listed = mut.listed(listed)
			}
			target := rt
			if mut != nil && mut.restoreTarget != nil {
				target = mut.restoreTarget(rt, art.Cursor())
			}
			res, err := repair.Restore(ctx, target, art, rp, repair.RestoreConfig{
				MaxBatch: run.maxBatch,
				Listed:   listed,
				Verify: func(_ context.Context, c protocol.Cursor) error {
					if listedAt == 0 && midRestore != nil {
						midRestore()
					}
					ret := kv.retention()
					if v := protocol.CheckResume(c.Rev, ret.Window); v != protocol.ResumeOK {
						return fmt.Errorf("%w: sim: retention passed the artifact's cursor %d (%v): %v", fold.ErrCursorExpired, c.Rev, ret.Window, v)
					}
					return nil
				},
				Logger: quiet,
			})
			run.logf("  restore from the artifact at %v: cursor %v, folded %d, deleted %d, kept %d, err %v", art.Cursor(), st.Cursor(), res.Folded, res.Deleted, res.Kept, err)
			if err != nil {
				return nil, err
			}
			run.restores++
			return feed.Watch(ctx, st.Cursor())
		}
		repairs := 0
		hook := func(ctx context.Context, cause error) (fold.Source, error) {
			if repairs++; repairs > simMaxRepairs {
				cancel()
				return nil, ctx.Err()
			}
			ret := kv.retention()
			if cause == nil {
				// A start without a cursor: as the host decides
				// (protocol.CursorlessStartNeedsRepair). A fold that holds
				// data without a cursor is a restore that died midway.
				has := len(rawOf(t, st)) > 0
				truth := protocol.ListingTruth(&ret, false)
				if !protocol.CursorlessStartNeedsRepair(protocol.RepairAuto, has, truth) {
					return nil, nil
				}
				if truth != protocol.TruthYes {
					src, err := restore(ctx, ret)
					if errors.Is(err, errNoArtifact) {
						if !has {
							return nil, nil // the fleet's first node: a state-sync
						}
						return nil, refuse("no artifact to finish the restore with")
					}
					return src, err
				}
			}
			cur := st.Cursor()
			if ret.HasEvicted() && !cur.EvictionSeen && cur.Rev.Known() {
				cur.EvictionSeen = true
				if err := target.Commit(fold.Commit{Cursor: cur}); err != nil {
					return nil, err
				}
			}
			truth := protocol.ListingTruth(&ret, st.Cursor().EvictionSeen)
			if mut != nil && mut.trustListing {
				truth = protocol.TruthYes
			}
			plan := protocol.PlanRepair(protocol.RepairAuto, truth)
			pending, _ := st.RepairPending()
			if plan == protocol.PlanKeyListingDiff && peer != nil && rng.IntN(4) < 2+b2i(pending) {
				plan = protocol.PlanRestore // a fold whose repair is "restore"
			}
			if plan == protocol.PlanRestore {
				src, err := restore(ctx, ret)
				switch {
				case !errors.Is(err, errNoArtifact):
					return src, err
				case truth != protocol.TruthYes:
					return nil, refuse("the listing is not the truth, and no artifact can restore the fold")
				}
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
		if peer != nil && peer.err != nil {
			return peer.err.Error(), run
		}
		if repairs > simMaxRepairs {
			return fmt.Sprintf("more than %d repairs in one run", simMaxRepairs), run
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
			restart = true
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
	if pending, err := st.RepairPending(); err != nil || pending {
		return fmt.Sprintf("the fold at cursor %v still says a repair is pending (%v)", cur, err)
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
	restored, evicting, resurrected := 0, 0, []uint64(nil)
	for i := range n {
		seed := base + uint64(i)
		v, run := simulate(t, seed, nil)
		if v != "" {
			t.Fatalf("seed %d (maxbatch %d, evicting %t, artifacts %t): %s\ntrace:\n  %s", seed, run.maxBatch, run.evicting, run.peer, v, joinLines(run.log))
		}
		restored += b2i(run.restores > 0)
		evicting += b2i(run.restores > 0 && run.evicting)
		if run.resurrected > 0 {
			resurrected = append(resurrected, seed)
		}
	}
	t.Logf("%d of %d schedules restored from an artifact (%d of them on an evicting bucket)", restored, n, evicting)
	if len(resurrected) > 0 {
		t.Logf("%d schedules restored a key a dead key-listing repair had deleted at a newer revision (the known gap, checker.Apply; -repair.sim.strict fails them), seeds %v", len(resurrected), resurrected)
	}
	if n >= 100 && (restored == 0 || evicting == 0) {
		t.Fatal("the restore was not exercised")
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
		{name: "restoreCursorMovesWithTheFirstBatch", restoreTarget: func(t fold.Target, art protocol.Cursor) fold.Target {
			return &eagerRestoreCursor{Target: t, art: art}
		}},
		{name: "restoreIgnoresTheListing", listed: func(l listedFunc) listedFunc {
			return func(ctx context.Context, key string) (bool, error) {
				_, err := l(ctx, key) // asked, and the answer ignored
				return false, err
			}
		}},
		{name: "restoreMovesKeysBack", restoreTarget: func(t fold.Target, _ protocol.Cursor) fold.Target { return oldestRevs{t} }},
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
					if w, _ := simulate(t, base+uint64(i), nil); w != "" {
						t.Fatalf("seed %d fails without the mutation too: %s", base+uint64(i), firstLine(w))
					}
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

// eagerRestoreCursor moves the cursor to the artifact's (as the restore's
// final commit would: the fold's eviction memo joined) with the first
// restore batch instead of the final commit.
type eagerRestoreCursor struct {
	fold.Target
	art protocol.Cursor
}

func (e *eagerRestoreCursor) Commit(c fold.Commit) error {
	if len(c.Raw) > 0 && c.Cursor == e.Target.Cursor() && c.Cursor.Rev < e.art.Rev {
		next := e.art
		next.EvictionSeen = next.EvictionSeen || c.Cursor.EvictionSeen
		if !next.EvictionSeen {
			next.MsgUnixNano = 0
		}
		c.Cursor = next
	}
	return e.Target.Commit(c)
}

// oldestRevs shows the restore the fold's entries at the oldest revision,
// so every entry the artifact also holds is taken from it: the "never move
// a key back" half of protocol.RestoreKey bypassed.
type oldestRevs struct{ fold.Target }

func (o oldestRevs) RawRange(prefix string, fn func([]byte, protocol.Revision, []byte) error) error {
	return o.Target.RawRange(prefix, func(k []byte, _ protocol.Revision, v []byte) error { return fn(k, 1, v) })
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
