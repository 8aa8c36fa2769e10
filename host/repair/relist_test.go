package repair_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bucket is a history-1 bucket without max_age on an embedded server: its
// retention never evicts a current value, so its listing is the truth.
func bucket(t *testing.T, name string) *natskv.Bucket {
	b, _ := bucketConn(t, name)
	return b
}

func bucketConn(t *testing.T, name string) (*natskv.Bucket, *nats.Conn) {
	t.Helper()
	_, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(t.Context(), nc, natskv.BucketConfig{Name: name, History: 1}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, nc
}

func put(t *testing.T, b *natskv.Bucket, key, value string) protocol.Revision {
	t.Helper()
	rev, err := b.KV().Put(context.Background(), key, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return protocol.Revision(rev)
}

func del(t *testing.T, b *natskv.Bucket, key string) {
	t.Helper()
	if err := b.KV().Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

// purgeMarkers removes every delete marker now: the deletes leave no trace
// a watch could deliver, only the keys' absence from the listing.
func purgeMarkers(t *testing.T, b *natskv.Bucket) {
	t.Helper()
	if err := b.KV().PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
}

// mirror is a native plugin whose view is "v/<key>" = value for every live
// key; it records every update it applied, so a test can check what the
// plugin saw during a repair.
type mirror struct {
	mu   sync.Mutex
	seen []fold.Update
}

func (m *mirror) Apply(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
	var out fold.Output
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range batch {
		c := u
		c.Value = append([]byte(nil), u.Value...)
		m.seen = append(m.seen, c)
		k := []byte("v/" + u.Key)
		if u.Op == fold.OpPut {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewPut, Value: c.Value})
		} else {
			out.Views = append(out.Views, fold.ViewMutation{Key: k, Op: fold.ViewDelete})
		}
	}
	return out, nil
}

func (m *mirror) since(n int) []fold.Update {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fold.Update(nil), m.seen[n:]...)
}

func (m *mirror) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// relistHook is the Follow repair hook of these tests: the key-listing
// repair on a state-sync of the whole bucket (the host's hook adds the
// planning, status and memo around the same call).
func relistHook(feed fold.Feed, st fold.Target, p fold.Plugin, scratch string, results chan<- repair.Result) func(context.Context, error) (fold.Source, error) {
	return func(ctx context.Context, cause error) (fold.Source, error) {
		if cause == nil {
			return nil, nil // a cursorless start on an empty store: a plain state-sync
		}
		src, err := feed.Watch(ctx, protocol.Cursor{})
		if err != nil {
			return nil, err
		}
		res, err := repair.Relist(ctx, src, st, p, repair.Config{Deletes: true, ScratchDir: scratch, MaxBatch: 3, Logger: quiet})
		if err != nil {
			src.Stop()
			return nil, err
		}
		if results != nil {
			results <- res
		}
		return src, nil
	}
}

// follow runs fold.Follow in the background until the returned stop is
// called; stop returns Follow's error.
func follow(t *testing.T, b *natskv.Bucket, st fold.Target, p fold.Plugin, hook func(context.Context, error) (fold.Source, error)) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fold.Follow(ctx, b.Feed(natskv.Scope{}, natskv.WatchOptions{}), st, p, fold.FollowConfig{
			Loop:   fold.LoopConfig{Logger: quiet},
			Repair: hook,
		})
		done <- err
	}()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitCursor waits until the store's cursor reaches rev (the ceiling is
// against a hang, not a measure of speed).
func waitCursor(t *testing.T, st *fold.Store, rev protocol.Revision) {
	t.Helper()
	waitCursorWithin(t, st, rev, 2*time.Minute, 5*time.Millisecond)
}

// waitCursorWithin polls the store's cursor every interval until it
// reaches rev, failing after limit.
func waitCursorWithin(t *testing.T, st *fold.Store, rev protocol.Revision, limit, every time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for st.Cursor().Rev < rev {
		if time.Now().After(deadline) {
			t.Fatalf("cursor %v, want %d", st.Cursor(), rev)
		}
		time.Sleep(every)
	}
}

type entry struct {
	rev   protocol.Revision
	value string
}

// truth reads the bucket's live keys and their latest entries.
func truth(t *testing.T, b *natskv.Bucket) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	keys, err := b.KV().ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := b.KV().Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		m[k] = entry{protocol.Revision(e.Revision()), string(e.Value())}
	}
	return m
}

// checkFold asserts the fold equals the bucket (keys, revisions, values)
// and the views equal the plugin over the fold.
func checkFold(t *testing.T, st *fold.Store, want map[string]entry) {
	t.Helper()
	got := map[string]entry{}
	if err := st.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		got[string(k)] = entry{rev, string(v)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("fold: key %s = %+v (present %t), the bucket has %+v", k, g, ok, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("fold holds %s, which the bucket does not", k)
		}
	}
	views := 0
	if err := st.ViewRange(nil, func(k, v []byte) error {
		views++
		if e, ok := got[strings.TrimPrefix(string(k), "v/")]; !ok || e.value != string(v) {
			t.Errorf("view %s = %q, the fold has %+v (present %t)", k, v, e, ok)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if views != len(got) {
		t.Errorf("%d views for %d raw keys", views, len(got))
	}
}

// expire writes, while no fold runs, what makes the fold's cursor expire on
// a history-1 bucket: every key the fold holds is overwritten or deleted
// (deletes' markers purged), so the first retained revision passes the
// cursor; a key is deleted and made again, and a new one appears.
func expire(t *testing.T, b *natskv.Bucket, cursor protocol.Revision) {
	t.Helper()
	del(t, b, "k1")
	del(t, b, "k2")
	del(t, b, "k3")
	put(t, b, "k3", "recreated")
	put(t, b, "k0", "new")
	for i := 4; i < 10; i++ {
		put(t, b, fmt.Sprintf("k%d", i), "new")
	}
	put(t, b, "k10", "born")
	purgeMarkers(t, b)
	ret, _, err := b.Retention(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if protocol.CheckResume(cursor, ret.Window) != protocol.ResumeExpired {
		t.Fatalf("setup: cursor %d is not expired against %d..%d", cursor, ret.First, ret.Last)
	}
}

// TestRelistRepairsAnExpiredCursor: on a history-1 bucket whose deletes'
// markers were purged while the fold was down, the key-listing repair
// removes the deleted keys from the raw fold and the views, keeps the live
// ones, converges on a key deleted and made again, moves the cursor past
// the gap, and the fold goes on following. The plugin sees a synthetic
// delete only for keys the bucket does not list, and no key moving back.
// Mutations caught: no synthetic deletes (k1, k2 stay); the cursor left
// at the expired position (the next start repairs again, cursor check).
func TestRelistRepairsAnExpiredCursor(t *testing.T) {
	b := bucket(t, "rl")
	dir := t.TempDir()
	st, _, err := fold.Open(filepath.Join(dir, "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := &mirror{}
	hook := relistHook(nil, st, p, filepath.Join(dir, "scratch"), nil)
	var last protocol.Revision
	for i := range 10 {
		last = put(t, b, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	stop := follow(t, b, st, p, hook)
	waitCursor(t, st, last)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	before := st.Cursor().Rev
	old := map[string]protocol.Revision{}
	_ = st.RawRange("", func(k []byte, rev protocol.Revision, _ []byte) error { old[string(k)] = rev; return nil })

	expire(t, b, before)
	want := truth(t, b)
	results := make(chan repair.Result, 4)
	seen := p.count()
	feed := b.Feed(natskv.Scope{}, natskv.WatchOptions{})
	stop = follow(t, b, st, p, relistHook(feed, st, p, filepath.Join(dir, "scratch"), results))
	var res repair.Result
	select {
	case res = <-results:
	case <-time.After(2 * time.Minute):
		t.Fatal("no repair within 2 minutes")
	}
	// Live updates keep folding after the repair.
	live := put(t, b, "k11", "live")
	want["k11"] = entry{live, "live"}
	waitCursor(t, st, live)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkFold(t, st, want)
	if res.Deleted != 2 || res.Kept != 0 {
		t.Errorf("repair figures %+v: want 2 synthetic deletes (k1, k2)", res.Progress)
	}
	if ret, _, _ := b.Retention(context.Background()); protocol.CheckResume(st.Cursor().Rev, ret.Window) != protocol.ResumeOK {
		t.Errorf("cursor %v after the repair is not resumable (%d..%d)", st.Cursor(), ret.First, ret.Last)
	}
	for _, u := range p.since(seen) {
		if u.Op != fold.OpPut && !u.Rev.Known() {
			if _, live := want[u.Key]; live {
				t.Errorf("phantom delete: the plugin saw a synthetic delete of %s, which the bucket lists", u.Key)
			}
		}
		if u.Op == fold.OpPut && u.Rev <= old[u.Key] {
			t.Errorf("key %s moved back: put at %d, the fold had %d", u.Key, u.Rev, old[u.Key])
		}
	}
}

// failingTarget is a fault-injecting store: from its Nth commit on, every
// commit fails (a process that dies there: nothing of it is written).
type failingTarget struct {
	*fold.Store
	n, calls int
}

var errInjected = errors.New("injected: the process died here")

func (f *failingTarget) Commit(c fold.Commit) error {
	f.calls++
	if f.calls >= f.n {
		return errInjected
	}
	return f.Store.Commit(c)
}

// TestRelistCrashAtEveryCommitConverges: a repair that dies at its Nth
// commit, for every N it makes, leaves the cursor at the expired position
// and a store the next repair finishes: the fold then equals the bucket and
// the views the plugin over it. Mutation caught: committing the new cursor
// with the first data batch (the restart would resume past the keys not yet
// deleted, which stay forever).
func TestRelistCrashAtEveryCommitConverges(t *testing.T) {
	b := bucket(t, "crash")
	var last protocol.Revision
	for i := range 10 {
		last = put(t, b, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed")
	st, _, err := fold.Open(seed, fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p := &mirror{}
	stop := follow(t, b, st, p, relistHook(nil, st, p, filepath.Join(dir, "scratch"), nil))
	waitCursor(t, st, last)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	expired := st.Cursor()
	expire(t, b, expired.Rev)
	want := truth(t, b)
	feed := b.Feed(natskv.Scope{}, natskv.WatchOptions{})
	// A repair of this setup makes this many commits (MaxBatch 3): count
	// them once, then die at each.
	commits := 0
	for n := 1; ; n++ {
		cp := filepath.Join(dir, fmt.Sprintf("crash%d", n))
		if err := st.Checkpoint(cp); err != nil {
			t.Fatal(err)
		}
		cs, _, err := fold.Open(cp, fold.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ft := &failingTarget{Store: cs, n: n}
		src, err := feed.Watch(t.Context(), protocol.Cursor{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = repair.Relist(t.Context(), src, ft, &mirror{}, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "scratch"), MaxBatch: 3, Logger: quiet})
		src.Stop()
		if err == nil {
			commits = n - 1
			cs.Close()
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("crash at commit %d: %v", n, err)
		}
		if cs.Cursor() != expired {
			t.Fatalf("crash at commit %d: cursor %v, want the expired %v until the last commit", n, cs.Cursor(), expired)
		}
		if pending, _ := cs.RepairPending(); pending != (n > 1) {
			t.Fatalf("crash at commit %d: repair pending %t, want %t (data committed under the old cursor)", n, pending, n > 1)
		}
		// The restart: a fresh repair on what the dead one left.
		src, err = feed.Watch(t.Context(), protocol.Cursor{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = repair.Relist(t.Context(), src, cs, &mirror{}, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "scratch"), MaxBatch: 3, Logger: quiet})
		src.Stop()
		if err != nil {
			t.Fatalf("repair after a crash at commit %d: %v", n, err)
		}
		checkFold(t, cs, want)
		if pending, _ := cs.RepairPending(); pending {
			t.Fatalf("the finishing repair after a crash at commit %d left the repair mark", n)
		}
		cs.Close()
	}
	if commits < 3 {
		t.Fatalf("the repair made %d commits; the test wants several to crash between", commits)
	}
	t.Logf("crashed at each of %d commits; every restart converged", commits)
	st.Close()
}

// closingSource ends after n updates, before any Synced marker: a listing
// cut off by a disconnect.
type closingSource struct {
	ch chan fold.Event
}

func (s *closingSource) Events() <-chan fold.Event { return s.ch }
func (s *closingSource) Stop()                     {}
func (s *closingSource) Err() error                { return errors.New("connection lost") }

// TestIncompleteListingDeletesNothing: a listing that ends before its
// Synced marker aborts the repair with nothing written (an absent key
// proves nothing). Mutation caught: treating the end of the events as the
// end of the listing (k1..k9 deleted).
func TestIncompleteListingDeletesNothing(t *testing.T) {
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var raw []fold.Update
	for i := range 10 {
		raw = append(raw, fold.Update{Key: fmt.Sprintf("k%d", i), Value: []byte("v"), Rev: protocol.Revision(i + 1), Op: fold.OpPut})
	}
	if err := st.Commit(fold.Commit{Raw: raw, Cursor: protocol.Cursor{Rev: 10}}); err != nil {
		t.Fatal(err)
	}
	src := &closingSource{ch: make(chan fold.Event, 1)}
	src.ch <- fold.Event{Update: fold.Update{Key: "k0", Value: []byte("v"), Rev: 1, Op: fold.OpPut}}
	close(src.ch)
	_, err = repair.Relist(t.Context(), src, st, &mirror{}, repair.Config{Deletes: true, ScratchDir: filepath.Join(t.TempDir(), "scratch"), Logger: quiet})
	if !errors.Is(err, repair.ErrIncompleteListing) {
		t.Fatalf("err = %v, want ErrIncompleteListing", err)
	}
	n := 0
	_ = st.RawKeys("", func([]byte) error { n++; return nil })
	if n != 10 || st.Cursor().Rev != 10 {
		t.Fatalf("an incomplete listing changed the fold: %d keys, cursor %v", n, st.Cursor())
	}
}

// gated blocks its first Apply after arm until release: a fold that lags.
type gated struct {
	*mirror
	armed   chan struct{}
	blocked chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gated) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	select {
	case <-g.armed:
		g.once.Do(func() {
			close(g.blocked)
			<-g.release
		})
	default:
	}
	return g.mirror.Apply(ctx, batch, r)
}

// TestLiveOverrunRepairsInProcess: a whole-bucket fold stalled while a
// burst overwrites every key of a history-1 bucket many times loses the
// revisions it had not read yet (superseded, so removed); the floor guard
// ends the watch as expired, and the fold repairs in process (no stop),
// equals the bucket, and keeps following. Mutation caught: Follow without
// its repair hook stops the fold with fold.ErrCursorExpired.
func TestLiveOverrunRepairsInProcess(t *testing.T) {
	b, nc := bucketConn(t, "overrun")
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const keys = 20
	var last protocol.Revision
	for i := range keys {
		last = put(t, b, fmt.Sprintf("k%d", i), "v0")
	}
	p := &gated{mirror: &mirror{}, armed: make(chan struct{}), blocked: make(chan struct{}), release: make(chan struct{})}
	feed := b.Feed(natskv.Scope{}, natskv.WatchOptions{Buffer: 1})
	results := make(chan repair.Result, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := fold.Follow(ctx, feed, st, p, fold.FollowConfig{
			Loop:   fold.LoopConfig{Logger: quiet, MaxBatch: 1},
			Repair: relistHook(feed, st, p, filepath.Join(t.TempDir(), "scratch"), results),
		})
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Follow: %v", err)
		}
	}()
	waitCursor(t, st, last)
	close(p.armed)
	put(t, b, "k0", "stall")
	<-p.blocked

	// The burst while the fold is stalled: 20 MB over the same 20 keys.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	val := strings.Repeat("x", 2048)
	for i := 0; i < 10000; i++ {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.overrun.k%d", i%keys), []byte(fmt.Sprintf("%s%d", val, i))); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				t.Fatal("burst not acknowledged within 60s")
			}
		}
	}
	close(p.release)
	select {
	case res := <-results:
		t.Logf("repaired in process: %+v", res.Progress)
	case err := <-done:
		done <- err
		t.Fatalf("the fold stopped instead of repairing: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no repair within 2 minutes")
	}
	live := put(t, b, "after", "live")
	waitCursor(t, st, live)
	want := truth(t, b)
	checkFold(t, st, want)
}

// TestVerifyRefusalWritesNothing: a Verify error (the host's re-read of
// retention after the listing finding eviction switched on) aborts the
// repair before its first write. Mutation caught: Verify called after the
// diff (k1..k9 deleted).
func TestVerifyRefusalWritesNothing(t *testing.T) {
	b := bucket(t, "verify")
	put(t, b, "k0", "v")
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var raw []fold.Update
	for i := range 10 {
		raw = append(raw, fold.Update{Key: fmt.Sprintf("k%d", i), Value: []byte("old"), Rev: 1, Op: fold.OpPut})
	}
	if err := st.Commit(fold.Commit{Raw: raw, Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	src, err := b.Feed(natskv.Scope{}, natskv.WatchOptions{}).Watch(t.Context(), protocol.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	refused := errors.New("refused: eviction switched on")
	_, err = repair.Relist(t.Context(), src, st, &mirror{}, repair.Config{Deletes: true, ScratchDir: filepath.Join(t.TempDir(), "s"), Logger: quiet,
		Verify: func(context.Context) error { return refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the Verify error", err)
	}
	n := 0
	_ = st.RawKeys("", func([]byte) error { n++; return nil })
	if n != 10 || st.Cursor().Rev != 1 {
		t.Fatalf("a refused repair changed the fold: %d keys, cursor %v", n, st.Cursor())
	}
}

// resyncSourceFake is a fault-injecting source: a state-sync that was cut
// by a reconnect and started over, as the natskv watcher does (it skips
// the revisions it delivered and hands on the rest), so a key written
// between the two deliveries comes twice, at its old revision and at its
// new one. It delivers its events, then the Synced marker.
type resyncSourceFake struct {
	ch   chan fold.Event
	head protocol.Revision
}

func newResyncSourceFake(head protocol.Revision, updates ...fold.Update) *resyncSourceFake {
	s := &resyncSourceFake{ch: make(chan fold.Event, len(updates)+1), head: head}
	for _, u := range updates {
		s.ch <- fold.Event{Update: u}
	}
	s.ch <- fold.Event{Synced: true}
	return s
}

func (s *resyncSourceFake) Events() <-chan fold.Event      { return s.ch }
func (s *resyncSourceFake) Stop()                          {}
func (s *resyncSourceFake) Err() error                     { return nil }
func (s *resyncSourceFake) HeadAtStart() protocol.Revision { return s.head }

// TestRelistedKeyTakesItsNewestEntry: a key the listing delivers twice (a
// state-sync started over after a reconnect) is repaired to its newest
// entry, whatever the first delivery matched: k1 and k2, unchanged at
// first, are deleted by the markers that come after; k3, changed twice,
// ends at its last value; k4 is new. The plugin sees each key once, in
// key order. Mutations caught: a listed delete marker taken as unchanged
// when the fold holds no entry at its revision (k1, k2 stay); a sorted
// chunk that yields every entry of a key instead of its newest (the
// plugin sees k3 twice). Across spilled runs the newest entry is
// TestSorterMatchesModel's.
func TestRelistedKeyTakesItsNewestEntry(t *testing.T) {
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := &mirror{}
	raw := []fold.Update{
		{Key: "k1", Value: []byte("a"), Rev: 1, Op: fold.OpPut},
		{Key: "k2", Value: []byte("b"), Rev: 2, Op: fold.OpPut},
		{Key: "k3", Value: []byte("c"), Rev: 3, Op: fold.OpPut},
	}
	out, _ := p.Apply(t.Context(), raw, st)
	if err := st.Commit(fold.Commit{Raw: raw, Views: out.Views, Cursor: protocol.Cursor{Rev: 3}}); err != nil {
		t.Fatal(err)
	}
	seen := p.count()
	src := newResyncSourceFake(10,
		fold.Update{Key: "k1", Value: []byte("a"), Rev: 1, Op: fold.OpPut},
		fold.Update{Key: "k2", Value: []byte("b"), Rev: 2, Op: fold.OpPut},
		fold.Update{Key: "k3", Value: []byte("c2"), Rev: 5, Op: fold.OpPut},
		// The state-sync started over here.
		fold.Update{Key: "k1", Rev: 7, Op: fold.OpDelete},
		fold.Update{Key: "k3", Value: []byte("c3"), Rev: 8, Op: fold.OpPut},
		fold.Update{Key: "k4", Value: []byte("d"), Rev: 9, Op: fold.OpPut},
		fold.Update{Key: "k2", Rev: 10, Op: fold.OpPurge},
	)
	res, err := repair.Relist(t.Context(), src, st, p, repair.Config{Deletes: true, ScratchDir: filepath.Join(t.TempDir(), "s"), MaxBatch: 3, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	checkFold(t, st, map[string]entry{"k3": {8, "c3"}, "k4": {9, "d"}})
	var got []string
	for _, u := range p.since(seen) {
		got = append(got, fmt.Sprintf("%s:%v@%d", u.Key, u.Op, u.Rev))
	}
	want := []string{
		fmt.Sprintf("k1:%v@7", fold.OpDelete), fmt.Sprintf("k2:%v@10", fold.OpPurge),
		fmt.Sprintf("k3:%v@8", fold.OpPut), fmt.Sprintf("k4:%v@9", fold.OpPut),
	}
	if !slices.Equal(got, want) {
		t.Errorf("the plugin saw %v, want %v", got, want)
	}
	if st.Cursor().Rev != 10 || res.Deleted != 0 || res.Folded != 4 {
		t.Errorf("cursor %v, figures %+v: want cursor 10, 4 folded, no synthetic delete", st.Cursor(), res.Progress)
	}
}
